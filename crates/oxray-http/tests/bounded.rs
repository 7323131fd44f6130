//! Answers stay bounded however big the cluster: with 10,000 actors the State
//! API returns Ray's default 100 rows (10,000 at most, by `limit`), and the
//! dashboard's actors table 1,000, saying how many matched.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use oxray_http::{
    ActorRow, BoxFuture, ClusterState, HttpConfig, LogChunk, LogFileRow, LogSearch, NodeRow, NodeSeries,
    PlacementGroupRow, Profile, TaskListing, router,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use tower::ServiceExt;

const TOKEN: &str = "0123456789abcdef";

/// A cluster of `actors` live actors and nothing else.
#[derive(Debug)]
struct ManyActors(usize);

impl ClusterState for ManyActors {
    fn nodes(&self) -> Vec<NodeRow> {
        Vec::new()
    }
    fn is_group_resource(&self, _name: &str) -> bool {
        false
    }
    fn serve_details(&self) -> Option<serde_json::Value> {
        None
    }
    fn load_metrics_report(&self) -> oxray_rest::LoadMetricsReport {
        oxray_rest::LoadMetricsReport::default()
    }
    fn actors(&self) -> Vec<ActorRow> {
        (0..self.0)
            .map(|i| ActorRow {
                actor_id: format!("{i:032x}"),
                class_name: "Shard".into(),
                state: "ALIVE",
                job_id: "01000000".into(),
                name: format!("shard-{i}"),
                node_id: Some("ab".repeat(16)),
                pid: Some(1000 + i as u32),
                ray_namespace: "ns".into(),
                required_resources: BTreeMap::new(),
                death_cause: None,
                is_detached: false,
                placement_group_id: None,
                repr_name: String::new(),
                num_restarts: 0,
                num_restarts_due_to_lineage_reconstruction: 0,
                num_restarts_due_to_node_preemption: 0,
            })
            .collect()
    }
    fn placement_groups(&self) -> Vec<PlacementGroupRow> {
        Vec::new()
    }
    fn tasks(&self, _limit: usize) -> BoxFuture<'_, TaskListing> {
        Box::pin(async { TaskListing::default() })
    }
    fn node_series(&self, _since_ms: u64) -> Vec<NodeSeries> {
        Vec::new()
    }
    fn train_runs(&self) -> Vec<serde_json::Value> {
        Vec::new()
    }
    fn train_run(&self, _id: &str) -> Option<(serde_json::Value, Vec<serde_json::Value>)> {
        None
    }
    fn experiments(&self) -> Vec<serde_json::Value> {
        Vec::new()
    }
    fn experiment(&self, _id: &str) -> Option<(serde_json::Value, Vec<serde_json::Value>)> {
        None
    }
    fn datasets(&self) -> Vec<serde_json::Value> {
        Vec::new()
    }
    fn list_logs<'a>(
        &'a self,
        _node_id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<LogFileRow>, oxray_http::NodeQueryError>> {
        Box::pin(async { Ok(Vec::new()) })
    }
    fn read_log<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
        _: i64,
        _: u64,
    ) -> BoxFuture<'a, Result<LogChunk, oxray_http::NodeQueryError>> {
        Box::pin(async { Err(oxray_http::NodeQueryError::Refused("no logs".into())) })
    }
    fn search_log<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
        _: &'a str,
        _: u32,
    ) -> BoxFuture<'a, Result<LogSearch, oxray_http::NodeQueryError>> {
        Box::pin(async { Err(oxray_http::NodeQueryError::Refused("no logs".into())) })
    }
    fn profile<'a>(
        &'a self,
        _: &'a str,
        _: u32,
        _: Profile,
    ) -> BoxFuture<'a, Result<Vec<u8>, oxray_http::NodeQueryError>> {
        Box::pin(async { Err(oxray_http::NodeQueryError::Refused("no workers".into())) })
    }
}

