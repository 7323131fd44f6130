//! Serve's gRPC proxy: beside a node's HTTP proxy, on `grpc_options.port` (9000 by default) of the
//! same host, when `grpc_servicer_functions` names some. It speaks HTTP/2 without TLS (gRPC's
//! insecure channel), routes a call by its `application` metadata (optional with one application),
//! and calls the ingress replica's `handle_grpc` with the method's path, the metadata and the
//! request's messages as bytes: the replica decodes them with the user's generated servicer code
//! and calls the deployment's method of that name. A server-streaming reply comes in batches
//! (`grpc_next`), as a streamed HTTP body does. No Python runs here; the proxy never decodes a
//! message, so it needs none of the user's protos.
//!
//! Ray's built-in `ray.serve.RayServeAPIService` (`ListApplications`, `Healthz`) is answered here.
//! Its status codes: an unknown application NOT_FOUND, backpressure RESOURCE_EXHAUSTED, a deadline
//! (`grpc-timeout`, or `request_timeout_s`) DEADLINE_EXCEEDED, a failed deployment UNAVAILABLE,
//! anything else INTERNAL. The replica's own codes (its `RayServegRPCContext`) pass through.

use super::{CancelOnDrop, Failure, ReplicaCallError, ServeProxy, Serving, listen, new_request_id, take_slot, wire};
use crate::serve::{ConnectionLimits, Protocol};
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use http_body::Frame;
use oxray_serve::routes::{GrpcOptions, Route};
use serde::Serialize;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

const LIST_APPLICATIONS: &str = "/ray.serve.RayServeAPIService/ListApplications";
const HEALTHZ: &str = "/ray.serve.RayServeAPIService/Healthz";

/// The gRPC status codes the proxy itself answers with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Code {
    Ok = 0,
    DeadlineExceeded = 4,
    NotFound = 5,
    ResourceExhausted = 8,
    Unimplemented = 12,
    Internal = 13,
    Unavailable = 14,
}

/// A code's name, as Ray's metrics label it (`grpc.StatusCode`'s names).
fn code_name(code: u32) -> &'static str {
    const NAMES: [&str; 17] = [
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    ];
    NAMES.get(code as usize).copied().unwrap_or("UNKNOWN")
}

/// A gRPC proxy listening on its port; dropping it stops it.
pub struct GrpcServer {
    pub local_addr: std::net::SocketAddr,
    /// The host and options it was started with (a change restarts it).
    pub options: (String, GrpcOptions),
    serving: Serving,
}

impl GrpcServer {
    /// Binds `host:options.port` and serves `proxy`'s applications there; requests larger than
    /// `max_message_bytes` get RESOURCE_EXHAUSTED.
    pub async fn start(
        host: &str,
        options: GrpcOptions,
        max_message_bytes: u64,
        proxy: Arc<ServeProxy>,
    ) -> std::io::Result<Self> {
        let listener = listen(host, options.port).await.map_err(|e| {
            std::io::Error::new(e.kind(), format!("Serve's gRPC proxy cannot listen on {host}:{}: {e}", options.port))
        })?;
        let local_addr = listener.local_addr()?;
        let limits = ConnectionLimits { max_connections: 4096, header_timeout: Duration::from_secs(90) };
        let state = Proxied { proxy, options: Arc::new(options.clone()), max_message_bytes };
        let app = Router::new().fallback(handle).with_state(state);
        let serving = Serving::spawn(listener, app, limits, None, Protocol::Http2);
        Ok(GrpcServer { local_addr, options: (host.to_string(), options), serving })
    }

    /// Stops accepting, lets calls in flight finish (a few seconds at most), and waits.
    pub async fn shutdown(self) {
        self.serving.shutdown().await;
    }
}

#[derive(Clone)]
struct Proxied {
    proxy: Arc<ServeProxy>,
    options: Arc<GrpcOptions>,
    max_message_bytes: u64,
}

/// A call's end: its code, details and trailing metadata.
#[derive(Debug)]
struct Status {
    code: u32,
    details: String,
    trailing: Vec<(String, String)>,
}

impl Status {
    fn new(code: Code, details: impl Into<String>) -> Self {
        Status { code: code as u32, details: details.into(), trailing: Vec::new() }
    }
}

