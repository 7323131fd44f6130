//! The Overview page: the cluster's nodes (what they hold and what they last
//! measured), the resources in use, live actors, and the Train runs and jobs
//! in progress.

use super::Dashboard;
use super::jobs::{JobView, job_rows};
use super::render::{Render, ok, page_and_fragment, short_id};
use crate::metrics::NodeSample;
use crate::state::rows::{ActorRow, NodeRow};
use askama::Template;
use axum::Router;
use axum::extract::State;
use axum::response::Response;
use oxray_rest::JobDetails;
use serde_json::Value;

pub(super) fn routes() -> Router<Dashboard> {
    page_and_fragment("/overview", "/ui/overview", page)
}

/// `2.0 GiB`, `512 MiB`, ...
fn bytes(n: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{value:.0} B") } else { format!("{value:.1} {}", UNITS[unit]) }
}

/// A count without its decimals when it is whole: `4`, `2.50`.
fn trim(n: f64) -> String {
    if n.fract() == 0.0 { format!("{n:.0}") } else { format!("{n:.2}") }
}

/// How much of one resource is taken, for a bar and its label.
struct Usage {
    text: String,
    percent: u32,
}

impl Usage {
    /// Nothing to show (a node that has not sent a sample yet).
    fn unknown() -> Self {
        Self { text: String::new(), percent: 0 }
    }

    fn of(used: f64, total: f64, as_bytes: bool) -> Self {
        let percent = if total > 0.0 { ((used / total) * 100.0).round().clamp(0.0, 100.0) as u32 } else { 0 };
        let text = if as_bytes {
            format!("{} / {}", bytes(used), bytes(total))
        } else {
            format!("{} / {}", trim(used), trim(total))
        };
        Self { text, percent }
    }

    /// The part of resource `name` the nodes' tasks and actors hold.
    fn of_resource(name: &str, nodes: &[&NodeRow], as_bytes: bool) -> Self {
        let total: f64 = nodes.iter().map(|n| n.resources_total.get(name).copied().unwrap_or(0.0)).sum();
        let free: f64 = nodes.iter().map(|n| n.resources_available.get(name).copied().unwrap_or(0.0)).sum();
        Self::of((total - free).max(0.0), total, as_bytes)
    }

    /// Bytes used of the total, summed over the nodes' latest samples.
    fn of_samples(nodes: &[&NodeRow], pick: impl Fn(&NodeSample) -> (u64, u64)) -> Self {
        let (used, total) = nodes
            .iter()
            .filter_map(|n| n.latest.as_ref())
            .map(&pick)
            .fold((0u64, 0u64), |(u, t), (du, dt)| (u + du, t + dt));
        Self::of(used as f64, total as f64, true)
    }
}

/// One row of the nodes' table.
struct NodeView {
    id: String,
    short: String,
    ip: String,
    head: bool,
    state: &'static str,
    cpu: Usage,
    gpu: Usage,
    started_ms: u64,
    /// What the node measured last: CPU use, memory used, object-store bytes used (empty before a sample).
    cpu_measured: String,
    memory_measured: Usage,
    store_measured: Usage,
    gpus_measured: String,
}

impl NodeView {
    fn new(node: &NodeRow) -> Self {
        let one = [node];
        let latest = node.latest.as_ref();
        Self {
            id: node.node_id.clone(),
            short: short_id(&node.node_id),
            ip: node.node_ip.clone(),
            head: node.is_head_node,
            state: node.state,
            cpu: Usage::of_resource("CPU", &one, false),
            gpu: Usage::of_resource("GPU", &one, false),
            started_ms: node.start_time_ms,
            cpu_measured: latest.map(|s| format!("{:.0}%", s.cpu_percent)).unwrap_or_default(),
            memory_measured: latest
                .map(|s| Usage::of(s.memory_used as f64, s.memory_total as f64, true))
                .unwrap_or_else(Usage::unknown),
            store_measured: latest
                .map(|s| Usage::of(s.store_used as f64, s.store_capacity as f64, true))
                .unwrap_or_else(Usage::unknown),
            gpus_measured: latest
                .map(|s| s.gpus.iter().map(|g| format!("{:.0}%", g.utilization_percent)).collect::<Vec<_>>().join(" "))
                .unwrap_or_default(),
        }
    }
}

/// What the overview shows: the part htmx refreshes, which is all of it but the heading.
struct ClusterSummary {
    nodes: Vec<NodeView>,
    alive: usize,
    dead: usize,
    cpu: Usage,
    gpu: Usage,
    memory: Usage,
    store: Usage,
    actors_alive: usize,
    /// The running and pending ones.
    jobs: Vec<JobView>,
    /// Train runs not ended yet: (id, name, status).
    runs: Vec<(String, String, String)>,
}

impl ClusterSummary {
    fn new(nodes: &[NodeRow], actors: &[ActorRow], jobs: &[JobDetails], runs: &[Value]) -> Self {
        let alive: Vec<&NodeRow> = nodes.iter().filter(|n| n.state == "ALIVE").collect();
        Self {
            cpu: Usage::of_resource("CPU", &alive, false),
            gpu: Usage::of_resource("GPU", &alive, false),
            memory: Usage::of_samples(&alive, |s| (s.memory_used, s.memory_total)),
            store: Usage::of_samples(&alive, |s| (s.store_used, s.store_capacity)),
            alive: alive.len(),
            dead: nodes.len() - alive.len(),
            nodes: nodes.iter().map(NodeView::new).collect(),
            actors_alive: actors.iter().filter(|a| a.state == "ALIVE").count(),
            jobs: jobs.iter().map(JobView::new).filter(|j| j.running).collect(),
            runs: runs
                .iter()
                .filter(|r| !matches!(r["status"].as_str(), Some("FINISHED" | "ERRORED" | "ABORTED")))
                .map(|r| {
                    let text = |k: &str| r[k].as_str().unwrap_or("").to_string();
                    (text("id"), text("name"), text("status"))
                })
                .collect(),
        }
    }
}

#[derive(Template)]
#[template(path = "overview.html")]
struct OverviewPage {
    title: &'static str,
    here: &'static str,
    summary: ClusterSummary,
}

/// The overview's summary alone, which htmx refreshes.
#[derive(Template)]
#[template(path = "overview.html", block = "summary")]
struct OverviewFragment {
    summary: ClusterSummary,
}

async fn page(State(dash): State<Dashboard>, render: Render) -> Response {
    let (nodes, actors, runs) = match &dash.sources.cluster {
        Some(cluster) => (cluster.nodes(), cluster.actors(), cluster.train_runs()),
        None => (Vec::new(), Vec::new(), Vec::new()),
    };
    let summary = ClusterSummary::new(&nodes, &actors, &job_rows(&dash), &runs);
    match render {
        Render::Page => ok(&OverviewPage { title: "Overview", here: "/overview", summary }),
        Render::Fragment => ok(&OverviewFragment { summary }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_shares_read_well() {
        assert_eq!(bytes(512.0 * 1024.0 * 1024.0), "512.0 MiB");
        assert_eq!(bytes(100.0), "100 B");
        let usage = Usage::of(1.0, 4.0, false);
        assert_eq!((usage.text.as_str(), usage.percent), ("1 / 4", 25));
        assert_eq!(Usage::of(1.0, 0.0, false).percent, 0);
    }
}
