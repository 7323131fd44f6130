//! Starting and stopping the embedded cluster from Python.

use crate::records::StoreStats;
use crate::runtime;
use oxray_runtime::cluster::{ClusterConfig, HeadRole, RunningCluster, start_node};
use pyo3::prelude::*;
use std::collections::HashMap;
use std::path::PathBuf;

#[pyclass(module = "oxray._native")]
pub(crate) struct Cluster {
    inner: Option<RunningCluster>,
    #[pyo3(get)]
    agent_address: String,
    #[pyo3(get)]
    head_address: String,
    #[pyo3(get)]
    token: String,
    #[pyo3(get)]
    node_id: String,
    #[pyo3(get)]
    session_dir: String,
    #[pyo3(get)]
    shm_dir: String,
    /// `host:port` of the head's HTTP server (Jobs API), when it runs one.
    #[pyo3(get)]
    dashboard_address: Option<String>,
    /// `host:port` of this node's Prometheus endpoint, when it serves one.
    #[pyo3(get)]
    metrics_address: Option<String>,
}

#[pyfunction]
#[pyo3(signature = (*, session_dir, python, cwd, num_cpus=None, num_gpus=None, resources=HashMap::new(),
    memory=None, object_store_memory=None, worker_env=Vec::new(), host="127.0.0.1".to_string(), token=None,
    forward_output=true, join=None, port=0, state_dir=None, nodes_may_join=false, dashboard=None, metrics=None,
    labels=HashMap::new()))]
#[allow(clippy::too_many_arguments, reason = "one argument per keyword of the Python start_cluster()")]
pub(crate) fn start_cluster(
    py: Python<'_>,
    session_dir: PathBuf,
    python: String,
    cwd: PathBuf,
    num_cpus: Option<f64>,
    num_gpus: Option<usize>,
    resources: HashMap<String, f64>,
    memory: Option<u64>,
    object_store_memory: Option<u64>,
    worker_env: Vec<(String, String)>,
    host: String,
    token: Option<String>,
    forward_output: bool,
    join: Option<String>,
    port: u16,
    state_dir: Option<PathBuf>,
    nodes_may_join: bool,
    dashboard: Option<(String, u16)>,
    metrics: Option<(String, u16)>,
    labels: HashMap<String, String>,
) -> PyResult<Cluster> {
    let (head, agent_port) = match join {
        Some(address) => (HeadRole::Join { address }, port),
        None => (HeadRole::Local { port, state_dir }, 0),
    };
    let cfg = ClusterConfig {
        head,
        agent_port,
        num_cpus,
        num_gpus,
        resources,
        memory,
        object_store_memory,
        session_dir,
        python,
        cwd,
        worker_env,
        host,
        token,
        forward_output,
        nodes_may_join,
        dashboard,
        metrics,
        labels,
    };
    let started = py.detach(|| runtime().block_on(start_node(cfg)));
    let running = started.map_err(crate::error::cluster_error)?;

    Ok(Cluster {
        agent_address: running.agent_address.clone(),
        head_address: running.head_address.clone(),
        token: running.token.clone(),
        node_id: running.node_id.hex(),
        session_dir: running.session_dir.display().to_string(),
        shm_dir: running.shm_dir.display().to_string(),
        dashboard_address: running.dashboard_address.clone(),
        metrics_address: running.metrics_address.clone(),
        inner: Some(running),
    })
}

impl Cluster {
    /// The agent's service, for a client in this same process to call directly.
    pub(crate) fn local_service(&self) -> Option<oxray_runtime::agent::AgentService> {
        self.inner
            .as_ref()
            .map(|c| oxray_runtime::agent::AgentService { shared: c.agent.clone(), address: c.agent_address.clone() })
    }
}

#[pymethods]
impl Cluster {
    /// Kills all workers, removes the object store's files and stops the servers.
    fn shutdown(&mut self, py: Python<'_>) {
        if let Some(running) = self.inner.take() {
            py.detach(|| runtime().block_on(running.shutdown()));
        }
    }

    /// Starts the head's HTTP server (Jobs and State APIs, dashboard) on `host:port` if
    /// it has none yet; returns its `host:port`.
    fn serve_http(&mut self, py: Python<'_>, host: String, port: u16) -> PyResult<String> {
        let Some(running) = self.inner.as_mut() else {
            return Err(pyo3::exceptions::PyRuntimeError::new_err("the cluster is shut down"));
        };
        let address =
            py.detach(|| runtime().block_on(running.serve_http(&host, port))).map_err(crate::error::cluster_error)?;
        self.dashboard_address = Some(address.clone());
        Ok(address)
    }

    fn worker_pids(&self) -> Vec<u32> {
        self.inner.as_ref().map(|c| c.agent.state.lock().worker_pids()).unwrap_or_default()
    }

    /// The object store's figures; None once the cluster is shut down.
    fn store_stats(&self) -> Option<StoreStats> {
        let c = self.inner.as_ref()?;
        let stats = c.agent.state.lock().store_stats();
        Some(stats.into())
    }
}