async fn handle(State(state): State<Proxied>, request: Request) -> Response {
    let started = Instant::now();
    let path = request.uri().path().to_string();
    let request_id = match metadata_value(request.headers(), "request_id") {
        Some(id) if !id.is_empty() => id,
        _ => new_request_id(),
    };
    let _ongoing = state.proxy.grpc_metrics.start();
    let mut app = String::new();
    let (response, code) = answer(&state, request, &path, &request_id, &mut app).await;
    let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    let name = code_name(code);
    state.proxy.grpc_metrics.record_status(&app, &path, &app, name, code != Code::Ok as u32, latency_ms);
    response
}

/// The call's response, and its status code (OK for a stream that started: its end is not known yet).
async fn answer(state: &Proxied, request: Request, path: &str, request_id: &str, app: &mut String) -> (Response, u32) {
    let proxy = &state.proxy;
    if path == LIST_APPLICATIONS || path == HEALTHZ {
        if !proxy.populated.load(Ordering::Acquire) {
            let status = Status::new(Code::Unavailable, "Route table is not populated yet.");
            return (trailers_only(&status, request_id), status.code);
        }
        let message = if path == HEALTHZ {
            prost::Message::encode_to_vec(&HealthzResponse { message: "success".into() })
        } else {
            let application_names = proxy.table().routes.iter().map(|r| r.app.clone()).collect();
            prost::Message::encode_to_vec(&ListApplicationsResponse { application_names })
        };
        return (unary(vec![Bytes::from(message)], &Status::new(Code::Ok, ""), request_id), 0);
    }
    match call(state, request, path, request_id, app).await {
        Ok(answered) => answered,
        Err(status) => {
            if status.code == Code::Internal as u32 {
                tracing::warn!("Serve gRPC call {request_id} ({path}) failed: {}", status.details);
            }
            let code = status.code;
            (trailers_only(&status, request_id), code)
        }
    }
}

async fn call(
    state: &Proxied,
    request: Request,
    path: &str,
    request_id: &str,
    app_label: &mut String,
) -> Result<(Response, u32), Status> {
    let proxy = &state.proxy;
    let (parts, body) = request.into_parts();
    let table = proxy.table();
    let app = metadata_value(&parts.headers, "application");
    let route = table.match_app(app.as_deref()).map_err(|e| Status::new(Code::NotFound, e.to_string()))?.clone();
    app_label.clone_from(&route.app);
    if let Some(encoding) = metadata_value(&parts.headers, "grpc-encoding").filter(|e| e != "identity") {
        return Err(Status::new(
            Code::Unimplemented,
            format!("Serve's gRPC proxy takes uncompressed messages only (grpc-encoding {encoding:?})"),
        ));
    }
    let limit = state.max_message_bytes;
    let too_large = || {
        Status::new(Code::ResourceExhausted, format!("The request is larger than the proxy's limit of {limit} bytes."))
    };
    let Ok(body) = axum::body::to_bytes(body, usize::try_from(limit).unwrap_or(usize::MAX)).await else {
        return Err(too_large());
    };
    let messages = split_messages(&body).map_err(|why| Status::new(Code::Internal, why))?;
    let timeout = deadline(&parts.headers, &state.options);
    let stream_id = new_request_id();
    let model = metadata_value(&parts.headers, "multiplexed_model_id").filter(|m| !m.is_empty());
    let meta = CallMeta {
        method: path,
        application: &route.app,
        request_id,
        stream_id: &stream_id,
        multiplexed_model_id: model.as_deref().unwrap_or(""),
        metadata: parts
            .headers
            .iter()
            .filter(|(name, _)| !is_transport_header(name.as_str()))
            .map(|(k, v)| (k.as_str().to_string(), wire::latin1(v.as_bytes())))
            .collect(),
        servicer_functions: &state.options.grpc_servicer_functions,
    };
    let payload = encode_call(&meta, &messages);
    let started = Instant::now();
    let dispatch = dispatch(proxy, &route, payload, &stream_id, model.as_deref(), request_id);
    let outcome = match timeout {
        None => dispatch.await,
        Some(limit) => match tokio::time::timeout(limit, dispatch).await {
            Ok(outcome) => outcome,
            Err(_) => Err(Failure::TimedOut(started.elapsed())),
        },
    };
    outcome.map_err(|failure| match failure {
        Failure::TimedOut(after) => Status::new(
            Code::DeadlineExceeded,
            format!("Request {request_id} timed out after {:.1}s.", after.as_secs_f64()),
        ),
        Failure::Backpressure(_, message, _) => Status::new(Code::ResourceExhausted, message),
        Failure::Unavailable(message) => Status::new(Code::Unavailable, message),
        Failure::Internal(message) => Status::new(Code::Internal, message),
    })
}

