//! Every node's session logs: the dashboard's Logs pages (files by node, a
//! file's tail refreshed live, searching a file's lines) and Ray's
//! `/api/v0/logs` (listing) and `/api/v0/logs/{file,stream}` (a file, or a
//! worker's by pid or actor id, or a job's by submission id; `stream` follows
//! it), which `oxray logs` and `oxray.util.state.get_log` read.

use super::Dashboard;
use super::render::{ok, short_id};
use crate::state::rows::NodeQueryError;
use askama::Template;
use axum::Router;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;
use std::collections::BTreeMap;

/// Bytes of a file's tail a page shows.
const TAIL_BYTES: i64 = 64 * 1024;
/// The most of a log's end one `/api/v0/logs/file` reads (the node agents' own limit too).
const TAIL_READ: u64 = 4 << 20;
/// How often a followed log is read for what it gained.
const FOLLOW_POLL: std::time::Duration = std::time::Duration::from_millis(500);
/// Ray's default `lines`.
const DEFAULT_LINES: usize = 1000;

pub(super) fn routes() -> Router<Dashboard> {
    Router::new()
        .route("/api/v0/logs", get(ray_list))
        .route("/api/v0/logs/{media_type}", get(ray_get))
        .route("/logs", get(files_page))
        .route("/logs/view", get(view_page))
        .route("/logs/worker", get(worker_page))
        .route("/ui/logs/tail", get(tail_fragment))
        .route("/ui/logs/search", get(search_fragment))
}

fn bad(message: String) -> Response {
    (StatusCode::BAD_REQUEST, axum::Json(json!({"result": false, "msg": message, "data": {}}))).into_response()
}

/// Why a log could not be found: which node, or which worker's file. Finding the node fails
/// with a 400 (Ray's JSON reply), finding a worker's file with a 404 (text).
#[derive(Debug, thiserror::Error)]
enum LogError {
    #[error("Both node id and node ip are not provided. Please provide at least one of them.")]
    NoNode,
    #[error("Cannot find matching node_id for a given node ip {ip}")]
    NoNodeAt { ip: String },
    #[error("no cluster")]
    NoCluster,
    #[error(transparent)]
    Listing(#[from] NodeQueryError),
    #[error("no log of a worker with pid {pid} on node {node}")]
    NoWorkerLog { pid: u32, node: String },
}

/// A node's id from `node_id` or `node_ip` (the first live node with that address).
fn node_of(dash: &Dashboard, node_id: Option<&str>, node_ip: Option<&str>) -> Result<String, LogError> {
    if let Some(id) = node_id.filter(|id| !id.is_empty()) {
        return Ok(id.to_string());
    }
    let ip = node_ip.filter(|ip| !ip.is_empty()).ok_or(LogError::NoNode)?;
    let nodes = dash.sources.cluster.as_ref().map(|c| c.nodes()).unwrap_or_default();
    nodes
        .into_iter()
        .find(|n| n.node_ip == ip && n.state == "ALIVE")
        .map(|n| n.node_id)
        .ok_or_else(|| LogError::NoNodeAt { ip: ip.to_string() })
}

#[derive(serde::Deserialize, Default)]
struct ListQuery {
    node_id: Option<String>,
    node_ip: Option<String>,
    glob: Option<String>,
    #[allow(dead_code, reason = "Ray's clients send it; the agents answer at once")]
    timeout: Option<String>,
}

/// Ray's categories: a worker's output, Serve's replica logs, and the jobs run on the node.
fn category(name: &str) -> &'static str {
    if name.starts_with("logs/worker-") {
        "worker_out"
    } else if name.starts_with("logs/serve/") {
        "serve"
    } else if name.starts_with("jobs/") {
        "jobs"
    } else {
        "internal"
    }
}

async fn ray_list(State(dash): State<Dashboard>, Query(q): Query<ListQuery>) -> Response {
    let Some(cluster) = &dash.sources.cluster else { return bad("this server has no cluster to list logs of".into()) };
    let node = match node_of(&dash, q.node_id.as_deref(), q.node_ip.as_deref()) {
        Ok(node) => node,
        Err(e) => return bad(e.to_string()),
    };
    let pattern = q.glob.as_deref().unwrap_or("*");
    let pattern = match glob::Pattern::new(pattern) {
        Ok(p) => p,
        Err(e) => return bad(format!("glob={pattern:?} is not a glob pattern: {e}")),
    };
    match cluster.list_logs(&node).await {
        Ok(files) => {
            let mut result: BTreeMap<&str, Vec<String>> = BTreeMap::new();
            for file in files {
                let base = file.name.rsplit('/').next().unwrap_or(&file.name);
                if pattern.matches(&file.name) || pattern.matches(base) {
                    result.entry(category(&file.name)).or_default().push(file.name);
                }
            }
            axum::Json(json!({"result": true, "msg": "", "data": {"result": result}})).into_response()
        }
        Err(e) => (e.status(), axum::Json(json!({"result": false, "msg": e.to_string(), "data": {}}))).into_response(),
    }
}

