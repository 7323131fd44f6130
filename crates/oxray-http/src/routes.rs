//! The routes: Ray's `/api/version`, health checks and authentication, and
//! the Jobs API's OpenAPI description (`/api/openapi.json`).

use crate::HttpConfig;
use crate::auth;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;
use std::sync::Arc;

/// The Ray release whose REST API this server speaks (clients check it is recent enough).
pub(crate) const RAY_VERSION: &str = "2.60.0";
/// Ray's Jobs API version: 4 has submission ids, entrypoint resources and DELETE.
pub(crate) const API_VERSION: &str = "4";

pub(crate) fn routes(config: Arc<HttpConfig>) -> Router {
    Router::new()
        .route("/api/version", get(version))
        .route("/api/authentication_mode", get(authentication_mode))
        .route("/api/authenticate", post(authenticate))
        .route("/api/healthz", get(healthy))
        .route("/-/healthz", get(healthy))
        .route("/api/openapi.json", get(openapi))
        .with_state(config)
}

async fn version(State(config): State<Arc<HttpConfig>>) -> Response {
    axum::Json(json!({
        "version": API_VERSION,
        "ray_version": RAY_VERSION,
        "ray_commit": concat!("oxray-", env!("CARGO_PKG_VERSION")),
        "session_name": config.session_name,
    }))
    .into_response()
}

async fn authentication_mode() -> Response {
    axum::Json(json!({"authentication_mode": "token"})).into_response()
}

/// Checks the bearer token and, when right, sets it as a 30-day cookie for the browser.
async fn authenticate(State(config): State<Arc<HttpConfig>>, headers: HeaderMap) -> Response {
    if let Err(refused) = auth::check(&config, &headers) {
        return refused.into_response();
    }
    let cookie = auth::session_cookie(&config.token);
    ([(header::SET_COOKIE, cookie)], axum::Json(json!({"authenticated": true}))).into_response()
}

/// The Jobs API's OpenAPI 3 description.
async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], include_str!("openapi.json")).into_response()
}

async fn healthy() -> &'static str {
    "success"
}

pub(crate) async fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "Not Found").into_response()
}