/// Waits for a replica with room, sends the call, and answers with its first batch (the rest of a
/// stream follows from a task of its own).
async fn dispatch(
    proxy: &Arc<ServeProxy>,
    route: &Route,
    payload: Vec<u8>,
    stream_id: &str,
    model: Option<&str>,
    request_id: &str,
) -> Result<(Response, u32), Failure> {
    let slot = take_slot(proxy, route, model).await?;
    let mut cancel = CancelOnDrop::for_slot(proxy, &slot, stream_id, "grpc_cancel");
    let first = match proxy.calls.call(&slot.replica.actor_id, "handle_grpc", payload).await {
        Ok(raw) => raw,
        Err(e) => {
            cancel.disarm();
            if let ReplicaCallError::ActorDied(_) = e {
                proxy.dead.write().push(slot.replica.replica_id.clone());
            }
            return Err(Failure::Internal(e.to_string()));
        }
    };
    let batch = decode_batch(&first).map_err(Failure::Internal)?;
    if let Some(status) = batch.status {
        cancel.disarm();
        return Ok((unary(batch.messages, &status, request_id), status.code));
    }
    let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(4);
    let trailer_id = request_id.to_string();
    tokio::spawn(async move {
        let mut cancel = cancel;
        let _slot = slot; // the replica's place is held until the stream ends
        let calls = cancel.calls.clone();
        let actor_id = cancel.actor_id.clone();
        let mut messages = batch.messages;
        loop {
            for message in messages.drain(..) {
                if tx.send(Ok(Frame::data(framed(&message)))).await.is_err() {
                    return; // the client is gone: `cancel` tells the replica
                }
            }
            let raw = tokio::select! {
                raw = calls.call(&actor_id, "grpc_next", cancel.stream_id.clone().into_bytes()) => raw,
                _ = tx.closed() => return,
            };
            let next = raw.map_err(|e| e.to_string()).and_then(|raw| decode_batch(&raw));
            let batch = match next {
                Ok(batch) => batch,
                Err(why) => {
                    cancel.disarm();
                    let status = Status::new(Code::Internal, why);
                    let _ = tx.send(Ok(Frame::trailers(trailers(&status, &trailer_id)))).await;
                    return;
                }
            };
            messages = batch.messages;
            if let Some(status) = batch.status {
                cancel.disarm();
                for message in messages.drain(..) {
                    if tx.send(Ok(Frame::data(framed(&message)))).await.is_err() {
                        return;
                    }
                }
                let _ = tx.send(Ok(Frame::trailers(trailers(&status, &trailer_id)))).await;
                return;
            }
        }
    });
    let body = http_body_util::StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx));
    Ok((grpc_response(Body::new(body)), Code::Ok as u32))
}

/// What the replica gets besides the messages.
#[derive(Serialize)]
struct CallMeta<'a> {
    /// `/package.Service/Method`: the deployment's method is the last part.
    method: &'a str,
    application: &'a str,
    request_id: &'a str,
    stream_id: &'a str,
    multiplexed_model_id: &'a str,
    /// The call's metadata (gRPC's transport headers left out), values as Latin-1 text.
    metadata: Vec<(String, String)>,
    /// `grpc_servicer_functions`: the replica imports them to decode the messages.
    servicer_functions: &'a [String],
}

/// A call as the replica's `handle_grpc` reads it: a little-endian `u32` length, the metadata as
/// JSON, then each request message as a `u32` length and its bytes.
fn encode_call(meta: &CallMeta<'_>, messages: &[Bytes]) -> Vec<u8> {
    let json = serde_json::to_vec(meta).expect("call metadata is plain strings");
    let size = 4 + json.len() + messages.iter().map(|m| 4 + m.len()).sum::<usize>();
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(&json);
    for message in messages {
        out.extend_from_slice(&(message.len() as u32).to_le_bytes());
        out.extend_from_slice(message);
    }
    out
}

/// One batch of a replica's answer: messages, and the status once the call is over.
#[derive(Debug)]
struct Batch {
    status: Option<Status>,
    messages: Vec<Bytes>,
}

#[derive(serde::Deserialize)]
struct BatchHead {
    done: bool,
    #[serde(default)]
    code: u32,
    #[serde(default)]
    details: String,
    #[serde(default)]
    trailing: Vec<(String, String)>,
}

