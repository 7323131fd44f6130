//! Ray's State API on the head (`/api/v0/{nodes,actors,placement_groups,jobs,tasks}`
//! and `/api/v0/tasks/summarize`), which `ray.util.state`, `ray list` and
//! `oxray.util.state` read: rows from the head's tables and the node agents
//! ([`ClusterState`]), filtered and cut as Ray's `do_filter` does, in Ray's
//! envelope `{"result", "msg", "data": {"result": {"total", ...}}}`.

mod query;
pub(crate) mod rows;

use crate::auth::is_browser;
use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use oxray_jobs::JobManager;
use oxray_rest::cluster_status::{ClusterStatus, ClusterStatusData};
use oxray_rest::{ClusterStatusReply, LoadMetricsReport};
use query::{ListOptions, MAX_LIMIT, QueryError, Schema};
use rows::ClusterState;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

/// What the State API reads.
#[derive(Clone)]
pub(crate) struct StateSources {
    pub(crate) cluster: Option<Arc<dyn ClusterState>>,
    pub(crate) jobs: Option<Arc<JobManager>>,
}

pub(crate) fn routes(sources: StateSources) -> Router {
    Router::new()
        .route("/api/v0/nodes", get(nodes))
        .route("/api/v0/actors", get(actors))
        .route("/api/v0/placement_groups", get(placement_groups))
        .route("/api/v0/jobs", get(jobs))
        .route("/api/v0/tasks", get(tasks))
        .route("/api/v0/tasks/summarize", get(summarize_tasks))
        .route("/api/cluster_status", get(cluster_status))
        .with_state(sources)
}

type Sources = State<StateSources>;

/// Ray's `rest_response`: a reply the state client accepts, or one whose
/// `msg` it raises as `RayStateApiException`.
fn reply(status: StatusCode, msg: &str, result: Value) -> Response {
    let data = if result.is_null() { json!({}) } else { json!({"result": result}) };
    (status, axum::Json(json!({"result": status.is_success(), "msg": msg, "data": data}))).into_response()
}

/// The one place a refused query becomes a reply: a 400 whose `msg` says why.
fn bad_request(refused: QueryError) -> Response {
    reply(StatusCode::BAD_REQUEST, &refused.to_string(), Value::Null)
}

fn unavailable(what: &str) -> Response {
    reply(
        StatusCode::SERVICE_UNAVAILABLE,
        &format!("this server has no {what} to list: the State API is served by a cluster's head"),
        Value::Null,
    )
}

/// Ray's `ListApiResponse` / `SummaryApiResponse` around `result`: `total` rows at
/// the source, of which it sent `after_truncation`, `filtered` passing the filters.
fn counted_reply(total: usize, after_truncation: usize, filtered: usize, result: Value, warning: &str) -> Response {
    let partial = if warning.is_empty() { Value::Null } else { json!(warning) };
    reply(
        StatusCode::OK,
        "",
        json!({
            "total": total,
            "num_after_truncation": after_truncation,
            "num_filtered": filtered,
            "result": result,
            "partial_failure_warning": partial,
            "warnings": Value::Null,
        }),
    )
}

/// The rows that pass the filters, the first `limit` of them.
fn list_reply(schema: &Schema, rows: Vec<Value>, total: usize, options: &ListOptions, warning: String) -> Response {
    let after_truncation = rows.len();
    let mut filtered = schema.filter(rows, options);
    let num_filtered = filtered.len();
    filtered.truncate(options.limit);
    counted_reply(total, after_truncation, num_filtered, Value::Array(filtered), &warning)
}

fn to_values<T: serde::Serialize>(rows: Vec<T>) -> Vec<Value> {
    rows.into_iter().map(|row| serde_json::to_value(row).unwrap_or(Value::Null)).collect()
}

/// Parses the options and checks the filters against `schema`.
fn options(schema: &Schema, query: Option<String>) -> Result<ListOptions, QueryError> {
    let options = ListOptions::parse(query.as_deref())?;
    schema.check(&options)?;
    Ok(options)
}

