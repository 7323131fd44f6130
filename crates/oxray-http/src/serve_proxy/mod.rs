//! Serve's HTTP proxy: one per node, on `http_options.host:port` (127.0.0.1:8000 by default). It
//! matches a request's path to an application by the controller's route table, reads its body
//! (413 past the limit), picks a replica of the application's ingress deployment
//! ([`replicas`]) and calls the replica's `handle_http` through the engine ([`ReplicaCalls`]).
//! No Python runs here. A response that streams comes back in batches, each asked for with
//! `http_next`; a client that goes away (or a request past its timeout) makes the proxy call the
//! replica's `http_cancel`. Ray's special endpoints (`/-/routes`, `/-/healthz`), its
//! `x-request-id`, its status codes and texts (404, 408, 413, 503 or 429 for backpressure,
//! 500) are kept. The data-plane port needs no token, as in Ray.

mod grpc;
pub mod metrics;
pub mod replicas;
mod websocket;
pub mod wire;

pub use grpc::GrpcServer;

use crate::serve::{ConnectionLimits, HttpsIdentity, Protocol, serve};
use axum::Router;
use axum::body::Body;
use axum::extract::{FromRequestParts, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use oxray_jobs::BoxFuture;
use oxray_serve::routes::{HttpOptions, Route, RouteTable};
use parking_lot::RwLock;
use replicas::{Loads, Slot};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Why a call to a replica failed.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaCallError {
    /// The replica's actor is gone (it is taken out of this proxy's choices until the table changes).
    #[error("the replica's actor died: {0}")]
    ActorDied(String),
    /// The call raised, or the engine could not run it.
    #[error("{0}")]
    Failed(String),
}

/// How the proxy reaches replicas: an actor call with one byte-string argument and a
/// byte-string result. The runtime implements it over the node agent.
pub trait ReplicaCalls: Send + Sync + 'static {
    fn call(
        &self,
        actor_id: &str,
        method: &'static str,
        payload: Vec<u8>,
    ) -> BoxFuture<'static, Result<Vec<u8>, ReplicaCallError>>;
    /// A call nobody waits for (cancelling a request).
    fn notify(&self, actor_id: &str, method: &'static str, payload: Vec<u8>);
}

/// The proxy's routing state, shared by its connections.
pub struct ServeProxy {
    table: RwLock<Arc<RouteTable>>,
    populated: AtomicBool,
    loads: Arc<Loads>,
    calls: Arc<dyn ReplicaCalls>,
    /// Replicas found dead since the last table (not chosen again until it lists them anew).
    dead: RwLock<Vec<String>>,
    /// This proxy's name in its load reports.
    source: String,
    pub metrics: metrics::ProxyMetrics,
    /// The gRPC proxy's series (it shares this routing state when it runs).
    pub grpc_metrics: metrics::ProxyMetrics,
}

/// Reports every autoscaled route's load at its `metrics_interval_s`, until the proxy is gone.
async fn report_load(proxy: std::sync::Weak<ServeProxy>) {
    let mut last: std::collections::HashMap<String, Instant> = std::collections::HashMap::new();
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(proxy) = proxy.upgrade() else { return };
        let table = proxy.table();
        let now = Instant::now();
        for route in &table.routes {
            let Some(interval) = route.metrics_interval_s.and_then(|s| Duration::try_from_secs_f64(s).ok()) else {
                continue;
            };
            if last.get(&route.app).is_none_or(|at| now.duration_since(*at) >= interval) {
                last.insert(route.app.clone(), now);
                proxy.report(&table, route);
            }
        }
    }
}

