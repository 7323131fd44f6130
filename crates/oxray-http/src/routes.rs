//! The routes: Ray's `/api/version` (also at `/api/ray/version`, where Serve's CLI asks), health checks and authentication (a login that
//! starts a browser session, and a logout), and the Jobs API's OpenAPI description
//! (`/api/openapi.json`).

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

pub(crate) fn routes(config: Arc<HttpConfig>, guard: Arc<auth::Guard>) -> Router {
    let sessions = Router::new()
        .route("/api/authenticate", post(authenticate))
        .route("/api/logout", post(logout))
        .with_state(guard);
    Router::new()
        .route("/api/version", get(version))
        // Where Ray's Serve CLI checks the version (`ServeSubmissionClient`).
        .route("/api/ray/version", get(version))
        .route("/api/authentication_mode", get(authentication_mode))
        .route("/api/healthz", get(healthy))
        .route("/-/healthz", get(healthy))
        .route("/api/openapi.json", get(openapi))
        .with_state(config)
        .merge(sessions)
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

/// Checks the bearer token (a session cookie does not log in again) and, when right,
/// starts a browser session: its cookie carries the session's id, never the token.
async fn authenticate(State(guard): State<Arc<auth::Guard>>, headers: HeaderMap) -> Response {
    if let Err(refused) = guard.check_token(&headers) {
        return refused.into_response();
    }
    let cookie = guard.sessions.cookie(&guard.sessions.start());
    ([(header::SET_COOKIE, cookie)], axum::Json(json!({"authenticated": true}))).into_response()
}

/// Ends the browser's session, if it has one, and removes its cookie.
async fn logout(State(guard): State<Arc<auth::Guard>>, headers: HeaderMap) -> Response {
    if let Some(id) = guard.session_id(&headers) {
        guard.sessions.end(id);
    }
    let cookie = guard.sessions.removal_cookie();
    ([(header::SET_COOKIE, cookie)], axum::Json(json!({"logged_out": true}))).into_response()
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
