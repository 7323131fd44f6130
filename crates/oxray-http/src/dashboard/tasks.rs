//! The Tasks page: the tasks the node agents know (running, queued and their
//! recent finished ones), filtered by text and state as the form above the
//! table asks, at most [`MAX_ROWS`] of them, saying which nodes did not answer.

use super::Dashboard;
use super::render::{MAX_ROWS, Render, Search, ok, page_and_fragment, short_id};
use crate::state::rows::TaskRow;
use askama::Template;
use axum::Router;
use axum::extract::{Query, State};
use axum::response::Response;

pub(super) fn routes() -> Router<Dashboard> {
    page_and_fragment("/tasks", "/ui/tasks", page)
}

/// The states the filter offers ("" for any); the template reads them.
const STATES: &[&str] = &["", "PENDING_ARGS_AVAIL", "PENDING_NODE_ASSIGNMENT", "RUNNING", "FINISHED", "FAILED"];

/// One row of the table.
struct TaskView {
    id: String,
    short: String,
    name: String,
    kind: &'static str,
    state: &'static str,
    attempt: i32,
    node: String,
    node_short: String,
    pid: String,
    created_ms: u64,
    error_type: String,
    error_message: String,
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

/// The rows the search matched (at most [`MAX_ROWS`]), how many there were,
/// and which nodes did not answer.
struct TasksTable {
    tasks: Vec<TaskView>,
    shown: usize,
    matched: usize,
    total: usize,
    warning: String,
}

impl TasksTable {
    fn new(tasks: &[TaskRow], total: usize, warning: String, search: &Search) -> Self {
        let matched: Vec<&TaskRow> =
            tasks.iter().filter(|t| search.matches(t.state, &[&t.name, &t.task_id, &t.job_id])).collect();
        let views: Vec<TaskView> = matched.iter().take(MAX_ROWS).map(|t| TaskView::new(t)).collect();
        Self { shown: views.len(), matched: matched.len(), total, warning, tasks: views }
    }
}

#[derive(Template)]
#[template(path = "tasks.html")]
struct TasksPage {
    title: &'static str,
    here: &'static str,
    query: Search,
    table: TasksTable,
}

/// The table alone, which htmx refreshes (and the filter's form asks for).
#[derive(Template)]
#[template(path = "tasks.html", block = "table")]
struct TasksFragment {
    table: TasksTable,
}

async fn page(State(dash): State<Dashboard>, Query(search): Query<Search>, render: Render) -> Response {
    let table = match &dash.sources.cluster {
        Some(cluster) => {
            let (tasks, total, warning) = crate::state::newest_tasks(cluster.as_ref()).await;
            TasksTable::new(&tasks, total, warning, &search)
        }
        None => TasksTable::new(&[], 0, String::new(), &search),
    };
    match render {
        Render::Page => ok(&TasksPage { title: "Tasks", here: "/tasks", query: search, table }),
        Render::Fragment => ok(&TasksFragment { table }),
    }
}