impl ServeProxy {
    /// A proxy that reports its load on autoscaled deployments to the controller, from a task of
    /// its own that ends with it.
    pub fn new(calls: Arc<dyn ReplicaCalls>) -> Arc<Self> {
        let proxy = Arc::new(ServeProxy {
            table: RwLock::default(),
            populated: AtomicBool::new(false),
            loads: Arc::default(),
            calls,
            dead: RwLock::default(),
            source: format!("proxy-{}", &new_request_id()[..8]),
            metrics: metrics::ProxyMetrics::new(&metrics::HTTP),
            grpc_metrics: metrics::ProxyMetrics::new(&metrics::GRPC),
        });
        tokio::spawn(report_load(Arc::downgrade(&proxy)));
        proxy
    }

    /// Tells the controller this proxy's requests to `route` (Ray's proxies report through their
    /// handles the same way).
    fn report(&self, table: &RouteTable, route: &Route) {
        let Some(controller) = &table.controller_actor_id else { return };
        let report = serde_json::json!({
            "app": route.app,
            "deployment": route.deployment,
            "source": self.source,
            "requests": self.loads.requests(route),
        });
        self.calls.notify(controller, "record_proxy_load", report.to_string().into_bytes());
    }

    /// Routes by `table` from now on; requests waiting for a replica look again.
    pub fn set_table(&self, table: RouteTable) {
        *self.table.write() = Arc::new(table);
        self.dead.write().clear();
        self.populated.store(true, Ordering::Release);
        self.loads.changed.notify_waiters();
    }

    fn table(&self) -> Arc<RouteTable> {
        self.table.read().clone()
    }

    /// `route` without the replicas found dead.
    fn live(&self, route: &Route) -> Route {
        let dead = self.dead.read();
        let mut route = route.clone();
        if !dead.is_empty() {
            route.replicas.retain(|r| !dead.contains(&r.replica_id));
        }
        route
    }
}

/// A proxy listening on its port; dropping it stops it.
pub struct ProxyServer {
    pub local_addr: SocketAddr,
    pub options: HttpOptions,
    serving: Serving,
}

impl ProxyServer {
    /// Binds `options.host:options.port` and serves `proxy` there.
    pub async fn start(options: HttpOptions, proxy: Arc<ServeProxy>) -> std::io::Result<Self> {
        let listener = listen(&options.host, options.port).await.map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("Serve's HTTP proxy cannot listen on {}:{}: {e}", options.host, options.port),
            )
        })?;
        let https = https_identity(&options)?;
        let local_addr = listener.local_addr()?;
        let keep_alive = Duration::try_from_secs_f64(options.keep_alive_timeout_s).unwrap_or(Duration::from_secs(90));
        let limits = ConnectionLimits { max_connections: 4096, header_timeout: keep_alive };
        let app = router(proxy, options.clone());
        let serving = Serving::spawn(listener, app, limits, https, Protocol::Http1);
        Ok(ProxyServer { local_addr, options, serving })
    }

    /// Stops accepting, lets requests in flight finish (a few seconds at most), and waits.
    pub async fn shutdown(self) {
        self.serving.shutdown().await;
    }
}

/// A proxy's accept loop on its task: stopped when shut down or dropped.
pub(crate) struct Serving {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Serving {
    pub(crate) fn spawn(
        listener: TcpListener,
        app: Router,
        limits: ConnectionLimits,
        https: Option<HttpsIdentity>,
        protocol: Protocol,
    ) -> Self {
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(serve(listener, app, limits, https, stopped, protocol));
        Serving { stop: Some(stop), task }
    }