/// Lists the rows of `schema` that `read` returns, sorted by `id`.
fn list_sorted(schema: &Schema, query: Option<String>, mut rows: Vec<Value>, id: &str) -> Response {
    let options = match options(schema, query) {
        Ok(options) => options,
        Err(refused) => return bad_request(refused),
    };
    rows.sort_by(|a, b| a[id].as_str().cmp(&b[id].as_str()));
    let total = rows.len();
    list_reply(schema, rows, total, &options, String::new())
}

async fn nodes(State(sources): Sources, RawQuery(query): RawQuery) -> Response {
    let Some(cluster) = sources.cluster else { return unavailable("nodes") };
    list_sorted(&query::NODES, query, to_values(cluster.nodes()), "node_id")
}

/// Ray's `/api/cluster_status` (legacy envelope): `clusterStatus.loadMetricsReport`
/// holds what an autoscaler reads (the oxray operator does); `?format=1` adds it
/// as `ray status` text in `autoscalingStatus`.
async fn cluster_status(State(sources): Sources, RawQuery(query): RawQuery) -> Response {
    let Some(cluster) = sources.cluster else { return unavailable("cluster status") };
    let report = cluster.load_metrics_report();
    let formatted =
        form_urlencoded::parse(query.unwrap_or_default().as_bytes()).any(|(k, v)| k == "format" && v == "1");
    let reply = ClusterStatusReply {
        result: true,
        msg: "Got cluster status.".into(),
        data: ClusterStatusData {
            autoscaling_status: formatted.then(|| format_cluster_status(&report)),
            autoscaling_error: None,
            cluster_status: ClusterStatus { load_metrics_report: report, time: oxray_rest::now_ms() as f64 / 1000.0 },
        },
    };
    axum::Json(reply).into_response()
}

