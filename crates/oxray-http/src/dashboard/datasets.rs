//! The dashboard's Datasets page (each Data execution, running or ended, with
//! its operators' rows and bytes, rows/s, blocks in flight, the memory it
//! holds and the time it waited on its consumer) and Ray's
//! `/api/data/datasets/{job_id}`.

use super::Dashboard;
use super::render::{Render, ok, page_and_fragment};
use askama::Template;
use axum::Router;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

pub(super) fn routes() -> Router<Dashboard> {
    Router::new().route("/api/data/datasets/{job_id}", get(ray_datasets)).merge(page_and_fragment(
        "/datasets",
        "/ui/datasets",
        page,
    ))
}

/// Newest first.
fn executions(dash: &Dashboard) -> Vec<Value> {
    let mut all = dash.sources.cluster.as_ref().map(|c| c.datasets()).unwrap_or_default();
    all.reverse();
    all
}

/// Ray's shape: `{"datasets": [{"dataset", "job_id", "state", "progress", "total", "start_time", "end_time", "operators": [...]}]}`.
async fn ray_datasets(State(dash): State<Dashboard>, Path(job_id): Path<String>) -> Response {
    let datasets: Vec<Value> = executions(&dash)
        .into_iter()
        .filter(|d| d["job_id"].as_str() == Some(job_id.as_str()))
        .map(|d| {
            let operators: Vec<Value> = d["operators"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .map(|op| json!({"operator": op["operator"], "state": d["state"], "progress": op["rows_out"], "total": Value::Null}))
                .collect();
            json!({
                "dataset": d["dataset"],
                "job_id": d["job_id"],
                "state": d["state"],
                "progress": d["rows_emitted"],
                "total": Value::Null,
                "start_time": d["start_time"],
                "end_time": d["end_time"],
                "operators": operators,
            })
        })
        .collect();
    axum::Json(json!({"datasets": datasets})).into_response()
}

fn mib(bytes: f64) -> String {
    format!("{:.1} MiB", bytes / (1024.0 * 1024.0))
}

/// One operator of an execution: a row of its table.
struct OperatorRow {
    name: String,
    rows_in: String,
    rows_out: u64,
    bytes_in: String,
    bytes_out: String,
    rows_per_s: String,
    tasks: u64,
    in_flight: u64,
}

/// One execution of a dataset, with its figures and operators.
struct ExecutionView {
    id: String,
    dataset: String,
    job_id: String,
    state: String,
    detail: String,
    start_ms: u64,
    rows_emitted: u64,
    memory: String,
    blocked: String,
    operators: Vec<OperatorRow>,
}

impl ExecutionView {
    fn new(d: &Value) -> Self {
        let text = |v: &Value| v.as_str().unwrap_or("").to_string();
        let operators = d["operators"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|op| OperatorRow {
                name: text(&op["operator"]),
                rows_in: op["rows_in"].as_u64().map(|r| r.to_string()).unwrap_or_default(),
                rows_out: op["rows_out"].as_u64().unwrap_or(0),
                bytes_in: op["bytes_in"].as_f64().map(mib).unwrap_or_default(),
                bytes_out: mib(op["bytes_out"].as_f64().unwrap_or(0.0)),
                rows_per_s: format!("{:.0}", op["rows_per_s"].as_f64().unwrap_or(0.0)),
                tasks: op["tasks"].as_u64().unwrap_or(0),
                in_flight: op["blocks_in_flight"].as_u64().unwrap_or(0),
            })
            .collect();
        Self {
            id: text(&d["id"]),
            dataset: text(&d["dataset"]),
            job_id: text(&d["job_id"]),
            state: text(&d["state"]),
            detail: text(&d["detail"]),
            start_ms: (d["start_time"].as_f64().unwrap_or(0.0) * 1000.0) as u64,
            rows_emitted: d["rows_emitted"].as_u64().unwrap_or(0),
            memory: format!(
                "{} now, {} at most, of {}",
                mib(d["memory_used_bytes"].as_f64().unwrap_or(0.0)),
                mib(d["memory_peak_bytes"].as_f64().unwrap_or(0.0)),
                mib(d["budget_bytes"].as_f64().unwrap_or(0.0))
            ),
            blocked: format!("{:.1} s", d["blocked_on_consumer_s"].as_f64().unwrap_or(0.0)),
            operators,
        }
    }
}

#[derive(Template)]
#[template(path = "datasets.html")]
struct DatasetsPage {
    title: &'static str,
    here: &'static str,
    executions: Vec<ExecutionView>,
}

/// The executions alone, which htmx refreshes.
#[derive(Template)]
#[template(path = "datasets.html", block = "executions")]
struct DatasetsFragment {
    executions: Vec<ExecutionView>,
}

/// The newest 50: older ones stay in the head's history and Ray's route.
async fn page(State(dash): State<Dashboard>, render: Render) -> Response {
    let executions = executions(&dash).iter().take(50).map(ExecutionView::new).collect();
    match render {
        Render::Page => ok(&DatasetsPage { title: "Datasets", here: "/datasets", executions }),
        Render::Fragment => ok(&DatasetsFragment { executions }),
    }
}
