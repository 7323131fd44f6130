//! The cluster token on every route but Ray's public ones (health checks,
//! `/api/authentication_mode`, `/api/authenticate`, `/`, static files), taken
//! from `Authorization: Bearer`, `X-Ray-Authorization` or the
//! `ray-authentication-token` cookie, as Ray 2.60's clients and browsers send
//! it: missing → 401, wrong → 403. Browser-looking requests may only read,
//! unless they carry the dashboard's CSRF header (`X-Oxray-Csrf: 1`, which no
//! cross-site form can send) from this server's own origin; a browser asking
//! for a page it may not see gets the login form with the same status.

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

/// The header the dashboard's own pages send with every change they ask for.
pub(crate) const CSRF_HEADER: &str = "x-oxray-csrf";

/// The browser session cookie `/api/authenticate` and a `/?token=` link set: 30 days, script-proof.
pub(crate) fn session_cookie(token: &str) -> String {
    format!("{TOKEN_COOKIE}={token}; Max-Age=2592000; Path=/; HttpOnly; SameSite=Strict")
}

/// Whether a presented token is the cluster's, in a time that does not depend on
/// where they differ (`subtle`); every port's token check comes through here.
pub fn token_matches(given: impl AsRef<[u8]>, expected: &str) -> bool {
    use subtle::ConstantTimeEq;
    given.as_ref().ct_eq(expected.as_bytes()).into()
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
    check_token(&config.token, headers)
}

/// Whether `headers` carry `expected` (the head's server and each node's metrics server).
pub(crate) fn check_token(expected: &str, headers: &HeaderMap) -> Result<(), Refusal> {
    match token_of(headers) {
        None => Err(Refusal::Missing),
        Some(token) if token_matches(&token, expected) => Ok(()),
        Some(_) => Err(Refusal::Invalid),
    }
}

/// Whether an `Origin` header names another site than the one asked (`Host`).
fn cross_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else { return false };
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
    origin.split_once("://").map(|(_, rest)| rest) != Some(host)
}

/// A browser loading a page (not a script fetching data).
fn wants_html(headers: &HeaderMap) -> bool {
    headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|a| a.contains("text/html"))
}

pub(crate) async fn require_token(State(config): State<Arc<HttpConfig>>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let reads = matches!(*request.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if !reads && is_browser(headers) {
        let from_dashboard = headers.get(CSRF_HEADER).is_some_and(|v| v == "1") && !cross_origin(headers);
        if !from_dashboard {
            return (
                StatusCode::METHOD_NOT_ALLOWED,
                "Method Not Allowed: browser requests may only read (GET), except the dashboard's own (X-Oxray-Csrf)",
            )
                .into_response();
        }
    }
    if !is_public(request.uri().path())
        && let Err(refused) = check(&config, headers)
    {
        if wants_html(headers) {
            let status = match refused {
                Refusal::Missing => StatusCode::UNAUTHORIZED,
                Refusal::Invalid => StatusCode::FORBIDDEN,
            };
            return crate::dashboard::login_instead(status);
        }
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
    fn an_origin_must_be_the_host_asked() {
        assert!(!cross_origin(&headers(&[("host", "127.0.0.1:8265")])));
        assert!(!cross_origin(&headers(&[("host", "127.0.0.1:8265"), ("origin", "http://127.0.0.1:8265")])));
        assert!(cross_origin(&headers(&[("host", "127.0.0.1:8265"), ("origin", "http://evil.example")])));
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(token_matches("abc", "abc"));
        assert!(!token_matches("abc", "abd"));
        assert!(!token_matches("abc", "abcd"));
    }
}
