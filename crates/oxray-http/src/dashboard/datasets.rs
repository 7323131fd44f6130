//! The dashboard's Datasets page (each Data execution, running or ended, with
//! its operators' rows and bytes, rows/s, blocks in flight, the memory it
//! holds and the time it waited on its consumer) and Ray's
//! `/api/data/datasets/{job_id}`.

use super::{Dashboard, ok};
use askama::Template;
use axum::Router;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

pub(super) fn routes() -> Router<Dashboard> {
    Router::new()
        .route("/api/data/datasets/{job_id}", get(ray_datasets))
        .route("/datasets", get(page))
        .route("/ui/datasets", get(fragment))
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

pub(crate) struct OperatorRow {
    pub(crate) name: String,
    pub(crate) rows_in: String,
    pub(crate) rows_out: u64,
    pub(crate) bytes_in: String,
    pub(crate) bytes_out: String,
    pub(crate) rows_per_s: String,
    pub(crate) tasks: u64,
    pub(crate) in_flight: u64,
}

pub(crate) struct ExecutionView {
    pub(crate) id: String,
    pub(crate) dataset: String,
    pub(crate) job_id: String,
    pub(crate) state: String,
    pub(crate) detail: String,
    pub(crate) start_ms: u64,
    pub(crate) rows_emitted: u64,
    pub(crate) memory: String,
    pub(crate) blocked: String,
    pub(crate) operators: Vec<OperatorRow>,
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

#[derive(Template)]
#[template(path = "datasets_body.html")]
struct DatasetsFragment {
    executions: Vec<ExecutionView>,
}

/// The newest 50: older ones stay in the head's history and Ray's route.
fn views(dash: &Dashboard) -> Vec<ExecutionView> {
    executions(dash).iter().take(50).map(ExecutionView::new).collect()
}

async fn page(State(dash): State<Dashboard>) -> Response {
    ok(&DatasetsPage { title: "Datasets", here: "/datasets", executions: views(&dash) })
}

async fn fragment(State(dash): State<Dashboard>) -> Response {
    ok(&DatasetsFragment { executions: views(&dash) })
}
