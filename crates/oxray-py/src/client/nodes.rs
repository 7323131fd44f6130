//! The cluster's nodes: listing them as `NodeInfo` records, and following the
//! output of this job's workers on them.

use super::Client;
use crate::error::{bad_id, client_error as rpc_err};
use crate::records::NodeInfo;
use crate::runtime;
use oxray_runtime::ids::JobId;
use oxray_runtime::proto::Empty;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

#[pymethods]
impl Client {
    /// Starts this node's worker template for workers with these extra environment variables
    /// (`OXRAY_TEMPLATE_PRELOAD` names the modules it imports), ahead of the first such worker.
    fn warm_workers(&self, py: Python<'_>, env_vars: std::collections::HashMap<String, String>) -> PyResult<()> {
        let mut agent = self.inner.driver();
        let request = oxray_runtime::proto::WarmWorkersRequest { env_vars };
        py.detach(|| runtime().block_on(agent.warm_workers(request))).map_err(|s| rpc_err(s.into()))?;
        Ok(())
    }

    /// Gives this node's agent Serve's route table (JSON); returns where its HTTP proxy
    /// listens ("" when it runs none). An address it cannot bind raises.
    fn update_serve_routes(&self, py: Python<'_>, table_json: Vec<u8>) -> PyResult<String> {
        let mut agent = self.inner.driver();
        let request = oxray_runtime::proto::ServeRoutes { table_json, forwarded: false };
        let reply =
            py.detach(|| runtime().block_on(agent.update_serve_routes(request))).map_err(|s| rpc_err(s.into()))?;
        Ok(reply.into_inner().proxy_address)
    }

    /// Gives the head Serve's details (Ray's `ServeInstanceDetails` as JSON; "" once Serve shut down).
    fn update_serve(&self, py: Python<'_>, details_json: String) -> PyResult<()> {
        let mut agent = self.inner.driver();
        let request = oxray_runtime::proto::ServeUpdate { details_json };
        py.detach(|| runtime().block_on(agent.update_serve(request))).map_err(|s| rpc_err(s.into()))?;
        Ok(())
    }

    /// Keeps Serve's controller checkpoint in the head (redb when it has a state directory);
    /// empty bytes drop it.
    fn save_serve_checkpoint(&self, py: Python<'_>, checkpoint: Vec<u8>) -> PyResult<()> {
        let mut agent = self.inner.driver();
        let request = oxray_runtime::proto::ServeCheckpoint { checkpoint };
        py.detach(|| runtime().block_on(agent.save_serve_checkpoint(request))).map_err(|s| rpc_err(s.into()))?;
        Ok(())
    }

    /// Serve's controller checkpoint as the head keeps it (empty: none).
    fn serve_checkpoint<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let mut agent = self.inner.driver();
        let reply =
            py.detach(|| runtime().block_on(agent.get_serve_checkpoint(Empty {}))).map_err(|s| rpc_err(s.into()))?;
        Ok(PyBytes::new(py, &reply.into_inner().checkpoint))
    }

    /// Sends this process's metrics (every series, cumulative) to its agent when they changed
    /// since the last report, or with `keepalive` (the agent forgets a process that stops
    /// reporting); false when nothing was sent.
    #[pyo3(signature = (keepalive=false))]
    fn report_metrics(&self, py: Python<'_>, keepalive: bool) -> PyResult<bool> {
        let report = {
            let mut registry = crate::metrics::REGISTRY.lock();
            if registry.is_empty() || !(registry.take_changed() || keepalive) {
                return Ok(false);
            }
            registry.report(self.inner.client_id.as_bytes())
        };
        let mut agent = self.inner.driver();
        let sent = py.detach(|| runtime().block_on(agent.report_metrics(report)));
        if let Err(status) = sent {
            crate::metrics::REGISTRY.lock().mark_changed();
            return Err(rpc_err(status.into()));
        }
        Ok(true)
    }

    /// Every node the head knows, alive or not.
    fn cluster_info(&self, py: Python<'_>) -> PyResult<Vec<NodeInfo>> {
        self.flush(py)?;
        let mut agent = self.inner.driver();
        let reply = py.detach(|| runtime().block_on(agent.cluster_info(Empty {}))).map_err(|s| rpc_err(s.into()))?;
        Ok(reply.into_inner().nodes.into_iter().map(NodeInfo::from).collect())
    }

    /// How many functions and actors (dead ones included) this client's node agent keeps.
    fn agent_table_sizes(&self, py: Python<'_>) -> PyResult<(u64, u64)> {
        let mut agent = self.inner.driver();
        let reply = py.detach(|| runtime().block_on(agent.cluster_info(Empty {}))).map_err(|s| rpc_err(s.into()))?;
        let sizes = reply.into_inner().agent_tables.unwrap_or_default();
        Ok((sizes.functions, sizes.actors))
    }

    /// Prints the output of this job's workers on other nodes in this
    /// terminal (and on this node too when `skip_address` is None).
    #[pyo3(signature = (token, job_id, skip_address=None))]
    fn follow_logs(
        &self,
        py: Python<'_>,
        token: String,
        job_id: Vec<u8>,
        skip_address: Option<String>,
    ) -> PyResult<()> {
        let c = self.inner.clone();
        let job_id = JobId::from_optional_bytes(&job_id).map_err(bad_id)?;
        py.detach(|| runtime().block_on(c.follow_logs(token, job_id, skip_address)));
        Ok(())
    }
}