#[derive(serde::Deserialize, Default)]
struct GetQuery {
    node_id: Option<String>,
    node_ip: Option<String>,
    filename: Option<String>,
    pid: Option<u32>,
    actor_id: Option<String>,
    task_id: Option<String>,
    submission_id: Option<String>,
    lines: Option<i64>,
}

/// The last `lines` lines of `data` (all of it for -1).
fn last_lines(data: &[u8], lines: i64) -> &[u8] {
    if lines < 0 {
        return data;
    }
    let body = data.strip_suffix(b"\n").unwrap_or(data);
    let mut seen = 0;
    for (i, byte) in body.iter().enumerate().rev() {
        if *byte == b'\n' {
            seen += 1;
            if seen == lines {
                return &data[i + 1..];
            }
        }
    }
    data
}

/// The log file of worker `pid` on node `node`.
async fn worker_log(dash: &Dashboard, node: &str, pid: u32) -> Result<String, LogError> {
    let cluster = dash.sources.cluster.as_ref().ok_or(LogError::NoCluster)?;
    let suffix = format!("-{pid}.log");
    cluster
        .list_logs(node)
        .await?
        .into_iter()
        .find(|f| f.name.starts_with("logs/worker-") && f.name.ends_with(&suffix))
        .map(|f| f.name)
        .ok_or_else(|| LogError::NoWorkerLog { pid, node: node.to_string() })
}

async fn ray_get(
    State(dash): State<Dashboard>,
    axum::extract::Path(media_type): axum::extract::Path<String>,
    Query(q): Query<GetQuery>,
) -> Response {
    let follow = match media_type.as_str() {
        "file" => false,
        "stream" => true,
        other => return bad(format!("media type {other:?}: expected file or stream")),
    };
    if q.task_id.is_some() {
        return bad("task_id is not supported: ask by actor_id, pid or filename".into());
    }
    let lines = q.lines.unwrap_or(DEFAULT_LINES as i64);
    if let Some(id) = q.submission_id.as_deref() {
        if follow {
            return bad(format!("follow a job's output with `oxray job logs --follow {id}` (the Jobs API's tail)"));
        }
        let Some(jobs) = &dash.sources.jobs else { return bad("this server runs no jobs".into()) };
        // The end of the log only (as much as one node log read), never the whole file.
        return match jobs.job_log_path(id) {
            Ok(path) => {
                let tail = oxray_jobs::logs::read_tail(&path, TAIL_READ);
                text_reply(last_lines(&tail, lines).to_vec())
            }
            Err(e) => (StatusCode::NOT_FOUND, e.to_string()).into_response(),
        };
    }
    let Some(cluster) = &dash.sources.cluster else { return bad("this server has no cluster".into()) };
    let (mut node_id, mut pid) = (q.node_id.clone(), q.pid);
    if let Some(actor_id) = q.actor_id.as_deref() {
        let Some(actor) = cluster.actors().into_iter().find(|a| a.actor_id == actor_id) else {
            return (StatusCode::NOT_FOUND, format!("no actor {actor_id} on this cluster")).into_response();
        };
        node_id = actor.node_id;
        pid = actor.pid;
    }
    let node = match node_of(&dash, node_id.as_deref(), q.node_ip.as_deref()) {
        Ok(node) => node,
        Err(e) => return bad(e.to_string()),
    };
    let name = match (q.filename, pid) {
        (Some(name), _) => name,
        (None, Some(pid)) => match worker_log(&dash, &node, pid).await {
            Ok(name) => name,
            Err(e) => return (StatusCode::NOT_FOUND, e.to_string()).into_response(),
        },
        (None, None) => return bad("name a log: filename, pid, actor_id or submission_id".into()),
    };
    let chunk = match cluster.read_log(&node, &name, -(TAIL_READ as i64), TAIL_READ).await {
        Ok(chunk) => chunk,
        Err(e) => return (e.status(), e.to_string()).into_response(),
    };
    let first = last_lines(&chunk.data, lines).to_vec();
    if !follow {
        return text_reply(first);
    }
    // Ray's `stream`: the last lines, then what the file gains, until the client goes.
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(16);
    let cluster = cluster.clone();
    let mut offset = chunk.offset + chunk.data.len() as u64;
    tokio::spawn(async move {
        if tx.send(Ok(first)).await.is_err() {
            return;
        }
        loop {
            tokio::select! {
                () = tx.closed() => return,
                () = tokio::time::sleep(FOLLOW_POLL) => {}
            }
            let Ok(more) = cluster.read_log(&node, &name, offset as i64, TAIL_READ).await else { return };
            offset = more.offset + more.data.len() as u64;
            if !more.data.is_empty() && tx.send(Ok(more.data)).await.is_err() {
                return;
            }
        }
    });
    let body = axum::body::Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response()
}

fn text_reply(body: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response()
}

// ---- pages ----

struct FileRow {
    name: String,
    size: u64,
    modified_ms: u64,
}

struct NodeFiles {
    node_id: String,
    short: String,
    ip: String,
    files: Vec<FileRow>,
    error: String,
}

#[derive(serde::Deserialize, Default)]
struct FilesQuery {
    #[serde(default)]
    q: String,
    pid: Option<u32>,
}