    /// Stops accepting, lets requests in flight finish (a few seconds at most), and waits.
    pub(crate) async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The certificate and key of `ssl_certfile` and `ssl_keyfile`, read on this node; an error names
/// the file or what is wrong with it.
fn https_identity(options: &HttpOptions) -> std::io::Result<Option<HttpsIdentity>> {
    let invalid = |message: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, message);
    let (key, cert) = match (&options.ssl_keyfile, &options.ssl_certfile) {
        (None, None) => return Ok(None),
        (Some(key), Some(cert)) => (key, cert),
        _ => return Err(invalid("Serve's HTTPS needs both ssl_keyfile and ssl_certfile".to_string())),
    };
    let read = |path: &str, what: &str| {
        std::fs::read(path).map_err(|e| std::io::Error::new(e.kind(), format!("cannot read {what} {path}: {e}")))
    };
    let identity = HttpsIdentity::from_pem(&read(cert, "ssl_certfile")?, &read(key, "ssl_keyfile")?)
        .map_err(|e| invalid(format!("Serve's HTTPS ({cert}, {key}): {e}")))?;
    Ok(Some(identity))
}

/// Every path goes to [`handle`].
pub(crate) fn router(proxy: Arc<ServeProxy>, options: HttpOptions) -> Router {
    Router::new().fallback(handle).with_state(Proxied { proxy, options: Arc::new(options) })
}

/// A listener with `SO_REUSEPORT`, as Ray's proxies bind: several nodes on one host (each a
/// node agent) share the port, and the kernel spreads connections over them.
async fn listen(host: &str, port: u16) -> std::io::Result<TcpListener> {
    let mut last = None;
    for address in tokio::net::lookup_host((host, port)).await? {
        let socket =
            if address.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
        socket.set_reuseaddr(true)?;
        socket.set_reuseport(true)?;
        match socket.bind(address).and_then(|()| socket.listen(1024)) {
            Ok(listener) => return Ok(listener),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "the host resolves to no address")))
}

#[derive(Clone)]
struct Proxied {
    proxy: Arc<ServeProxy>,
    options: Arc<HttpOptions>,
}

/// The connection's peer, set by the accept loop.
#[derive(Clone, Copy, Debug)]
pub struct PeerAddr(pub SocketAddr);

fn text(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response()
}

fn with_request_id(mut response: Response, request_id: &str) -> Response {
    if let Ok(value) = HeaderValue::from_str(request_id) {
        response.headers_mut().insert(HeaderName::from_static("x-request-id"), value);
    }
    response
}

/// A UUID4 string, as Ray makes request ids.
fn new_request_id() -> String {
    let mut b: [u8; 16] = rand::random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

fn request_timeout(headers: &HeaderMap, options: &HttpOptions) -> Option<Duration> {
    let from_header = headers
        .get("x-request-timeout-seconds")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok());
    let seconds = match from_header {
        Some(s) if s <= 0.0 => return None,
        Some(s) => s,
        None => options.request_timeout_s?,
    };
    Duration::try_from_secs_f64(seconds).ok()
}

async fn handle(State(state): State<Proxied>, request: Request) -> Response {
    let request_id = match request.headers().get("x-request-id").and_then(|v| v.to_str().ok()) {
        Some(id) if !id.is_empty() => id.to_string(),
        _ => new_request_id(),
    };
    let started = Instant::now();
    // Any token is a method to hyper: the label keeps to the standard ones, so clients cannot grow the series.
    let method = match request.method().as_str() {
        m @ ("GET" | "HEAD" | "POST" | "PUT" | "DELETE" | "CONNECT" | "OPTIONS" | "TRACE" | "PATCH") => m,
        _ => "OTHER",
    }
    .to_string();
    let _ongoing = state.proxy.metrics.start();
    let mut labels = (String::new(), String::new());
    let response = proxy_request(&state, request, &request_id, &mut labels).await;
    let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    state.proxy.metrics.record(&labels.0, &method, &labels.1, response.status().as_u16(), latency_ms);
    with_request_id(response, &request_id)
}

