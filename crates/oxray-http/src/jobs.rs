//! The Jobs REST routes, as Ray's head serves them (`/api/jobs/...`,
//! `/api/packages/...`), including the `/logs/tail` WebSocket.

use crate::auth::is_browser;
use crate::error::HttpError;
use axum::Router;
use axum::body::Bytes;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use oxray_jobs::packages::{MAX_PACKAGE_BYTES, package_key};
use oxray_jobs::record::parse_submit;
use oxray_jobs::{JobError, JobManager};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

pub(crate) fn routes(jobs: Arc<JobManager>) -> Router {
    Router::new()
        .route("/api/jobs/", post(submit).get(list))
        .route("/api/jobs/{id}", get(details).delete(delete))
        .route("/api/jobs/{id}/logs", get(logs))
        .route("/api/jobs/{id}/logs/tail", get(tail))
        .route("/api/jobs/{id}/stop", post(stop))
        .route(
            "/api/packages/{protocol}/{name}",
            get(has_package).put(put_package).layer(DefaultBodyLimit::max(MAX_PACKAGE_BYTES)),
        )
        .with_state(jobs)
}

type Jobs = State<Arc<JobManager>>;

async fn submit(State(jobs): Jobs, body: Bytes) -> Result<Response, HttpError> {
    let request = parse_submit(&body).map_err(JobError::BadRequest)?;
    let id = jobs.submit(request)?;
    Ok(axum::Json(json!({"job_id": id, "submission_id": id})).into_response())
}

async fn list(State(jobs): Jobs, headers: HeaderMap) -> Result<Response, HttpError> {
    Ok(axum::Json(jobs.list(is_browser(&headers))?).into_response())
}

async fn details(State(jobs): Jobs, Path(id): Path<String>, headers: HeaderMap) -> Result<Response, HttpError> {
    Ok(axum::Json(jobs.details(&id, is_browser(&headers))?).into_response())
}

async fn logs(State(jobs): Jobs, Path(id): Path<String>) -> Result<Response, HttpError> {
    let logs =
        tokio::task::spawn_blocking(move || jobs.logs(&id)).await.map_err(|e| JobError::Internal(e.to_string()))??;
    Ok(axum::Json(json!({ "logs": logs })).into_response())
}

async fn stop(State(jobs): Jobs, Path(id): Path<String>) -> Result<Response, HttpError> {
    Ok(axum::Json(json!({"stopped": jobs.stop(&id)?})).into_response())
}

async fn delete(State(jobs): Jobs, Path(id): Path<String>) -> Result<Response, HttpError> {
    jobs.delete(&id)?;
    Ok(axum::Json(json!({"deleted": true})).into_response())
}

async fn has_package(State(jobs): Jobs, Path((protocol, name)): Path<(String, String)>) -> Result<Response, HttpError> {
    let key = package_key(&protocol, &name).map_err(JobError::BadRequest)?;
    if jobs.has_package(&key) {
        Ok(StatusCode::OK.into_response())
    } else {
        Err(JobError::NotFound(format!("Package {protocol}://{name} does not exist")).into())
    }
}

async fn put_package(
    State(jobs): Jobs,
    Path((protocol, name)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, HttpError> {
    let key = package_key(&protocol, &name).map_err(JobError::BadRequest)?;
    tokio::task::spawn_blocking(move || jobs.store_package(&key, &body))
        .await
        .map_err(|e| JobError::Internal(e.to_string()))??;
    Ok(StatusCode::OK.into_response())
}

/// The job's output as it is written: text frames of whole lines, then a
/// normal close (1000) once the job has ended and everything was sent.
async fn tail(State(jobs): Jobs, Path(id): Path<String>, upgrade: WebSocketUpgrade) -> Response {
    let id = match jobs.get(&id) {
        Ok(record) => record.submission_id,
        Err(e) => return HttpError::from(e).into_response(),
    };
    upgrade.on_upgrade(move |socket| follow(jobs, id, socket))
}

async fn follow(jobs: Arc<JobManager>, id: String, mut socket: WebSocket) {
    let path = jobs.log_path(&id);
    let mut offset = 0u64;
    let mut partial = Vec::new();
    loop {
        // Checked before reading, so the last read sees everything a finished job wrote.
        let live = jobs.log_watch(&id);
        let chunk = oxray_jobs::entrypoint::read_log_from(&path, offset, u64::MAX);
        offset += chunk.len() as u64;
        partial.extend_from_slice(&chunk);
        let whole = match (live.is_some(), partial.iter().rposition(|&b| b == b'\n')) {
            (false, _) => std::mem::take(&mut partial),
            (true, Some(end)) => partial.drain(..=end).collect(),
            (true, None) => Vec::new(),
        };
        if !whole.is_empty()
            && socket.send(Message::Text(String::from_utf8_lossy(&whole).into_owned().into())).await.is_err()
        {
            return;
        }
        let Some(mut log) = live else { break };
        // More output, or the job's end (its supervisor drops the watch); a second at most.
        let _ = tokio::time::timeout(Duration::from_secs(1), log.changed()).await;
    }
    let close = CloseFrame { code: 1000, reason: "".into() };
    let _ = socket.send(Message::Close(Some(close))).await;
}
