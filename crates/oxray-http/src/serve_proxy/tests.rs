//! The proxy against replicas played by the test: what reaches them, and what clients get back.

use super::wire::{ReplyBatch, encode_reply};
use super::*;
use http_body_util::BodyExt;
use oxray_serve::routes::ReplicaTarget;
use tokio::sync::mpsc;
use tower::ServiceExt;

/// A replica call the test answers: (actor, method, payload, where the answer goes).
type Pending = (String, &'static str, Vec<u8>, oneshot::Sender<Result<Vec<u8>, ReplicaCallError>>);

struct Scripted {
    calls: mpsc::UnboundedSender<Pending>,
    notified: mpsc::UnboundedSender<(String, &'static str, Vec<u8>)>,
}

impl ReplicaCalls for Scripted {
    fn call(
        &self,
        actor_id: &str,
        method: &'static str,
        payload: Vec<u8>,
    ) -> BoxFuture<'static, Result<Vec<u8>, ReplicaCallError>> {
        let (tx, rx) = oneshot::channel();
        let _ = self.calls.send((actor_id.to_string(), method, payload, tx));
        Box::pin(async move { rx.await.unwrap_or(Err(ReplicaCallError::Failed("the test dropped the call".into()))) })
    }
    fn notify(&self, actor_id: &str, method: &'static str, payload: Vec<u8>) {
        let _ = self.notified.send((actor_id.to_string(), method, payload));
    }
}

struct Harness {
    proxy: Arc<ServeProxy>,
    app: Router,
    calls: mpsc::UnboundedReceiver<Pending>,
    notified: mpsc::UnboundedReceiver<(String, &'static str, Vec<u8>)>,
}

fn harness(options: HttpOptions) -> Harness {
    let (calls_tx, calls) = mpsc::unbounded_channel();
    let (notified_tx, notified) = mpsc::unbounded_channel();
    let proxy = ServeProxy::new(Arc::new(Scripted { calls: calls_tx, notified: notified_tx }));
    Harness { app: router(proxy.clone(), options), proxy, calls, notified }
}

fn route(prefix: &str, app: &str, replicas: &[&str], max_ongoing: u32, max_queued: i64) -> Route {
    Route {
        route_prefix: prefix.into(),
        http: true,
        app: app.into(),
        deployment: "Ingress".into(),
        max_ongoing_requests: max_ongoing,
        max_queued_requests: max_queued,
        backpressure_status: 503,
        retry_after_s: None,
        replicas: replicas
            .iter()
            .map(|a| ReplicaTarget { replica_id: format!("r-{a}"), actor_id: a.to_string(), model_ids: Vec::new() })
            .collect(),
        unavailable: None,
        metrics_interval_s: None,
    }
}

fn table(routes: Vec<Route>) -> RouteTable {
    RouteTable { routes, ..RouteTable::default() }
}

fn get(path: &str) -> Request {
    Request::builder().uri(path).body(Body::empty()).unwrap()
}

async fn body_text(response: Response) -> String {
    String::from_utf8(response.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
}

fn reply(status: u16, body: &str) -> Vec<u8> {
    encode_reply(&ReplyBatch {
        done: true,
        start: Some((status, vec![(b"content-type".to_vec(), b"text/plain".to_vec())])),
        chunks: vec![body.as_bytes().to_vec()],
    })
}

/// The scope JSON of an encoded request.
fn meta_of(payload: &[u8]) -> (serde_json::Value, Vec<u8>) {
    let n = u32::from_le_bytes(payload[..4].try_into().unwrap()) as usize;
    (serde_json::from_slice(&payload[4..4 + n]).unwrap(), payload[4 + n..].to_vec())
}

#[tokio::test]
async fn special_endpoints_wait_for_the_first_table_then_list_routes() {
    let h = harness(HttpOptions::default());
    let response = h.app.clone().oneshot(get("/-/healthz")).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(response.headers().contains_key("x-request-id"));
    assert_eq!(body_text(response).await, "Route table is not populated yet.");
    h.proxy.set_table(table(vec![route("/a", "appa", &["aa"], 5, -1), route("/", "root", &["bb"], 5, -1)]));
    let response = h.app.clone().oneshot(get("/-/healthz")).await.unwrap();
    assert_eq!((response.status(), body_text(response).await.as_str()), (StatusCode::OK, "success"));
    let routes: serde_json::Value =
        serde_json::from_str(&body_text(h.app.clone().oneshot(get("/-/routes")).await.unwrap()).await).unwrap();
    assert_eq!(routes, serde_json::json!({"/a": "appa", "/": "root"}));
}

#[tokio::test]
async fn an_unmatched_path_is_rays_404() {
    let h = harness(HttpOptions::default());
    h.proxy.set_table(table(vec![route("/plain", "plain", &["aa"], 5, -1)]));
    let response = h.app.clone().oneshot(get("/plainx")).await.unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert_eq!(body_text(response).await, "Path '/plainx' not found. Ping http://.../-/routes for available routes.");
}

#[tokio::test]
async fn a_request_reaches_the_routes_replica_with_its_scope_and_body_and_the_reply_comes_back() {
    let mut h = harness(HttpOptions::default());
    h.proxy.set_table(table(vec![route("/api", "api", &["aa"], 5, -1), route("/", "root", &["bb"], 5, -1)]));
    let request = Request::builder()
        .method("POST")
        .uri("/api/items/7?x=1")
        .header("x-request-id", "my-id-123")
        .body(Body::from("payload"))
        .unwrap();
    let app = h.app.clone();
    let client = tokio::spawn(async move { app.oneshot(request).await.unwrap() });
    let (actor, method, payload, answer) = h.calls.recv().await.unwrap();
    assert_eq!((actor.as_str(), method), ("aa", "handle_http"));
    let (meta, body) = meta_of(&payload);
    assert_eq!(body, b"payload");
    assert_eq!(meta["method"], "POST");
    assert_eq!(meta["path"], "/api/items/7");
    assert_eq!(meta["root_path"], "/api");
    assert_eq!(meta["query_string"], "x=1");
    assert_eq!(meta["request_id"], "my-id-123");
    answer.send(Ok(reply(418, "teapot"))).unwrap();
    let response = client.await.unwrap();
    assert_eq!(response.status().as_u16(), 418);
    assert_eq!(response.headers()["x-request-id"], "my-id-123");
    assert_eq!(body_text(response).await, "teapot");
}

#[tokio::test]
async fn a_body_over_the_limit_is_413_before_any_replica_sees_it() {
    let mut h = harness(HttpOptions { max_request_body_bytes: 4, ..HttpOptions::default() });
    h.proxy.set_table(table(vec![route("/", "root", &["aa"], 5, -1)]));
    let request = Request::builder().method("POST").uri("/").body(Body::from("12345")).unwrap();
    let response = h.app.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert!(h.calls.try_recv().is_err());
}

#[tokio::test]
async fn past_max_ongoing_a_request_waits_and_past_max_queued_it_gets_rays_backpressure_503() {
    let mut h = harness(HttpOptions::default());
    h.proxy.set_table(table(vec![route("/", "root", &["aa"], 1, 1)]));
    let first = tokio::spawn(h.app.clone().oneshot(get("/1")));
    let (_, _, _, answer_first) = h.calls.recv().await.unwrap();
    let second = tokio::spawn(h.app.clone().oneshot(get("/2")));
    // The second waits in the queue: the third finds it full.
    while h.proxy.loads.queued("root") == 0 {
        tokio::task::yield_now().await;
    }
    let third = h.app.clone().oneshot(get("/3")).await.unwrap();
    assert_eq!(third.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        body_text(third).await,
        "Request dropped due to backpressure (num_queued_requests=1, max_queued_requests=1)."
    );
    answer_first.send(Ok(reply(200, "one"))).unwrap();
    assert_eq!(body_text(first.await.unwrap().unwrap()).await, "one");
    let (_, _, payload, answer_second) = h.calls.recv().await.unwrap();
    assert_eq!(meta_of(&payload).0["path"], "/2");
    answer_second.send(Ok(reply(200, "two"))).unwrap();
    assert_eq!(body_text(second.await.unwrap().unwrap()).await, "two");
}

#[tokio::test]
async fn a_request_past_its_timeout_is_408_and_the_replica_is_told_to_cancel_it() {
    let mut h = harness(HttpOptions::default());
    h.proxy.set_table(table(vec![route("/", "root", &["aa"], 5, -1)]));
    let request =
        Request::builder().uri("/slow").header("x-request-timeout-seconds", "0.2").body(Body::empty()).unwrap();
    let client = tokio::spawn(h.app.clone().oneshot(request));
    let (_, _, payload, _unanswered) = h.calls.recv().await.unwrap();
    let meta = meta_of(&payload).0;
    let request_id = meta["request_id"].as_str().unwrap().to_string();
    let stream_id = meta["stream_id"].as_str().unwrap().to_string();
    assert_ne!(request_id, stream_id, "the replica's stream key is the proxy's own");
    let response = client.await.unwrap().unwrap();
    assert_eq!(response.status(), StatusCode::REQUEST_TIMEOUT);
    assert_eq!(body_text(response).await, format!("Request {request_id} timed out after 0.2s."));
    let (actor, method, cancelled) = h.notified.recv().await.unwrap();
    assert_eq!((actor.as_str(), method, cancelled), ("aa", "http_cancel", stream_id.into_bytes()));
}

#[tokio::test]
async fn a_streamed_response_arrives_batch_by_batch() {
    let mut h = harness(HttpOptions::default());
    h.proxy.set_table(table(vec![route("/", "root", &["aa"], 5, -1)]));
    let client = tokio::spawn(h.app.clone().oneshot(get("/stream")));
    let (_, _, _, answer) = h.calls.recv().await.unwrap();
    let first = ReplyBatch { done: false, start: Some((200, Vec::new())), chunks: vec![b"a".to_vec()] };
    answer.send(Ok(encode_reply(&first))).unwrap();
    let response = client.await.unwrap().unwrap();
    let mut body = response.into_body();
    assert_eq!(body.frame().await.unwrap().unwrap().into_data().unwrap(), "a");
    let (_, method, _, answer) = h.calls.recv().await.unwrap();
    assert_eq!(method, "http_next");
    answer.send(Ok(encode_reply(&ReplyBatch { done: false, start: None, chunks: vec![b"b".to_vec()] }))).unwrap();
    assert_eq!(body.frame().await.unwrap().unwrap().into_data().unwrap(), "b");
    let (_, _, _, answer) = h.calls.recv().await.unwrap();
    answer.send(Ok(encode_reply(&ReplyBatch { done: true, start: None, chunks: Vec::new() }))).unwrap();
    assert!(body.frame().await.is_none(), "the body ends with the last batch");
    assert!(h.notified.try_recv().is_err(), "a finished stream is not cancelled");
}

#[tokio::test]
async fn a_dead_replica_is_a_500_and_is_not_chosen_again_until_the_table_changes() {
    let mut h = harness(HttpOptions::default());
    h.proxy.set_table(table(vec![route("/", "root", &["aa"], 5, -1)]));
    let client = tokio::spawn(h.app.clone().oneshot(get("/")));
    let (_, _, _, answer) = h.calls.recv().await.unwrap();
    answer.send(Err(ReplicaCallError::ActorDied("killed".into()))).unwrap();
    let response = client.await.unwrap().unwrap();
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(body_text(response).await, "Internal Server Error");
    // The next request waits for a replica: the table brings a new one.
    let next = tokio::spawn(h.app.clone().oneshot(get("/")));
    while h.proxy.loads.queued("root") == 0 {
        tokio::task::yield_now().await;
    }
    assert!(h.calls.try_recv().is_err(), "no replica is left to call");
    h.proxy.set_table(table(vec![route("/", "root", &["cc"], 5, -1)]));
    let (actor, _, _, answer) = h.calls.recv().await.unwrap();
    assert_eq!(actor, "cc");
    answer.send(Ok(reply(200, "ok"))).unwrap();
    assert_eq!(next.await.unwrap().unwrap().status(), StatusCode::OK);
}

#[tokio::test]
async fn an_autoscaled_routes_load_is_reported_to_the_controller_at_once_at_zero_replicas_and_then_each_interval() {
    let mut h = harness(HttpOptions::default());
    let mut scaled = route("/", "root", &[], 5, -1);
    scaled.metrics_interval_s = Some(0.05);
    h.proxy.set_table(RouteTable { controller_actor_id: Some("cc".into()), ..table(vec![scaled.clone()]) });
    let waiting = tokio::spawn(h.app.clone().oneshot(get("/")));
    let report = loop {
        let (actor, method, payload) = h.notified.recv().await.unwrap();
        assert_eq!((actor.as_str(), method), ("cc", "record_proxy_load"));
        let report: serde_json::Value = serde_json::from_slice(&payload).unwrap();
        if report["requests"] == 1 {
            break report;
        }
    };
    assert_eq!((report["app"].as_str(), report["deployment"].as_str()), (Some("root"), Some("Ingress")));
    // A replica comes: the request goes to it, and is still counted while it runs.
    scaled.replicas = vec![ReplicaTarget { replica_id: "r-aa".into(), actor_id: "aa".into(), model_ids: Vec::new() }];
    h.proxy.set_table(RouteTable { controller_actor_id: Some("cc".into()), ..table(vec![scaled]) });
    let (_, _, _, answer) = h.calls.recv().await.unwrap();
    let (_, _, payload) = h.notified.recv().await.unwrap();
    assert_eq!(serde_json::from_slice::<serde_json::Value>(&payload).unwrap()["requests"], 1);
    answer.send(Ok(reply(200, "ok"))).unwrap();
    assert_eq!(waiting.await.unwrap().unwrap().status(), StatusCode::OK);
    loop {
        let (_, _, payload) = h.notified.recv().await.unwrap();
        if serde_json::from_slice::<serde_json::Value>(&payload).unwrap()["requests"] == 0 {
            break; // idle reports go on (the autoscaler scales down on them)
        }
    }
}