/// A batch as the replica writes it: a `u32` length and a JSON head (`done`, and when done the
/// `code`, `details` and `trailing` metadata), then each message as a `u32` length and its bytes.
fn decode_batch(raw: &[u8]) -> Result<Batch, String> {
    let malformed = |what: &str| format!("a replica's gRPC reply is malformed ({what})");
    fn take(raw: &[u8], at: usize, n: usize) -> Result<&[u8], String> {
        raw.get(at..at.saturating_add(n)).ok_or_else(|| "a replica's gRPC reply is malformed (truncated)".to_string())
    }
    let len = |bytes: &[u8]| u32::from_le_bytes(bytes.try_into().expect("4 bytes")) as usize;
    let head_len = len(take(raw, 0, 4)?);
    let head: BatchHead = serde_json::from_slice(take(raw, 4, head_len)?).map_err(|e| malformed(&e.to_string()))?;
    let mut at = 4 + head_len;
    let mut messages = Vec::new();
    while at < raw.len() {
        let n = len(take(raw, at, 4)?);
        messages.push(Bytes::copy_from_slice(take(raw, at + 4, n)?));
        at += 4 + n;
    }
    let status = head.done.then_some(Status { code: head.code, details: head.details, trailing: head.trailing });
    Ok(Batch { status, messages })
}

/// A request body's messages (each a compressed flag, a big-endian `u32` length, the bytes).
fn split_messages(body: &[u8]) -> Result<Vec<Bytes>, String> {
    let mut messages = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let Some((head, tail)) = rest.split_at_checked(5) else {
            return Err("a gRPC message frame is cut short".into());
        };
        if head[0] != 0 {
            return Err("a compressed gRPC message, which Serve's gRPC proxy does not take".into());
        }
        let n = u32::from_be_bytes(head[1..5].try_into().expect("4 bytes")) as usize;
        let Some((message, tail)) = tail.split_at_checked(n) else {
            return Err("a gRPC message is shorter than its frame says".into());
        };
        messages.push(Bytes::copy_from_slice(message));
        rest = tail;
    }
    Ok(messages)
}

/// A message in gRPC's length-prefixed framing, uncompressed.
fn framed(message: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(5 + message.len());
    out.push(0);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    Bytes::from(out)
}

/// `ray.serve.ListApplicationsResponse`: the built-in service's answer.
#[derive(Clone, PartialEq, prost::Message)]
struct ListApplicationsResponse {
    #[prost(string, repeated, tag = "1")]
    application_names: Vec<String>,
}

/// `ray.serve.HealthzResponse`.
#[derive(Clone, PartialEq, prost::Message)]
struct HealthzResponse {
    #[prost(string, tag = "1")]
    message: String,
}

fn grpc_response(body: Body) -> Response {
    let mut response = Response::new(body);
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    response
}

/// The trailers that end a call: its status, its details (percent-encoded, as gRPC sends them),
/// its trailing metadata and Ray's `request_id`.
fn trailers(status: &Status, request_id: &str) -> HeaderMap {
    let mut map = HeaderMap::new();
    map.insert("grpc-status", HeaderValue::from(status.code));
    if !status.details.is_empty() {
        let encoded = percent_encoding::utf8_percent_encode(&status.details, GRPC_MESSAGE).to_string();
        if let Ok(value) = HeaderValue::from_str(&encoded) {
            map.insert("grpc-message", value);
        }
    }
    for (name, value) in &status.trailing {
        let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value)) else {
            continue; // metadata no client could read: left out
        };
        map.append(name, value);
    }
    if let Ok(value) = HeaderValue::from_str(request_id) {
        map.insert(HeaderName::from_static("request_id"), value);
    }
    map
}

/// What gRPC percent-encodes in `grpc-message`: controls, `%`, and anything outside ASCII.
const GRPC_MESSAGE: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS.add(b'%');

/// Messages, then the trailers.
fn unary(messages: Vec<Bytes>, status: &Status, request_id: &str) -> Response {
    let mut frames: Vec<Result<Frame<Bytes>, std::io::Error>> =
        messages.iter().map(|m| Ok(Frame::data(framed(m)))).collect();
    frames.push(Ok(Frame::trailers(trailers(status, request_id))));
    grpc_response(Body::new(http_body_util::StreamBody::new(tokio_stream::iter(frames))))
}

/// An error before any message: the status in the headers, no body (gRPC's "trailers-only").
fn trailers_only(status: &Status, request_id: &str) -> Response {
    let mut response = grpc_response(Body::empty());
    *response.status_mut() = StatusCode::OK;
    response.headers_mut().extend(trailers(status, request_id));
    response
}