#[derive(Template)]
#[template(path = "logs.html")]
struct FilesPage {
    title: &'static str,
    here: &'static str,
    q: String,
    nodes: Vec<NodeFiles>,
}

async fn files_page(State(dash): State<Dashboard>, Query(query): Query<FilesQuery>) -> Response {
    let cluster = dash.sources.cluster.clone();
    let mut nodes = Vec::new();
    let needle = query.q.trim().to_lowercase();
    let pid_suffix = query.pid.map(|pid| format!("-{pid}.log"));
    for node in cluster.as_ref().map(|c| c.nodes()).unwrap_or_default().into_iter().filter(|n| n.state == "ALIVE") {
        let listed = match &cluster {
            Some(c) => c.list_logs(&node.node_id).await,
            None => Ok(Vec::new()),
        };
        let (files, error) = match listed {
            Ok(files) => (files, String::new()),
            Err(e) => (Vec::new(), e.to_string()),
        };
        let files = files
            .into_iter()
            .filter(|f| needle.is_empty() || f.name.to_lowercase().contains(&needle))
            .filter(|f| pid_suffix.as_ref().is_none_or(|s| f.name.ends_with(s.as_str())))
            .map(|f| FileRow { name: f.name, size: f.size, modified_ms: f.modified_ms })
            .collect();
        nodes.push(NodeFiles { short: short_id(&node.node_id), node_id: node.node_id, ip: node.node_ip, files, error });
    }
    ok(&FilesPage { title: "Logs", here: "/logs", q: query.q, nodes })
}

#[derive(serde::Deserialize, Default)]
struct FileQuery {
    node_id: String,
    name: String,
    #[serde(default)]
    q: String,
}

#[derive(Template)]
#[template(path = "log_view.html")]
struct ViewPage {
    title: &'static str,
    here: &'static str,
    node_id: String,
    short: String,
    name: String,
    q: String,
}

async fn view_page(Query(query): Query<FileQuery>) -> Response {
    let short = short_id(&query.node_id);
    ok(&ViewPage { title: "Log", here: "/logs", node_id: query.node_id, short, name: query.name, q: query.q })
}

#[derive(serde::Deserialize)]
struct WorkerQuery {
    node_id: String,
    pid: u32,
}

/// A worker's log, by node and pid (the actors' and tasks' tables link here).
async fn worker_page(State(dash): State<Dashboard>, Query(query): Query<WorkerQuery>) -> Response {
    match worker_log(&dash, &query.node_id, query.pid).await {
        Ok(name) => {
            let short = short_id(&query.node_id);
            ok(&ViewPage { title: "Log", here: "/logs", node_id: query.node_id, short, name, q: String::new() })
        }
        Err(e) => (StatusCode::NOT_FOUND, e.to_string()).into_response(),
    }
}

#[derive(Template)]
#[template(path = "log_tail.html")]
struct TailFragment {
    text: String,
    shown: u64,
    size: u64,
    error: String,
}

async fn tail_fragment(State(dash): State<Dashboard>, Query(query): Query<FileQuery>) -> Response {
    let Some(cluster) = &dash.sources.cluster else { return bad("no cluster".into()) };
    let fragment = match cluster.read_log(&query.node_id, &query.name, -TAIL_BYTES, TAIL_BYTES as u64).await {
        Ok(chunk) => TailFragment {
            shown: chunk.data.len() as u64,
            size: chunk.size,
            text: String::from_utf8_lossy(&chunk.data).into_owned(),
            error: String::new(),
        },
        Err(e) => TailFragment { text: String::new(), shown: 0, size: 0, error: e.to_string() },
    };
    ok(&fragment)
}

#[derive(Template)]
#[template(path = "log_search.html")]
struct SearchFragment {
    q: String,
    matches: Vec<(u64, String)>,
    truncated: bool,
    error: String,
}

async fn search_fragment(State(dash): State<Dashboard>, Query(query): Query<FileQuery>) -> Response {
    let Some(cluster) = &dash.sources.cluster else { return bad("no cluster".into()) };
    if query.q.trim().is_empty() {
        return ok(&SearchFragment { q: String::new(), matches: Vec::new(), truncated: false, error: String::new() });
    }
    let fragment = match cluster.search_log(&query.node_id, &query.name, query.q.trim(), 1000).await {
        Ok(found) => {
            SearchFragment { q: query.q, matches: found.matches, truncated: found.truncated, error: String::new() }
        }
        Err(e) => SearchFragment { q: query.q, matches: Vec::new(), truncated: false, error: e.to_string() },
    };
    ok(&fragment)
}

#[cfg(test)]
mod tests {
    use super::last_lines;

    #[test]
    fn the_last_lines_are_cut_at_line_ends() {
        assert_eq!(last_lines(b"a\nb\nc\n", 2), b"b\nc\n");
        assert_eq!(last_lines(b"a\nb\nc", 1), b"c");
        assert_eq!(last_lines(b"a\nb\n", 5), b"a\nb\n");
        assert_eq!(last_lines(b"a\nb\n", -1), b"a\nb\n");
    }
}
