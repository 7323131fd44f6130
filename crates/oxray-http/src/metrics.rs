//! Prometheus: each node's samples (`NodeSample`) as Ray's metric names
//! (`ray_node_cpu_utilization`, `ray_object_store_memory`, `ray_tasks`, ...),
//! served by every node on its metrics port ([`MetricsServer`]) and by the head
//! for the whole cluster (with actors, jobs and resources), and the
//! `/api/prometheus/sd` targets a Prometheus reads to find the nodes.

use crate::auth;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use oxray_rest::JobStatus;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;

/// One node's use at one moment (what its agent measured before a heartbeat).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct NodeSample {
    pub time_ms: u64,
    pub cpu_percent: f64,
    pub memory_used: u64,
    pub memory_total: u64,
    pub network_received: u64,
    pub network_sent: u64,
    pub disk_used: u64,
    pub disk_total: u64,
    pub store_used: u64,
    pub store_capacity: u64,
    pub store_spilled: u64,
    pub store_objects: u64,
    pub gpus: Vec<GpuSample>,
    pub tasks_running: u32,
    pub tasks_pending: u32,
    pub tasks_finished: u64,
    pub tasks_failed: u64,
    pub workers: u32,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct GpuSample {
    pub index: u32,
    pub utilization_percent: f64,
    pub memory_used: u64,
    pub memory_total: u64,
}

/// A node's samples over the metrics window, oldest first.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct NodeSeries {
    pub node_id: String,
    pub node_ip: String,
    pub samples: Vec<NodeSample>,
}

/// Prometheus text: one `# TYPE` line per metric, then its samples.
#[derive(Default)]
pub(crate) struct Exposition {
    metrics: BTreeMap<&'static str, (&'static str, &'static str, Vec<String>)>,
}

impl Exposition {
    /// Adds a sample of `name` (a gauge or counter, with `help`) with `labels`.
    pub(crate) fn add(
        &mut self,
        name: &'static str,
        kind: &'static str,
        help: &'static str,
        labels: &[(&str, &str)],
        value: f64,
    ) {
        let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", escape(v))).collect();
        let line = if labels.is_empty() {
            format!("{name} {value}")
        } else {
            format!("{name}{{{}}} {value}", labels.join(","))
        };
        self.metrics.entry(name).or_insert((kind, help, Vec::new())).2.push(line);
    }

    /// Adds a line of `name`'s family whose sample name has `suffix` (a histogram's `_bucket`,
    /// `_sum` and `_count`).
    pub(crate) fn add_line(
        &mut self,
        name: &'static str,
        kind: &'static str,
        help: &'static str,
        suffix: &str,
        labels: &[(&str, &str)],
        value: f64,
    ) {
        let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", escape(v))).collect();
        let line = format!("{name}{suffix}{{{}}} {value}", labels.join(","));
        self.metrics.entry(name).or_insert((kind, help, Vec::new())).2.push(line);
    }

    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        for (name, (kind, help, lines)) in &self.metrics {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for line in lines {
                let _ = writeln!(out, "{line}");
            }
        }
        out
    }
}

fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// A node's gauges, labelled with its id and address.
pub(crate) fn add_node(out: &mut Exposition, node_id: &str, ip: &str, s: &NodeSample) {
    let node = [("NodeId", node_id), ("NodeAddress", ip)];
    let with = |extra: (&'static str, &'static str)| [node[0], node[1], extra];
    out.add("ray_node_cpu_utilization", "gauge", "CPU use of the node, percent of all cores", &node, s.cpu_percent);
    out.add("ray_node_mem_used", "gauge", "memory used on the node, bytes", &node, s.memory_used as f64);
    out.add("ray_node_mem_total", "gauge", "memory of the node, bytes", &node, s.memory_total as f64);
    out.add("ray_node_network_received", "counter", "bytes received since boot", &node, s.network_received as f64);
    out.add("ray_node_network_sent", "counter", "bytes sent since boot", &node, s.network_sent as f64);
    out.add("ray_node_disk_usage", "gauge", "bytes used on the session dir's disk", &node, s.disk_used as f64);
    out.add(
        "ray_node_disk_free",
        "gauge",
        "bytes free on the session dir's disk",
        &node,
        s.disk_total.saturating_sub(s.disk_used) as f64,
    );
    let store = "object-store bytes by where they are";
    out.add("ray_object_store_memory", "gauge", store, &with(("Location", "MMAP_SHM")), s.store_used as f64);
    out.add("ray_object_store_memory", "gauge", store, &with(("Location", "SPILLED")), s.store_spilled as f64);
    out.add(
        "ray_object_store_available_memory",
        "gauge",
        "object-store bytes free",
        &node,
        s.store_capacity.saturating_sub(s.store_used) as f64,
    );
    out.add(
        "ray_object_store_num_local_objects",
        "gauge",
        "objects in the node's store",
        &node,
        s.store_objects as f64,
    );
    let tasks = "tasks on the node by state (FINISHED and FAILED since it started)";
    out.add("ray_tasks", "gauge", tasks, &with(("State", "RUNNING")), f64::from(s.tasks_running));
    out.add("ray_tasks", "gauge", tasks, &with(("State", "PENDING_NODE_ASSIGNMENT")), f64::from(s.tasks_pending));
    out.add("ray_tasks", "gauge", tasks, &with(("State", "FINISHED")), s.tasks_finished as f64);
    out.add("ray_tasks", "gauge", tasks, &with(("State", "FAILED")), s.tasks_failed as f64);
    out.add("ray_node_workers", "gauge", "worker processes on the node", &node, f64::from(s.workers));
    for gpu in &s.gpus {
        let index = gpu.index.to_string();
        let labels = [node[0], node[1], ("GpuIndex", index.as_str())];
        out.add("ray_node_gpus_utilization", "gauge", "GPU use, percent", &labels, gpu.utilization_percent);
        out.add("ray_node_gram_used", "gauge", "GPU memory used, bytes", &labels, gpu.memory_used as f64);
        out.add(
            "ray_node_gram_available",
            "gauge",
            "GPU memory free, bytes",
            &labels,
            gpu.memory_total.saturating_sub(gpu.memory_used) as f64,
        );
    }
}

/// Text in Prometheus' exposition format.
pub(crate) fn prometheus(text: String) -> Response {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response()
}

/// What a node's metrics server reads: its id, address and latest sample.
pub trait NodeMetricsSource: Send + Sync {
    fn latest(&self) -> Option<(String, String, NodeSample)>;
    /// More Prometheus text for the node's `/metrics` (Serve's proxy's series).
    fn extra(&self) -> String {
        String::new()
    }
}

#[derive(Clone)]
struct NodeMetrics {
    token: Arc<str>,
    source: Arc<dyn NodeMetricsSource>,
}

async fn node_metrics(State(node): State<NodeMetrics>) -> Response {
    let mut out = Exposition::default();
    if let Some((node_id, ip, sample)) = node.source.latest() {
        add_node(&mut out, &node_id, &ip, &sample);
    }
    prometheus(out.render() + &node.source.extra())
}

async fn require_token(State(node): State<NodeMetrics>, request: Request, next: Next) -> Response {
    match auth::check_token(&node.token, request.headers()) {
        Ok(()) => next.run(request).await,
        Err(refused) => refused.into_response(),
    }
}