/// Answers `request`; `labels` gets its route and application for the metrics.
async fn proxy_request(state: &Proxied, request: Request, request_id: &str, labels: &mut (String, String)) -> Response {
    let proxy = &state.proxy;
    let path = request.uri().path().to_string();
    if path == "/-/routes" || path == "/-/healthz" {
        labels.0 = path.clone();
        if !proxy.populated.load(Ordering::Acquire) {
            return text(StatusCode::SERVICE_UNAVAILABLE, "Route table is not populated yet.".into());
        }
        if path == "/-/healthz" {
            return text(StatusCode::OK, "success".into());
        }
        let routes: serde_json::Map<String, serde_json::Value> =
            proxy.table().http_routes().map(|r| (r.route_prefix.clone(), r.app.clone().into())).collect();
        return axum::Json(routes).into_response();
    }
    let root_path = state.options.root_path.as_str();
    let route_path = path.strip_prefix(root_path).filter(|_| !root_path.is_empty()).unwrap_or(&path);
    let table = proxy.table();
    let Some(route) = table.match_path(route_path) else {
        return text(
            StatusCode::NOT_FOUND,
            format!("Path '{path}' not found. Ping http://.../-/routes for available routes."),
        );
    };
    *labels = (route.route_prefix.clone(), route.app.clone());
    let timeout = request_timeout(request.headers(), &state.options);
    let peer = request.extensions().get::<PeerAddr>().map(|p| p.0);
    let (mut parts, body) = request.into_parts();
    let upgrade = if is_websocket(&parts.headers) {
        match axum::extract::ws::WebSocketUpgrade::from_request_parts(&mut parts, state).await {
            Ok(upgrade) => Some(upgrade),
            Err(rejection) => return rejection.into_response(),
        }
    } else {
        None
    };
    let limit = state.options.max_request_body_bytes;
    let too_large = || {
        text(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("The request body is larger than the proxy's limit of {limit} bytes."),
        )
    };
    let declared = parts.headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return too_large();
    }
    let Ok(body) = axum::body::to_bytes(body, usize::try_from(limit).unwrap_or(usize::MAX)).await else {
        return too_large();
    };
    let mut headers: Vec<(String, String)> =
        parts.headers.iter().map(|(k, v)| (k.as_str().to_string(), wire::latin1(v.as_bytes()))).collect();
    if !parts.headers.contains_key("x-request-id") {
        headers.push(("x-request-id".into(), request_id.to_string()));
    }
    let scope_root =
        if route.route_prefix == "/" { root_path.to_string() } else { format!("{root_path}{}", route.route_prefix) };
    // The replica keys the request's stream by an id of the proxy's own: clients choose their
    // `x-request-id`, and two requests with the same one must not share a stream.
    let stream_id = new_request_id();
    let meta = wire::RequestMeta {
        kind: if upgrade.is_some() { "websocket" } else { "http" },
        method: parts.method.as_str(),
        scheme: match (upgrade.is_some(), state.options.https()) {
            (true, true) => "wss",
            (true, false) => "ws",
            (false, true) => "https",
            (false, false) => "http",
        },
        path: &path,
        query_string: parts.uri.query().unwrap_or(""),
        root_path: &scope_root,
        route: &route.route_prefix,
        http_version: match parts.version {
            axum::http::Version::HTTP_10 => "1.0",
            _ => "1.1",
        },
        headers,
        client: peer.map(|p| (p.ip().to_string(), p.port())),
        server: None,
        request_id,
        stream_id: &stream_id,
    };
    let payload = wire::encode_request(&meta, &body);
    if let Some(upgrade) = upgrade {
        return websocket::open(proxy, route, payload, request_id, &stream_id, upgrade).await;
    }
    let started = Instant::now();
    let model = multiplexed_model_id(&parts.headers);
    let dispatch = dispatch(proxy, route, payload, &stream_id, model.as_deref());
    let outcome = match timeout {
        None => dispatch.await,
        Some(limit) => match tokio::time::timeout(limit, dispatch).await {
            Ok(outcome) => outcome,
            Err(_) => Err(Failure::TimedOut(started.elapsed())),
        },
    };
    match outcome {
        Ok(response) => response,
        Err(Failure::TimedOut(after)) => {
            text(StatusCode::REQUEST_TIMEOUT, format!("Request {request_id} timed out after {}s.", trim_seconds(after)))
        }
        Err(Failure::Backpressure(status, message, retry_after)) => {
            let mut response = text(status, message);
            if let Some(seconds) = retry_after {
                response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
            }
            response
        }
        Err(Failure::Unavailable(message)) => text(StatusCode::SERVICE_UNAVAILABLE, message),
        Err(Failure::Internal(message)) => {
            tracing::warn!("Serve request {request_id} to {} failed: {message}", route.app);
            let mut response = text(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error".into());
            response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
            response
        }
    }
}

