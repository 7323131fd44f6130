//! What the dashboard's pages show, prepared from the State API's rows and the
//! job records: one askama template per page (`templates/*.html`), each page's
//! refreshable part a template of its own that htmx fetches from `/ui/...`.

use crate::state::rows::{ActorRow, NodeRow, TaskRow};
use askama::Template;
use oxray_rest::{JobDetails, JobType};
use serde_json::Value;

/// The navigation bar: (path, label).
pub(crate) const NAV: &[(&str, &str)] = &[
    ("/overview", "Overview"),
    ("/jobs", "Jobs"),
    ("/actors", "Actors"),
    ("/tasks", "Tasks"),
    ("/train", "Train"),
    ("/datasets", "Datasets"),
    ("/charts", "Metrics"),
    ("/logs", "Logs"),
];
pub(crate) const ACTOR_STATES: &[&str] = &["", "ALIVE", "PENDING_CREATION", "RESTARTING", "DEAD"];
pub(crate) const TASK_STATES: &[&str] =
    &["", "PENDING_ARGS_AVAIL", "PENDING_NODE_ASSIGNMENT", "RUNNING", "FINISHED", "FAILED"];
/// Rows a table shows at most (the rest are counted, and a filter narrows them).
pub(crate) const MAX_ROWS: usize = 1000;