/// A value as compact JSON (how `ray status` shows shapes and bundles).
fn json_text(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// The report as `ray status` prints it: nodes, use, and the demand waiting.
fn format_cluster_status(report: &LoadMetricsReport) -> String {
    let mut out = String::from("======== Cluster status ========\nNode status\n");
    out.push_str("---------------------------------------------------------------\nActive:\n");
    for node in &report.nodes {
        let role = if node.is_head { " (head)" } else { "" };
        out.push_str(&format!(" 1 node_{} {}{role}\n", node.node_id, node.node_ip));
    }
    out.push_str("\nResources\n---------------------------------------------------------------\nUsage:\n");
    for (name, (used, total)) in &report.usage {
        out.push_str(&format!(" {}/{} {name}\n", Value::from(*used), Value::from(*total)));
    }
    out.push_str("\nDemands:\n");
    for (shape, count) in &report.resource_demand {
        out.push_str(&format!(" {}: {count}+ pending tasks/actors\n", json_text(shape)));
    }
    for group in &report.pg_demand {
        out.push_str(&format!(" {} ({}): 1+ pending placement groups\n", json_text(&group.bundles), group.strategy));
    }
    if report.resource_demand.is_empty() && report.pg_demand.is_empty() {
        out.push_str(" (no resource demands)\n");
    }
    out
}

async fn actors(State(sources): Sources, RawQuery(query): RawQuery) -> Response {
    let Some(cluster) = sources.cluster else { return unavailable("actors") };
    list_sorted(&query::ACTORS, query, to_values(cluster.actors()), "actor_id")
}

async fn placement_groups(State(sources): Sources, RawQuery(query): RawQuery) -> Response {
    let Some(cluster) = sources.cluster else { return unavailable("placement groups") };
    list_sorted(&query::PLACEMENT_GROUPS, query, to_values(cluster.placement_groups()), "placement_group_id")
}

async fn jobs(State(sources): Sources, RawQuery(query): RawQuery, headers: HeaderMap) -> Response {
    let Some(jobs) = sources.jobs else { return unavailable("jobs") };
    let options = match options(&query::JOBS, query) {
        Ok(options) => options,
        Err(refused) => return bad_request(refused),
    };
    match jobs.list(is_browser(&headers)) {
        Ok(rows) => {
            let total = rows.len();
            list_reply(&query::JOBS, to_values(rows), total, &options, String::new())
        }
        Err(e) => reply(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string(), Value::Null),
    }
}

/// Every node's tasks, newest first, at most Ray's `RAY_MAX_LIMIT_FROM_DATA_SOURCE`
/// (10,000) in all; how many the nodes have; and which nodes did not answer ("" if all did).
pub(crate) async fn newest_tasks(cluster: &dyn ClusterState) -> (Vec<rows::TaskRow>, usize, String) {
    let listing = cluster.tasks(MAX_LIMIT).await;
    let mut rows = listing.tasks;
    rows.sort_by(|a, b| b.creation_time_ms.cmp(&a.creation_time_ms).then_with(|| a.task_id.cmp(&b.task_id)));
    rows.truncate(MAX_LIMIT);
    let warning = if listing.unreachable.is_empty() {
        String::new()
    } else {
        format!("Some nodes did not answer, so their tasks are missing: {}", listing.unreachable.join("; "))
    };
    (rows, listing.total, warning)
}

async fn read_tasks(cluster: &dyn ClusterState) -> (Vec<Value>, usize, String) {
    let (rows, total, warning) = newest_tasks(cluster).await;
    (to_values(rows), total, warning)
}

async fn tasks(State(sources): Sources, RawQuery(query): RawQuery) -> Response {
    let Some(cluster) = sources.cluster else { return unavailable("tasks") };
    let options = match options(&query::TASKS, query) {
        Ok(options) => options,
        Err(refused) => return bad_request(refused),
    };
    let (rows, total, warning) = read_tasks(cluster.as_ref()).await;
    list_reply(&query::TASKS, rows, total, &options, warning)
}

/// Ray's `TaskSummaries` by function (or task) name: counts per state.
async fn summarize_tasks(State(sources): Sources, RawQuery(query): RawQuery) -> Response {
    let Some(cluster) = sources.cluster else { return unavailable("tasks") };
    let mut options = match options(&query::TASKS, query) {
        Ok(options) => options,
        Err(refused) => return bad_request(refused),
    };
    let by_name = match options.summary_by.as_deref().unwrap_or("func_name") {
        "func_name" => false,
        "task_name" => true,
        other => return bad_request(QueryError::SummaryBy { by: other.to_string() }),
    };
    options.limit = MAX_LIMIT;
    let (rows, total, warning) = read_tasks(cluster.as_ref()).await;
    let after_truncation = rows.len();
    let rows = query::TASKS.filter(rows, &options);
    let mut summary: BTreeMap<String, Value> = BTreeMap::new();
    let (mut total_tasks, mut total_actor_tasks, mut total_actor_scheduled) = (0, 0, 0);
    for row in &rows {
        let key = if by_name { &row["name"] } else { &row["func_or_class_name"] };
        let key = key.as_str().unwrap_or("").to_string();
        let kind = row["type"].as_str().unwrap_or("NORMAL_TASK");
        match kind {
            "ACTOR_TASK" => total_actor_tasks += 1,
            "ACTOR_CREATION_TASK" => total_actor_scheduled += 1,
            _ => total_tasks += 1,
        }
        let entry = summary
            .entry(key.clone())
            .or_insert_with(|| json!({"func_or_class_name": key, "type": kind, "state_counts": {}}));
        let state = row["state"].as_str().unwrap_or("NIL").to_string();
        let count = entry["state_counts"][&state].as_u64().unwrap_or(0) + 1;
        entry["state_counts"][state] = json!(count);
    }
    let result = json!({"node_id_to_summary": {"cluster": {
        "summary": summary,
        "total_tasks": total_tasks,
        "total_actor_tasks": total_actor_tasks,
        "total_actor_scheduled": total_actor_scheduled,
        "summary_by": if by_name { "task_name" } else { "func_name" },
    }}});
    counted_reply(total, after_truncation, rows.len(), result, &warning)
}