fn is_websocket(headers: &HeaderMap) -> bool {
    headers.get(header::UPGRADE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

/// Seconds as Ray prints a timeout (`2.0`, `0.5`).
fn trim_seconds(d: Duration) -> String {
    let s = (d.as_secs_f64() * 10.0).round() / 10.0;
    format!("{s:?}")
}

pub(crate) enum Failure {
    TimedOut(Duration),
    Backpressure(StatusCode, String, Option<u64>),
    Unavailable(String),
    Internal(String),
}

/// Calls the replica's `http_cancel` when dropped before it is disarmed: the client went away,
/// or the request timed out, while the replica still ran it.
pub(crate) struct CancelOnDrop {
    calls: Arc<dyn ReplicaCalls>,
    actor_id: String,
    stream_id: String,
    /// The replica's method that cancels (`http_cancel`, `grpc_cancel`).
    method: &'static str,
    armed: bool,
}

impl CancelOnDrop {
    /// Armed for the request `stream_id` sent to `slot`'s replica, cancelled there with `method`.
    pub(crate) fn for_slot(proxy: &ServeProxy, slot: &Slot, stream_id: &str, method: &'static str) -> Self {
        CancelOnDrop {
            calls: proxy.calls.clone(),
            actor_id: slot.replica.actor_id.clone(),
            stream_id: stream_id.to_string(),
            method,
            armed: true,
        }
    }

    /// The request ended on the replica: nothing to cancel.
    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if self.armed {
            self.calls.notify(&self.actor_id, self.method, self.stream_id.clone().into_bytes());
        }
    }
}

/// The `serve_multiplexed_model_id` header (`-` and `_` alike, as Ray reads it).
fn multiplexed_model_id(headers: &HeaderMap) -> Option<String> {
    headers
        .iter()
        .find(|(name, _)| name.as_str().replace('-', "_") == "serve_multiplexed_model_id")
        .and_then(|(_, value)| value.to_str().ok())
        .filter(|v| !v.is_empty())
        .map(str::to_string)
}

/// Waits for a replica with room, sends the request, and turns the replica's first batch into
/// the response (the rest of a streamed body follows from a task of its own).
async fn dispatch(
    proxy: &Arc<ServeProxy>,
    route: &Route,
    payload: Vec<u8>,
    stream_id: &str,
    model: Option<&str>,
) -> Result<Response, Failure> {
    let slot = take_slot(proxy, route, model).await?;
    let mut cancel = CancelOnDrop::for_slot(proxy, &slot, stream_id, "http_cancel");
    let first = match proxy.calls.call(&slot.replica.actor_id, "handle_http", payload).await {
        Ok(raw) => raw,
        Err(ReplicaCallError::ActorDied(why)) => {
            cancel.armed = false;
            proxy.dead.write().push(slot.replica.replica_id.clone());
            return Err(Failure::Internal(why));
        }
        Err(ReplicaCallError::Failed(why)) => {
            cancel.armed = false;
            return Err(Failure::Internal(why));
        }
    };
    let batch = wire::decode_reply(&first).map_err(|e| Failure::Internal(e.to_string()))?;
    let Some((status, headers)) = batch.start.clone() else {
        return Err(Failure::Internal("the replica's first reply did not start the response".into()));
    };
    let mut builder = Response::builder().status(status);
    for (name, value) in headers {
        let (Ok(name), Ok(value)) = (HeaderName::from_bytes(&name), HeaderValue::from_bytes(&value)) else {
            continue; // a header no client could read: left out
        };
        builder = builder.header(name, value);
    }
    if batch.done {
        cancel.armed = false;
        let body = batch.chunks.concat();
        return builder.body(Body::from(body)).map_err(|e| Failure::Internal(e.to_string()));
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(4);
    tokio::spawn(stream_rest(proxy.calls.clone(), slot, cancel, batch.chunks, tx));
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    builder.body(Body::from_stream(stream)).map_err(|e| Failure::Internal(e.to_string()))
}

/// Forwards a streamed response's chunks as the replica makes them, until the last batch; a
/// client that is gone (the body dropped) cancels the request on the replica.
async fn stream_rest(
    calls: Arc<dyn ReplicaCalls>,
    slot: Slot,
    mut cancel: CancelOnDrop,
    first: Vec<Vec<u8>>,
    tx: tokio::sync::mpsc::Sender<Result<Vec<u8>, std::io::Error>>,
) {
    for chunk in first {
        if tx.send(Ok(chunk)).await.is_err() {
            return; // the client is gone: `cancel` tells the replica
        }
    }
    loop {
        let raw = tokio::select! {
            raw = calls.call(&slot.replica.actor_id, "http_next", cancel.stream_id.clone().into_bytes()) => raw,
            _ = tx.closed() => return,
        };
        let batch =
            match raw.map_err(|e| e.to_string()).and_then(|raw| wire::decode_reply(&raw).map_err(|e| e.to_string())) {
                Ok(batch) => batch,
                Err(why) => {
                    // Mid-body: the connection is closed, as uvicorn does.
                    cancel.armed = false;
                    let _ = tx.send(Err(std::io::Error::other(why))).await;
                    return;
                }
            };
        for chunk in batch.chunks {
            if tx.send(Ok(chunk)).await.is_err() {
                return;
            }
        }
        if batch.done {
            cancel.armed = false;
            return;
        }
    }
}

/// A replica of `route` with room, waiting in the application's queue while every one is busy
/// (or none serves yet).
pub(crate) async fn take_slot(proxy: &Arc<ServeProxy>, route: &Route, model: Option<&str>) -> Result<Slot, Failure> {
    if let Some(why) = &route.unavailable {
        return Err(Failure::Unavailable(why.clone()));
    }
    if let Some(slot) = proxy.loads.try_take(&proxy.live(route), model) {
        return Ok(slot);
    }
    let queued_before = proxy.loads.requests(route);
    let queued = proxy.loads.enqueue(route).map_err(|b| {
        let status = StatusCode::from_u16(route.backpressure_status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
        Failure::Backpressure(
            status,
            format!(
                "Request dropped due to backpressure (num_queued_requests={}, max_queued_requests={}).",
                b.queued, b.max_queued
            ),
            route.retry_after_s.map(|s| s.ceil() as u64),
        )
    })?;
    if route.replicas.is_empty() && queued_before == 0 && route.metrics_interval_s.is_some() {
        // An autoscaled deployment at zero replicas: the controller hears of the request now.
        proxy.report(&proxy.table(), route);
    }
    loop {
        let changed = proxy.loads.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        // The latest table's version of this route: replicas come and go while a request waits.
        let table = proxy.table();
        let Some(current) = table.routes.iter().find(|r| r.app == route.app) else {
            return Err(Failure::Unavailable(format!("Application '{}' is gone.", route.app)));
        };
        if let Some(why) = &current.unavailable {
            return Err(Failure::Unavailable(why.clone()));
        }
        if let Some(slot) = proxy.loads.try_take(&proxy.live(current), model) {
            drop(queued);
            return Ok(slot);
        }
        changed.await;
    }
}

#[cfg(test)]
mod tests;
