//! The Jobs REST routes, as Ray's head serves them (`/api/jobs/...`,
//! `/api/packages/...`), including the `/logs/tail` WebSocket. A log is read in bounded
//! pieces, whatever its size: `GET .../logs` streams Ray's `{"logs": "..."}` from the file,
//! and each tail reads at most `MAX_READ` at a time; at most `MAX_TAILS` tails run at once.

use crate::auth::is_browser;
use crate::error::HttpError;
use axum::Router;
use axum::body::Bytes;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use oxray_jobs::logs::MAX_READ;
use oxray_jobs::packages::{MAX_PACKAGE_BYTES, package_key};
use oxray_jobs::record::parse_submit;
use oxray_jobs::{JobError, JobManager};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// The most log tails (WebSockets) served at once; one more is a 503.
pub(crate) const MAX_TAILS: usize = 64;

/// The Jobs API's state: the manager, and the tails' permits.
#[derive(Clone)]
struct JobsState {
    jobs: Arc<JobManager>,
    tails: Arc<tokio::sync::Semaphore>,
}

impl std::ops::Deref for JobsState {
    type Target = JobManager;
    fn deref(&self) -> &JobManager {
        &self.jobs
    }
}

pub(crate) fn routes(jobs: Arc<JobManager>) -> Router {
    let state = JobsState { jobs, tails: Arc::new(tokio::sync::Semaphore::new(MAX_TAILS)) };
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
        .with_state(state)
}

type Jobs = State<JobsState>;

async fn submit(State(jobs): Jobs, body: Bytes) -> Result<Response, HttpError> {
    let request = parse_submit(&body).map_err(JobError::Submit)?;
    let id = jobs.jobs.submit(request)?;
    Ok(axum::Json(json!({"job_id": id, "submission_id": id})).into_response())
}

async fn list(State(jobs): Jobs, headers: HeaderMap) -> Result<Response, HttpError> {
    Ok(axum::Json(jobs.list(is_browser(&headers))?).into_response())
}

async fn details(State(jobs): Jobs, Path(id): Path<String>, headers: HeaderMap) -> Result<Response, HttpError> {
    Ok(axum::Json(jobs.details(&id, is_browser(&headers))?).into_response())
}

/// Ray's `{"logs": "<the whole log>"}`, streamed from the file in bounded pieces (never built
/// whole in memory): the log as it was when asked, invalid UTF-8 replaced as Ray replaces it.
async fn logs(State(jobs): Jobs, Path(id): Path<String>) -> Result<Response, HttpError> {
    let path = jobs.job_log_path(&id)?;
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(2);
    tokio::task::spawn_blocking(move || {
        let mut encoder = JsonStringPieces::default();
        let _ = tx.blocking_send(Ok(Bytes::from_static(b"{\"logs\": \"")));
        let mut offset = 0;
        while offset < size {
            let chunk = oxray_jobs::logs::read_from(&path, offset, MAX_READ.min(size - offset));
            if chunk.is_empty() {
                break; // truncated meanwhile
            }
            offset += chunk.len() as u64;
            if tx.blocking_send(Ok(Bytes::from(encoder.push(&chunk)))).is_err() {
                return; // the client went away
            }
        }
        let _ = tx.blocking_send(Ok(Bytes::from(encoder.finish() + "\"}")));
    });
    let body = axum::body::Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    Ok(([(axum::http::header::CONTENT_TYPE, "application/json")], body).into_response())
}

/// Turns a byte stream into the inside of one JSON string, piece by piece: a UTF-8 sequence cut
/// between pieces is completed by the next one; bytes that are not UTF-8 become U+FFFD.
#[derive(Default)]
struct JsonStringPieces {
    /// The start of a character cut at the end of the last piece.
    carry: Vec<u8>,
}

impl JsonStringPieces {
    fn push(&mut self, chunk: &[u8]) -> String {
        let mut bytes = std::mem::take(&mut self.carry);
        bytes.extend_from_slice(chunk);
        // A character may be cut in the last 3 bytes: keep its start for the next piece.
        let cut = match std::str::from_utf8(&bytes) {
            Ok(_) => bytes.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => incomplete_tail_start(&bytes),
        };
        self.carry = bytes.split_off(cut);
        escape(&String::from_utf8_lossy(&bytes))
    }

    fn finish(&mut self) -> String {
        escape(&String::from_utf8_lossy(&std::mem::take(&mut self.carry)))
    }
}

/// Where an incomplete UTF-8 sequence at the end of `bytes` starts (its length if none).
fn incomplete_tail_start(bytes: &[u8]) -> usize {
    for back in 1..=3.min(bytes.len()) {
        let start = bytes.len() - back;
        let lead = bytes[start];
        let needs = match lead {
            0x00..=0x7F => return bytes.len(),
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => continue,
        };
        return if needs > back { start } else { bytes.len() };
    }
    bytes.len()
}