/// A node's Prometheus endpoint (`/metrics`, behind the cluster token).
pub struct MetricsServer {
    local_addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl MetricsServer {
    pub fn start(
        listener: TcpListener,
        token: &str,
        source: Arc<dyn NodeMetricsSource>,
    ) -> Result<Self, crate::HttpError> {
        let local_addr =
            listener.local_addr().map_err(|source| crate::HttpError::Listener { server: "metrics", source })?;
        let state = NodeMetrics { token: token.into(), source };
        let app = Router::new()
            .route("/metrics", get(node_metrics))
            .layer(axum::middleware::from_fn_with_state(state.clone(), require_token))
            .with_state(state);
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::warn!("the metrics server on {local_addr} stopped: {e}");
            }
        });
        Ok(Self { local_addr, task })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_render_as_prometheus_text_with_one_type_line_per_metric() {
        let mut out = Exposition::default();
        let sample = NodeSample { cpu_percent: 12.5, store_used: 1024, tasks_running: 2, ..Default::default() };
        add_node(&mut out, "ab", "10.0.0.1", &sample);
        add_node(&mut out, "cd", "10.0.0.2", &NodeSample::default());
        let text = out.render();
        assert_eq!(text.matches("# TYPE ray_tasks gauge").count(), 1);
        assert!(text.contains("ray_node_cpu_utilization{NodeId=\"ab\",NodeAddress=\"10.0.0.1\"} 12.5"));
        assert!(
            text.contains("ray_object_store_memory{NodeId=\"ab\",NodeAddress=\"10.0.0.1\",Location=\"MMAP_SHM\"} 1024")
        );
        assert!(text.contains("ray_tasks{NodeId=\"cd\",NodeAddress=\"10.0.0.2\",State=\"RUNNING\"} 0"));
        assert!(!text.contains("ray_node_gpus_utilization"), "no GPU lines without GPUs");
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}

/// The head's routes: the whole cluster's `/metrics`, the nodes' targets for
/// Prometheus, and the samples the dashboard's charts draw.
pub(crate) fn routes(sources: crate::state::StateSources) -> Router {
    Router::new()
        .route("/metrics", get(cluster_metrics))
        .route("/api/prometheus/sd", get(service_discovery))
        .route("/api/oxray/metrics", get(samples))
        .with_state(sources)
}

type Sources = State<crate::state::StateSources>;

