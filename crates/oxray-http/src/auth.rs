//! The cluster token on every route but Ray's public ones (health checks,
//! `/api/authentication_mode`, `/api/authenticate`, `/`, static files), taken
//! from `Authorization: Bearer`, `X-Ray-Authorization` or the
//! `ray-authentication-token` cookie, as Ray 2.60's clients and browsers send
//! it: missing → 401, wrong → 403. Browser-looking requests may only read.

use crate::HttpConfig;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// The cookie `/api/authenticate` sets and browsers send back.
pub(crate) const TOKEN_COOKIE: &str = "ray-authentication-token";

const PUBLIC_PATHS: &[&str] = &[
    "/",
    "/favicon.ico",
    "/api/authentication_mode",
    "/api/authenticate",
    "/api/healthz",
    "/api/gcs_healthz",
    "/api/local_raylet_healthz",
    "/-/healthz",
];

/// Equal bytes, in a time that does not depend on where they differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn is_public(path: &str) -> bool {
    PUBLIC_PATHS.contains(&path) || path.starts_with("/static/")
}

/// A request a browser made (its user agent, or headers only browsers send).
pub(crate) fn is_browser(headers: &HeaderMap) -> bool {
    let mozilla =
        headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok()).is_some_and(|ua| ua.starts_with("Mozilla"));
    mozilla
        || headers.contains_key(header::ORIGIN)
        || headers.contains_key(header::REFERER)
        || headers.keys().any(|k| k.as_str().starts_with("sec-fetch-"))
}

fn bearer(value: &str) -> Option<&str> {
    value.strip_prefix("Bearer ").map(str::trim)
}

/// The token a request carries, if any.
pub(crate) fn token_of(headers: &HeaderMap) -> Option<String> {
    for name in [header::AUTHORIZATION.as_str(), "x-ray-authorization"] {
        if let Some(token) = headers.get(name).and_then(|v| v.to_str().ok()).and_then(bearer) {
            return Some(token.to_string());
        }
    }
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|cookies| cookies.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == TOKEN_COOKIE)
        .map(|(_, value)| value.to_string())
}

/// Why a request's token is refused.
#[derive(Debug, PartialEq)]
pub(crate) enum Refusal {
    Missing,
    Invalid,
}

impl IntoResponse for Refusal {
    /// As Ray words it (its clients turn 401/403 into `AuthenticationError`).
    fn into_response(self) -> Response {
        match self {
            Refusal::Missing => (StatusCode::UNAUTHORIZED, "Unauthorized: Missing authentication token"),
            Refusal::Invalid => (StatusCode::FORBIDDEN, "Forbidden: Invalid authentication token"),
        }
        .into_response()
    }
}

pub(crate) fn check(config: &HttpConfig, headers: &HeaderMap) -> Result<(), Refusal> {
    match token_of(headers) {
        None => Err(Refusal::Missing),
        Some(token) if constant_time_eq(token.as_bytes(), config.token.as_bytes()) => Ok(()),
        Some(_) => Err(Refusal::Invalid),
    }
}

pub(crate) async fn require_token(State(config): State<Arc<HttpConfig>>, request: Request, next: Next) -> Response {
    let reads = matches!(*request.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if !reads && is_browser(request.headers()) {
        return (StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed: browser requests may only read (GET)")
            .into_response();
    }
    if !is_public(request.uri().path())
        && let Err(refused) = check(&config, request.headers())
    {
        return refused.into_response();
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(*k, HeaderValue::from_static(v));
        }
        map
    }

    #[test]
    fn the_token_comes_from_the_header_then_the_cookie() {
        assert_eq!(token_of(&headers(&[("authorization", "Bearer abc")])).as_deref(), Some("abc"));
        assert_eq!(token_of(&headers(&[("x-ray-authorization", "Bearer xyz")])).as_deref(), Some("xyz"));
        let cookie = headers(&[("cookie", "a=1; ray-authentication-token=tok; b=2")]);
        assert_eq!(token_of(&cookie).as_deref(), Some("tok"));
        assert_eq!(token_of(&headers(&[("authorization", "Basic abc")])), None);
    }

    #[test]
    fn browsers_are_recognised() {
        assert!(is_browser(&headers(&[("user-agent", "Mozilla/5.0")])));
        assert!(is_browser(&headers(&[("sec-fetch-mode", "cors")])));
        assert!(!is_browser(&headers(&[("user-agent", "python-requests/2.32")])));
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }
}