/// `text` escaped as the inside of a JSON string.
fn escape(text: &str) -> String {
    let quoted = serde_json::to_string(text).unwrap_or_default();
    quoted[1..quoted.len().saturating_sub(1)].to_string()
}

async fn stop(State(jobs): Jobs, Path(id): Path<String>) -> Result<Response, HttpError> {
    Ok(axum::Json(json!({"stopped": jobs.stop(&id)?})).into_response())
}

async fn delete(State(jobs): Jobs, Path(id): Path<String>) -> Result<Response, HttpError> {
    jobs.delete(&id)?;
    Ok(axum::Json(json!({"deleted": true})).into_response())
}

async fn has_package(State(jobs): Jobs, Path((protocol, name)): Path<(String, String)>) -> Result<Response, HttpError> {
    let key = package_key(&protocol, &name).map_err(JobError::Package)?;
    if jobs.has_package(&key) {
        Ok(StatusCode::OK.into_response())
    } else {
        Err(HttpError::PackageNotFound { protocol, name })
    }
}

async fn put_package(
    State(jobs): Jobs,
    Path((protocol, name)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, HttpError> {
    let key = package_key(&protocol, &name).map_err(JobError::Package)?;
    tokio::task::spawn_blocking(move || jobs.store_package(&key, &body)).await??;
    Ok(StatusCode::OK.into_response())
}

/// The job's output as it is written: text frames of whole lines, then a
/// normal close (1000) once the job has ended and everything was sent. At most
/// `MAX_TAILS` at once; one more is a 503.
async fn tail(State(jobs): Jobs, Path(id): Path<String>, upgrade: WebSocketUpgrade) -> Response {
    let id = match jobs.get(&id) {
        Ok(record) => record.submission_id,
        Err(e) => return HttpError::from(e).into_response(),
    };
    let Ok(permit) = jobs.tails.clone().try_acquire_owned() else {
        let text = format!("Service Unavailable: {MAX_TAILS} log tails are open already; try again when one ends");
        return (StatusCode::SERVICE_UNAVAILABLE, text).into_response();
    };
    upgrade.on_upgrade(move |socket| async move {
        follow(jobs.jobs, id, socket).await;
        drop(permit);
    })
}

async fn follow(jobs: Arc<JobManager>, id: String, mut socket: WebSocket) {
    let path = jobs.log_path(&id);
    let mut offset = 0u64;
    let mut partial = Vec::new();
    loop {
        // Checked before reading, so the last read sees everything a finished job wrote.
        let live = jobs.log_watch(&id);
        let chunk = tokio::task::spawn_blocking({
            let path = path.clone();
            move || oxray_jobs::logs::read_from(&path, offset, MAX_READ)
        })
        .await
        .unwrap_or_default();
        let more = chunk.len() as u64 == MAX_READ; // the file holds more: read on without waiting
        offset += chunk.len() as u64;
        partial.extend_from_slice(&chunk);
        let whole = match (live.is_some() || more, partial.iter().rposition(|&b| b == b'\n')) {
            (false, _) => std::mem::take(&mut partial),
            (true, Some(end)) => partial.drain(..=end).collect(),
            // A line longer than a read goes out in pieces rather than growing without bound.
            (true, None) if partial.len() as u64 >= MAX_READ => std::mem::take(&mut partial),
            (true, None) => Vec::new(),
        };
        if !whole.is_empty()
            && socket.send(Message::Text(String::from_utf8_lossy(&whole).into_owned().into())).await.is_err()
        {
            return;
        }
        if more {
            continue;
        }
        let Some(mut log) = live else { break };
        // More output, or the job's end (its supervisor drops the watch); a second at most. A
        // client that goes away ends the tail at once, giving its permit back.
        tokio::select! {
            _ = tokio::time::timeout(Duration::from_secs(1), log.changed()) => {}
            incoming = socket.recv() => match incoming {
                None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return,
                Some(Ok(_)) => {} // a ping is answered for us; nothing else is asked of a tail
            },
        }
    }
    let close = CloseFrame { code: 1000, reason: "".into() };
    let _ = socket.send(Message::Close(Some(close))).await;
}

#[cfg(test)]
mod tests {
    use super::JsonStringPieces;

    #[test]
    fn a_log_in_pieces_is_the_json_string_of_the_whole() {
        let text = "plain \"quoted\" \\ tab\t é→𝄞\n".repeat(50);
        let mut bytes = text.clone().into_bytes();
        bytes.extend_from_slice(b"bad \xff\xfe end \xe2\x82"); // invalid, then a cut-off character at the end
        let expected = serde_json::to_string(&String::from_utf8_lossy(&bytes)).unwrap();
        for piece in [1, 2, 3, 5, 7, 64, bytes.len()] {
            let mut encoder = JsonStringPieces::default();
            let mut out: String = bytes.chunks(piece).map(|chunk| encoder.push(chunk)).collect();
            out.push_str(&encoder.finish());
            assert_eq!(format!("\"{out}\""), expected, "pieces of {piece} bytes");
        }
    }
}