async fn cluster_metrics(State(sources): Sources) -> Response {
    let mut out = Exposition::default();
    if let Some(cluster) = &sources.cluster {
        let nodes = cluster.nodes();
        let mut by_state: BTreeMap<&str, usize> = BTreeMap::from([("ALIVE", 0), ("DEAD", 0)]);
        for node in &nodes {
            *by_state.entry(node.state).or_insert(0) += 1;
            if let Some(sample) = node.latest.as_ref().filter(|_| node.state == "ALIVE") {
                add_node(&mut out, &node.node_id, &node.node_ip, sample);
            }
            for (name, total) in &node.resources_total {
                if cluster.is_group_resource(name) || name.starts_with("node:") {
                    continue;
                }
                let free = node.resources_available.get(name).copied().unwrap_or(0.0);
                let help = "logical resources of the node by state";
                let labels = |state| [("NodeId", node.node_id.as_str()), ("Name", name.as_str()), ("State", state)];
                out.add("ray_resources", "gauge", help, &labels("USED"), (total - free).max(0.0));
                out.add("ray_resources", "gauge", help, &labels("AVAILABLE"), free);
            }
        }
        for (state, count) in by_state {
            out.add("oxray_nodes", "gauge", "nodes by state", &[("State", state)], count as f64);
        }
        // Every state, zeros included, so a query or alert on one always finds it.
        let mut actors: BTreeMap<&str, usize> =
            ["PENDING_CREATION", "ALIVE", "RESTARTING", "DEAD"].into_iter().map(|s| (s, 0)).collect();
        for actor in cluster.actors() {
            *actors.entry(actor.state).or_insert(0) += 1;
        }
        for (state, count) in actors {
            out.add("ray_actors", "gauge", "actors by state (the last dead ones)", &[("State", state)], count as f64);
        }
        let statuses = ["INITIALIZING", "SCHEDULING", "RUNNING", "RESTARTING", "FINISHED", "ERRORED", "ABORTED"];
        let mut runs: BTreeMap<String, usize> = statuses.iter().map(|s| (s.to_string(), 0)).collect();
        for run in cluster.train_runs() {
            *runs.entry(run["status"].as_str().unwrap_or("").to_string()).or_insert(0) += 1;
        }
        for (status, count) in &runs {
            let help = "Train runs by status (the last ended ones)";
            out.add("oxray_train_runs", "gauge", help, &[("Status", status.as_str())], *count as f64);
        }
        let mut experiments: BTreeMap<String, usize> =
            ["RUNNING", "FINISHED", "ERRORED", "ABORTED"].iter().map(|s| (s.to_string(), 0)).collect();
        for experiment in cluster.experiments() {
            let status = experiment["status"].as_str().unwrap_or("").to_string();
            if status == "RUNNING" {
                let name = experiment["name"].as_str().unwrap_or("");
                let id = experiment["id"].as_str().unwrap_or("");
                for (state, count) in crate::dashboard::trials_by_status(&experiment) {
                    let help = "trials of a running Tune experiment by state";
                    let labels = [("Experiment", name), ("ExperimentId", id), ("State", state.as_str())];
                    out.add("oxray_tune_trials", "gauge", help, &labels, count as f64);
                }
            }
            *experiments.entry(status).or_insert(0) += 1;
        }
        for (status, count) in &experiments {
            let help = "Tune experiments by status (the last ended ones)";
            out.add("oxray_tune_experiments", "gauge", help, &[("Status", status.as_str())], *count as f64);
        }
        let mut datasets: BTreeMap<String, usize> =
            ["RUNNING", "FINISHED", "FAILED"].iter().map(|s| (s.to_string(), 0)).collect();
        for dataset in cluster.datasets() {
            let state = dataset["state"].as_str().unwrap_or("").to_string();
            if state == "RUNNING" {
                let id = dataset["id"].as_str().unwrap_or("");
                let rows = dataset["rows_emitted"].as_f64().unwrap_or(0.0);
                let help = "rows a running Data execution has handed its consumer";
                out.add("oxray_dataset_rows_emitted", "gauge", help, &[("Dataset", id)], rows);
            }
            *datasets.entry(state).or_insert(0) += 1;
        }
        for (state, count) in &datasets {
            let help = "Data executions by state (the last ended ones)";
            out.add("oxray_datasets", "gauge", help, &[("State", state.as_str())], *count as f64);
        }
    }
    if let Some(jobs) = &sources.jobs {
        let mut by_status: BTreeMap<String, usize> =
            JobStatus::ALL.into_iter().map(|s| (s.as_str().to_string(), 0)).collect();
        for job in jobs.list(true).unwrap_or_default() {
            *by_status.entry(job.status.as_str().to_string()).or_insert(0) += 1;
        }
        for (status, count) in &by_status {
            out.add("oxray_jobs", "gauge", "jobs by status", &[("Status", status.as_str())], *count as f64);
        }
    }
    prometheus(out.render())
}

/// Ray's file-based service discovery: every live node's metrics address.
async fn service_discovery(State(sources): Sources) -> Response {
    let targets: Vec<String> = sources
        .cluster
        .map(|c| c.nodes())
        .unwrap_or_default()
        .into_iter()
        .filter(|n| n.state == "ALIVE" && !n.metrics_address.is_empty())
        .map(|n| n.metrics_address)
        .collect();
    axum::Json(serde_json::json!([{"labels": {"job": "ray"}, "targets": targets}])).into_response()
}

#[derive(serde::Deserialize)]
struct Since {
    #[serde(default)]
    since_ms: u64,
}

/// Each node's samples newer than `since_ms`, for the dashboard's charts.
async fn samples(State(sources): Sources, axum::extract::Query(since): axum::extract::Query<Since>) -> Response {
    let series = sources.cluster.map(|c| c.node_series(since.since_ms)).unwrap_or_default();
    axum::Json(series).into_response()
}