/// Headers of gRPC's transport, not the call's metadata.
fn is_transport_header(name: &str) -> bool {
    matches!(name, "content-type" | "te" | "content-length") || name.starts_with("grpc-")
}

fn metadata_value(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string)
}

/// The call's deadline: its `grpc-timeout` (`<digits><unit>`, unit one of H M S m u n), or the
/// options' `request_timeout_s`, whichever is sooner.
fn deadline(headers: &HeaderMap, options: &GrpcOptions) -> Option<Duration> {
    let from_header = metadata_value(headers, "grpc-timeout").and_then(|v| parse_grpc_timeout(&v));
    let from_options = options.request_timeout_s.and_then(|s| Duration::try_from_secs_f64(s).ok());
    match (from_header, from_options) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    let (digits, unit) = value.split_at_checked(value.len().checked_sub(1)?)?;
    if digits.is_empty() || digits.len() > 8 {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_split_from_their_frames_and_framed_again() {
        let body: Vec<u8> = [framed(b"ab"), framed(b""), framed(b"xyz")].concat();
        let messages = split_messages(&body).unwrap();
        assert_eq!(messages, vec![Bytes::from("ab"), Bytes::new(), Bytes::from("xyz")]);
        assert!(split_messages(&body[..body.len() - 1]).unwrap_err().contains("shorter"));
        assert!(split_messages(&[1, 0, 0, 0, 0]).unwrap_err().contains("compressed"));
        assert!(split_messages(&[0, 0]).unwrap_err().contains("cut short"));
    }

    #[test]
    fn a_replicas_batch_decodes_with_its_status_once_done() {
        let head = br#"{"done":true,"code":5,"details":"nope","trailing":[["k","v"]]}"#;
        let mut raw = (head.len() as u32).to_le_bytes().to_vec();
        raw.extend_from_slice(head);
        raw.extend_from_slice(&3u32.to_le_bytes());
        raw.extend_from_slice(b"abc");
        let batch = decode_batch(&raw).unwrap();
        let status = batch.status.unwrap();
        assert_eq!((status.code, status.details.as_str()), (5, "nope"));
        assert_eq!(status.trailing, vec![("k".to_string(), "v".to_string())]);
        assert_eq!(batch.messages, vec![Bytes::from("abc")]);
        let open = br#"{"done":false}"#;
        let mut raw = (open.len() as u32).to_le_bytes().to_vec();
        raw.extend_from_slice(open);
        assert!(decode_batch(&raw).unwrap().status.is_none());
        assert!(decode_batch(&raw[..3]).unwrap_err().contains("truncated"));
    }

    #[test]
    fn deadlines_follow_grpc_timeout_and_the_options() {
        assert_eq!(parse_grpc_timeout("100m"), Some(Duration::from_millis(100)));
        assert_eq!(parse_grpc_timeout("2S"), Some(Duration::from_secs(2)));
        assert_eq!(parse_grpc_timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_grpc_timeout("m"), None);
        assert_eq!(parse_grpc_timeout("5x"), None);
        assert_eq!(parse_grpc_timeout(""), None);
        let options =
            GrpcOptions { port: 9000, grpc_servicer_functions: vec!["m.f".into()], request_timeout_s: Some(1.0) };
        let mut headers = HeaderMap::new();
        assert_eq!(deadline(&headers, &options), Some(Duration::from_secs(1)));
        headers.insert("grpc-timeout", HeaderValue::from_static("200m"));
        assert_eq!(deadline(&headers, &options), Some(Duration::from_millis(200)));
    }

    #[test]
    fn the_built_in_services_messages_are_protobuf_strings() {
        let healthz = prost::Message::encode_to_vec(&HealthzResponse { message: "success".into() });
        assert_eq!(healthz, b"\x0a\x07success");
        let names = ListApplicationsResponse { application_names: vec!["a".repeat(200), "b".into()] };
        assert_eq!(prost::Message::encode_to_vec(&names)[..3], [0x0a, 0xc8, 0x01]);
        assert_eq!(code_name(5), "NOT_FOUND");
        assert_eq!(code_name(99), "UNKNOWN");
        let status = Status { code: 13, details: "bad 100% é".into(), trailing: vec![("x-k".into(), "v".into())] };
        let map = trailers(&status, "rid");
        assert_eq!(map["grpc-status"], "13");
        assert_eq!(map["grpc-message"], "bad 100%25 %C3%A9");
        assert_eq!(map["x-k"], "v");
        assert_eq!(map["request_id"], "rid");
    }
}