pub(crate) fn short_id(id: &str) -> String {
    id.chars().take(12).collect()
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

/// How much of one resource is taken, for a bar and its label.
pub(crate) struct Usage {
    pub(crate) text: String,
    pub(crate) percent: u32,
}

impl Usage {
    fn of(used: f64, total: f64, as_bytes: bool) -> Self {
        let percent = if total > 0.0 { ((used / total) * 100.0).round().clamp(0.0, 100.0) as u32 } else { 0 };
        let text = if as_bytes {
            format!("{} / {}", bytes(used), bytes(total))
        } else {
            format!("{} / {}", trim(used), trim(total))
        };
        Self { text, percent }
    }

    fn of_resource(name: &str, nodes: &[&NodeRow], as_bytes: bool) -> Self {
        let total: f64 = nodes.iter().map(|n| n.resources_total.get(name).copied().unwrap_or(0.0)).sum();
        let free: f64 = nodes.iter().map(|n| n.resources_available.get(name).copied().unwrap_or(0.0)).sum();
        Self::of((total - free).max(0.0), total, as_bytes)
    }
}

impl Usage {
    /// Bytes used of the total, summed over the nodes' latest samples.
    fn of_samples(nodes: &[&NodeRow], pick: impl Fn(&crate::metrics::NodeSample) -> (u64, u64)) -> Self {
        let (used, total) = nodes
            .iter()
            .filter_map(|n| n.latest.as_ref())
            .map(&pick)
            .fold((0u64, 0u64), |(u, t), (du, dt)| (u + du, t + dt));
        Self::of(used as f64, total as f64, true)
    }
}

fn trim(n: f64) -> String {
    if n.fract() == 0.0 { format!("{n:.0}") } else { format!("{n:.2}") }
}

pub(crate) struct NodeView {
    pub(crate) id: String,
    pub(crate) short: String,
    pub(crate) ip: String,
    pub(crate) head: bool,
    pub(crate) state: &'static str,
    pub(crate) cpu: Usage,
    pub(crate) gpu: Usage,
    pub(crate) started_ms: u64,
    /// What the node measured last: CPU use, memory used, object-store bytes used (empty before a sample).
    pub(crate) cpu_measured: String,
    pub(crate) memory_measured: Usage,
    pub(crate) store_measured: Usage,
    pub(crate) gpus_measured: String,
}

impl NodeView {
    fn new(node: &NodeRow) -> Self {
        let one = [node];
        Self {
            id: node.node_id.clone(),
            short: short_id(&node.node_id),
            ip: node.node_ip.clone(),
            head: node.is_head_node,
            state: node.state,
            cpu: Usage::of_resource("CPU", &one, false),
            gpu: Usage::of_resource("GPU", &one, false),
            started_ms: node.start_time_ms,
            cpu_measured: node.latest.as_ref().map(|s| format!("{:.0}%", s.cpu_percent)).unwrap_or_default(),
            memory_measured: node
                .latest
                .as_ref()
                .map(|s| Usage::of(s.memory_used as f64, s.memory_total as f64, true))
                .unwrap_or(Usage { text: String::new(), percent: 0 }),
            store_measured: node
                .latest
                .as_ref()
                .map(|s| Usage::of(s.store_used as f64, s.store_capacity as f64, true))
                .unwrap_or(Usage { text: String::new(), percent: 0 }),
            gpus_measured: node
                .latest
                .as_ref()
                .map(|s| s.gpus.iter().map(|g| format!("{:.0}%", g.utilization_percent)).collect::<Vec<_>>().join(" "))
                .unwrap_or_default(),
        }
    }
}

pub(crate) struct JobView {
    pub(crate) id: String,
    /// The job's page, when it has one (a submission, or a driver's JobID).
    pub(crate) link: String,
    pub(crate) kind: String,
    pub(crate) status: String,
    pub(crate) entrypoint: String,
    pub(crate) message: String,
    pub(crate) start_ms: u64,
    pub(crate) end_ms: u64,
    pub(crate) running: bool,
    pub(crate) ended: bool,
}

impl JobView {
    /// From a `JobDetails` (a submission, or a DRIVER row).
    pub(crate) fn new(details: &JobDetails) -> Self {
        let id = details.id().to_string();
        let submission = details.job_type == JobType::Submission;
        Self {
            link: if submission { format!("/jobs/{id}") } else { String::new() },
            id,
            kind: if submission { "SUBMISSION" } else { "DRIVER" }.to_string(),
            running: !details.status.is_terminal(),
            ended: details.status.is_terminal(),
            status: details.status.as_str().to_string(),
            entrypoint: details.entrypoint.clone(),
            message: details.message.clone(),
            start_ms: details.start_time,
            end_ms: details.end_time.unwrap_or(0),
        }
    }
}

pub(crate) struct ActorView {
    pub(crate) id: String,
    pub(crate) short: String,
    pub(crate) class_name: String,
    pub(crate) name: String,
    pub(crate) state: &'static str,
    pub(crate) pid: String,
    pub(crate) node: String,
    pub(crate) node_short: String,
    pub(crate) restarts: i32,
    pub(crate) job_id: String,
    pub(crate) death: String,
}

impl ActorView {
    fn new(a: &ActorRow) -> Self {
        let node = a.node_id.clone().unwrap_or_default();
        Self {
            id: a.actor_id.clone(),
            short: short_id(&a.actor_id),
            class_name: a.class_name.clone(),
            name: a.name.clone(),
            state: a.state,
            pid: a.pid.map(|p| p.to_string()).unwrap_or_default(),
            node_short: short_id(&node),
            node,
            restarts: a.num_restarts,
            job_id: a.job_id.clone(),
            death: a
                .death_cause
                .as_ref()
                .and_then(|c| c["actor_died_error_context"]["error_message"].as_str())
                .unwrap_or("")
                .to_string(),
        }
    }
}

pub(crate) struct TaskView {
    pub(crate) id: String,
    pub(crate) short: String,
    pub(crate) name: String,
    pub(crate) kind: &'static str,
    pub(crate) state: &'static str,
    pub(crate) attempt: i32,
    pub(crate) node: String,
    pub(crate) node_short: String,
    pub(crate) pid: String,
    pub(crate) created_ms: u64,
    pub(crate) error_type: String,
    pub(crate) error_message: String,
}

impl TaskView {
    fn new(t: &TaskRow) -> Self {
        let node = t.node_id.clone().unwrap_or_default();
        Self {
            id: t.task_id.clone(),
            short: short_id(&t.task_id),
            name: t.name.clone(),
            kind: t.kind,
            state: t.state,
            attempt: t.attempt_number,
            node_short: short_id(&node),
            node,
            pid: t.worker_pid.map(|p| p.to_string()).unwrap_or_default(),
            created_ms: t.creation_time_ms.unwrap_or(0),
            error_type: t.error_type.clone().unwrap_or_default(),
            error_message: t.error_message.clone().unwrap_or_default(),
        }
    }
}

/// A table's search: text anywhere in the row's names and ids, and a state.
#[derive(Clone, Debug, Default, serde::Deserialize)]
pub(crate) struct Search {
    #[serde(default)]
    pub(crate) q: String,
    #[serde(default)]
    pub(crate) state: String,
}

impl Search {
    fn matches(&self, state: &str, texts: &[&str]) -> bool {
        let q = self.q.trim().to_lowercase();
        (self.state.is_empty() || self.state == state)
            && (q.is_empty() || texts.iter().any(|t| t.to_lowercase().contains(&q)))
    }
}

// ---- templates ----

#[derive(Template)]
#[template(path = "login.html")]
pub(crate) struct LoginPage {
    pub(crate) message: String,
}

pub(crate) struct OverviewBody {
    pub(crate) nodes: Vec<NodeView>,
    pub(crate) alive: usize,
    pub(crate) dead: usize,
    pub(crate) cpu: Usage,
    pub(crate) gpu: Usage,
    pub(crate) memory: Usage,
    pub(crate) store: Usage,
    pub(crate) actors_alive: usize,
    /// The running and pending ones.
    pub(crate) jobs: Vec<JobView>,
    /// Train runs not ended yet: (id, name, status).
    pub(crate) runs: Vec<(String, String, String)>,
}

impl OverviewBody {
    pub(crate) fn new(nodes: &[NodeRow], actors: &[ActorRow], jobs: &[JobDetails], runs: &[Value]) -> Self {
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
pub(crate) struct OverviewPage {
    pub(crate) title: &'static str,
    pub(crate) here: &'static str,
    pub(crate) body: OverviewBody,
}

#[derive(Template)]
#[template(path = "overview_body.html")]
pub(crate) struct OverviewFragment {
    pub(crate) body: OverviewBody,
}

pub(crate) struct JobsBody {
    pub(crate) jobs: Vec<JobView>,
}

#[derive(Template)]
#[template(path = "jobs.html")]
pub(crate) struct JobsPage {
    pub(crate) title: &'static str,
    pub(crate) here: &'static str,
    pub(crate) body: JobsBody,
}

#[derive(Template)]
#[template(path = "jobs_table.html")]
pub(crate) struct JobsFragment {
    pub(crate) body: JobsBody,
}

#[derive(Template)]
#[template(path = "job.html")]
pub(crate) struct JobPage {
    pub(crate) title: &'static str,
    pub(crate) here: &'static str,
    pub(crate) job: JobView,
}

#[derive(Template)]
#[template(path = "job_fields.html")]
pub(crate) struct JobFragment {
    pub(crate) job: JobView,
}

pub(crate) struct ActorsBody {
    pub(crate) actors: Vec<ActorView>,
    pub(crate) shown: usize,
    pub(crate) matched: usize,
    pub(crate) total: usize,
}

impl ActorsBody {
    pub(crate) fn new(mut actors: Vec<ActorRow>, search: &Search) -> Self {
        let total = actors.len();
        // Live ones first, then by class.
        actors.sort_by(|a, b| {
            (a.state == "DEAD", &a.class_name, &a.actor_id).cmp(&(b.state == "DEAD", &b.class_name, &b.actor_id))
        });
        let matched: Vec<&ActorRow> = actors
            .iter()
            .filter(|a| search.matches(a.state, &[&a.class_name, &a.name, &a.actor_id, &a.job_id]))
            .collect();
        let views: Vec<ActorView> = matched.iter().take(MAX_ROWS).map(|a| ActorView::new(a)).collect();
        Self { shown: views.len(), matched: matched.len(), total, actors: views }
    }
}

#[derive(Template)]
#[template(path = "actors.html")]
pub(crate) struct ActorsPage {
    pub(crate) title: &'static str,
    pub(crate) here: &'static str,
    pub(crate) query: Search,
    pub(crate) body: ActorsBody,
}

#[derive(Template)]
#[template(path = "actor_rows.html")]
pub(crate) struct ActorsFragment {
    pub(crate) body: ActorsBody,
}

pub(crate) struct TasksBody {
    pub(crate) tasks: Vec<TaskView>,
    pub(crate) shown: usize,
    pub(crate) matched: usize,
    pub(crate) total: usize,
    pub(crate) warning: String,
}

impl TasksBody {
    pub(crate) fn new(tasks: &[TaskRow], total: usize, warning: String, search: &Search) -> Self {
        let matched: Vec<&TaskRow> =
            tasks.iter().filter(|t| search.matches(t.state, &[&t.name, &t.task_id, &t.job_id])).collect();
        let views: Vec<TaskView> = matched.iter().take(MAX_ROWS).map(|t| TaskView::new(t)).collect();
        Self { shown: views.len(), matched: matched.len(), total, warning, tasks: views }
    }
}

#[derive(Template)]
#[template(path = "tasks.html")]
pub(crate) struct TasksPage {
    pub(crate) title: &'static str,
    pub(crate) here: &'static str,
    pub(crate) query: Search,
    pub(crate) body: TasksBody,
}

#[derive(Template)]
#[template(path = "task_rows.html")]
pub(crate) struct TasksFragment {
    pub(crate) body: TasksBody,
}

#[derive(Template)]
#[template(path = "charts.html")]
pub(crate) struct ChartsPage {
    pub(crate) title: &'static str,
    pub(crate) here: &'static str,
    pub(crate) window_ms: u64,
    pub(crate) window_minutes: u64,
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

    #[test]
    fn search_matches_text_without_case_and_the_state_exactly() {
        let search = Search { q: "coun".into(), state: "ALIVE".into() };
        assert!(search.matches("ALIVE", &["Counter"]));
        assert!(!search.matches("DEAD", &["Counter"]));
        assert!(!search.matches("ALIVE", &["Other"]));
        assert!(Search::default().matches("DEAD", &[]));
    }
}
