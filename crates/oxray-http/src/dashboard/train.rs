//! The dashboard's Train pages (every run; one run's attempts, workers,
//! metric charts and checkpoints) and Ray's `/api/train/v2/runs/v1`, from the
//! runs' state as their controllers report it to the head.

use super::Dashboard;
use super::render::{Render, cell, ns_as_ms, ok, page_and_fragment, run_duration, short_id};
use askama::Template;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

pub(super) fn routes() -> Router<Dashboard> {
    Router::new()
        .route("/api/train/v2/runs/v1", get(ray_runs))
        .route("/api/oxray/train/runs/{id}", get(run_json))
        .merge(page_and_fragment("/train", "/ui/train", runs_page))
        .merge(page_and_fragment("/train/{id}", "/ui/train/{id}", run_page))
}

fn text(v: &Value, key: &str) -> String {
    cell(&v[key])
}

/// One run: a row of the runs' table, and the head of its page.
struct RunRow {
    id: String,
    name: String,
    status: String,
    detail: String,
    job_id: String,
    attempts: usize,
    reports: u64,
    start_ms: u64,
    duration: String,
}

impl RunRow {
    fn new(run: &Value) -> Self {
        Self {
            id: text(run, "id"),
            name: text(run, "name"),
            status: text(run, "status"),
            detail: text(run, "status_detail"),
            job_id: text(run, "job_id"),
            attempts: run["attempts"].as_array().map(Vec::len).unwrap_or(0),
            reports: run["reports"].as_u64().unwrap_or(0),
            start_ms: ns_as_ms(&run["start_time_ns"]),
            duration: run_duration(run),
        }
    }
}

/// One worker of an attempt, by rank.
struct WorkerRow {
    node_id: String,
    rank: String,
    local_rank: String,
    node: String,
    node_ip: String,
    pid: String,
    device: String,
    status: String,
    error: String,
}

/// One attempt of a run (a run starts again after a failure).
struct AttemptRow {
    id: String,
    status: String,
    detail: String,
    start_ms: u64,
    duration: String,
    workers: Vec<WorkerRow>,
}

impl AttemptRow {
    fn new(attempt: &Value) -> Self {
        let workers = attempt["workers"].as_array().cloned().unwrap_or_default();
        Self {
            id: text(attempt, "attempt_id"),
            status: text(attempt, "status"),
            detail: text(attempt, "status_detail"),
            start_ms: ns_as_ms(&attempt["start_time_ns"]),
            duration: run_duration(attempt),
            workers: workers
                .iter()
                .map(|w| {
                    let gpus: Vec<String> = w["gpu_ids"]
                        .as_array()
                        .map(|ids| ids.iter().map(|g| g.as_str().unwrap_or("").to_string()).collect())
                        .unwrap_or_default();
                    WorkerRow {
                        node_id: text(w, "node_id"),
                        rank: text(w, "world_rank"),
                        local_rank: text(w, "local_rank"),
                        node: short_id(&text(w, "node_id")),
                        node_ip: text(w, "node_ip"),
                        pid: text(w, "pid"),
                        device: if gpus.is_empty() { "cpu".into() } else { format!("cuda {}", gpus.join(",")) },
                        status: text(w, "status"),
                        error: text(w, "error"),
                    }
                })
                .collect(),
        }
    }
}

/// One checkpoint a report made, and whether retention kept it.
struct CheckpointRow {
    report: String,
    dir_name: String,
    path: String,
    metrics: String,
    kept: bool,
}

/// One run's page: its fields, attempts and checkpoints (what htmx refreshes).
struct RunDetails {
    run: RunRow,
    storage_path: String,
    workers: usize,
    /// Newest first.
    attempts: Vec<AttemptRow>,
    /// Newest first.
    checkpoints: Vec<CheckpointRow>,
}

impl RunDetails {
    fn new(run: &Value) -> Self {
        let mut attempts: Vec<AttemptRow> =
            run["attempts"].as_array().map(|a| a.iter().map(AttemptRow::new).collect()).unwrap_or_default();
        attempts.reverse();
        let mut checkpoints: Vec<CheckpointRow> = run["checkpoints"]
            .as_array()
            .map(|list| {
                list.iter()
                    .map(|c| CheckpointRow {
                        report: text(c, "report_index"),
                        dir_name: text(c, "dir_name"),
                        path: text(c, "path"),
                        metrics: c["metrics"].to_string(),
                        kept: c["kept"].as_bool().unwrap_or(false),
                    })
                    .collect()
            })
            .unwrap_or_default();
        checkpoints.reverse();
        Self {
            run: RunRow::new(run),
            storage_path: text(run, "storage_path"),
            workers: run["num_workers"].as_u64().unwrap_or(0) as usize,
            attempts,
            checkpoints,
        }
    }
}

#[derive(Template)]
#[template(path = "train_runs.html")]
struct RunsPage {
    title: &'static str,
    here: &'static str,
    runs: Vec<RunRow>,
}

/// The runs' table alone, which htmx refreshes.
#[derive(Template)]
#[template(path = "train_runs.html", block = "table")]
struct RunsFragment {
    runs: Vec<RunRow>,
}

#[derive(Template)]
#[template(path = "train_run.html")]
struct RunPage {
    title: &'static str,
    here: &'static str,
    details: RunDetails,
}

/// The run's details alone, which htmx refreshes.
#[derive(Template)]
#[template(path = "train_run.html", block = "details")]
struct RunFragment {
    details: RunDetails,
}

/// Newest first.
fn runs(dash: &Dashboard) -> Vec<Value> {
    let mut runs = dash.sources.cluster.as_ref().map(|c| c.train_runs()).unwrap_or_default();
    runs.reverse();
    runs
}

/// Ray's `{"train_runs": [...]}`.
async fn ray_runs(State(dash): State<Dashboard>) -> Response {
    axum::Json(json!({"train_runs": runs(&dash)})).into_response()
}

fn no_run(id: &str) -> Response {
    (StatusCode::NOT_FOUND, format!("no Train run {id:?} on this cluster")).into_response()
}

/// A run's state and reports, for its page's charts.
async fn run_json(State(dash): State<Dashboard>, Path(id): Path<String>) -> Response {
    match dash.sources.cluster.as_ref().and_then(|c| c.train_run(&id)) {
        Some((run, reports)) => axum::Json(json!({"run": run, "reports": reports})).into_response(),
        None => no_run(&id),
    }
}

/// Every run, newest first.
async fn runs_page(State(dash): State<Dashboard>, render: Render) -> Response {
    let runs = runs(&dash).iter().map(RunRow::new).collect();
    match render {
        Render::Page => ok(&RunsPage { title: "Train", here: "/train", runs }),
        Render::Fragment => ok(&RunsFragment { runs }),
    }
}

/// One run; 404 when no run has that id.
async fn run_page(State(dash): State<Dashboard>, Path(id): Path<String>, render: Render) -> Response {
    let Some((run, _)) = dash.sources.cluster.as_ref().and_then(|c| c.train_run(&id)) else { return no_run(&id) };
    let details = RunDetails::new(&run);
    match render {
        Render::Page => ok(&RunPage { title: "Train run", here: "/train", details }),
        Render::Fragment => ok(&RunFragment { details }),
    }
}