async fn get(path: &str) -> (StatusCode, Vec<u8>) {
    let config = HttpConfig {
        token: TOKEN.into(),
        session_name: "session_test".into(),
        jobs: None,
        cluster: Some(Arc::new(ManyActors(10_000))),
        metrics_window_ms: 60_000,
        limits: oxray_http::ConnectionLimits::default(),
        https: None,
    };
    let app = router(config, 8265).unwrap();
    let request = Request::get(path).header("authorization", format!("Bearer {TOKEN}")).body(Body::empty()).unwrap();
    let reply = app.oneshot(request).await.unwrap();
    let status = reply.status();
    (status, reply.into_body().collect().await.unwrap().to_bytes().to_vec())
}

#[tokio::test]
async fn the_state_api_returns_rays_default_limit_and_at_most_its_maximum() {
    let (status, body) = get("/api/v0/actors").await;
    assert_eq!(status, StatusCode::OK);
    let reply: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let result = &reply["data"]["result"];
    assert_eq!(result["result"].as_array().unwrap().len(), 100);
    assert_eq!((result["total"].as_u64(), result["num_filtered"].as_u64()), (Some(10_000), Some(10_000)));
    let (_, body) = get("/api/v0/actors?limit=10000").await;
    let reply: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(reply["data"]["result"]["result"].as_array().unwrap().len(), 10_000);
    let (status, _) = get("/api/v0/actors?limit=10001").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn the_actors_table_shows_at_most_a_thousand_rows_and_says_how_many_matched() {
    let (status, body) = get("/ui/actors").await;
    assert_eq!(status, StatusCode::OK);
    let html = String::from_utf8(body).unwrap();
    assert_eq!(html.matches("<tr>").count() - 1, 1000, "a header row and 1,000 actors");
    assert!(html.contains("1000 of 10000 matching actors"), "{}", &html[..300]);
    let (_, body) = get("/ui/actors?q=shard-9999").await;
    let html = String::from_utf8(body).unwrap();
    assert!(html.contains("1 of 1 matching actors (10000 known)"));
}

#[tokio::test]
async fn every_route_but_the_public_ones_needs_the_token() {
    let config = HttpConfig {
        token: TOKEN.into(),
        session_name: "session_test".into(),
        jobs: None,
        cluster: Some(Arc::new(ManyActors(1))),
        metrics_window_ms: 60_000,
        limits: oxray_http::ConnectionLimits::default(),
        https: None,
    };
    let app = router(config, 8265).unwrap();
    let paths = [
        "/overview",
        "/jobs",
        "/jobs/x",
        "/actors",
        "/tasks",
        "/train",
        "/train/x",
        "/datasets",
        "/charts",
        "/logs",
        "/logs/view?node_id=ab&name=logs/x",
        "/logs/worker?node_id=ab&pid=1",
        "/profile?node_id=ab&pid=1",
        "/ui/overview",
        "/ui/jobs",
        "/ui/actors",
        "/ui/tasks",
        "/ui/train",
        "/ui/datasets",
        "/ui/logs/tail",
        "/ui/profile",
        "/metrics",
        "/api/prometheus/sd",
        "/api/oxray/metrics",
        "/api/oxray/profile",
        "/api/oxray/train/runs/x",
        "/api/train/v2/runs/v1",
        "/api/data/datasets/01000000",
        "/api/v0/nodes",
        "/api/v0/actors",
        "/api/v0/tasks",
        "/api/v0/jobs",
        "/api/v0/placement_groups",
        "/api/v0/tasks/summarize",
        "/api/v0/logs",
        "/api/v0/logs/file",
        "/api/version",
    ];
    for path in paths {
        for (token, expected) in [(None, StatusCode::UNAUTHORIZED), (Some("wrong"), StatusCode::FORBIDDEN)] {
            let mut request = Request::get(path);
            if let Some(token) = token {
                request = request.header("authorization", format!("Bearer {token}"));
            }
            let reply = app.clone().oneshot(request.body(Body::empty()).unwrap()).await.unwrap();
            assert_eq!(reply.status(), expected, "{path} with token {token:?}");
        }
    }
    // Public: the login page, static files, health.
    for path in ["/", "/static/app.css", "/favicon.ico", "/api/healthz"] {
        let reply = app.clone().oneshot(Request::get(path).body(Body::empty()).unwrap()).await.unwrap();
        assert_eq!(reply.status(), StatusCode::OK, "{path}");
    }
}
