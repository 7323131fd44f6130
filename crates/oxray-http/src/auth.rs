//! The cluster token on every route but Ray's public ones (health checks,
//! `/api/authentication_mode`, `/api/authenticate`, `/api/logout`, `/`, static files),
//! taken from `Authorization: Bearer` or `X-Ray-Authorization`, as Ray 2.60's clients
//! send it, or a browser's session cookie (`sessions.rs`; never the token itself):
//! missing → 401, wrong → 403. Browser-looking requests may only read, unless they
//! carry the dashboard's CSRF header (`X-Oxray-Csrf: 1`, which no cross-site form can
//! send) from this server's own origin; a WebSocket is opened only from this server's
//! own origin (a page on another port of this host is same-site, and its browser sends
//! the cookie along); a browser asking for a page it may not see gets the login form
//! with the same status.

use crate::sessions::Sessions;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

const PUBLIC_PATHS: &[&str] = &[
    "/",
    "/favicon.ico",
    "/api/authentication_mode",
    "/api/authenticate",
    "/api/logout",
    "/api/healthz",
    "/api/gcs_healthz",
    "/api/local_raylet_healthz",
    "/-/healthz",
];

/// The header the dashboard's own pages send with every change they ask for.
pub(crate) const CSRF_HEADER: &str = "x-oxray-csrf";

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

/// The token a request carries in its headers, if any.
pub(crate) fn token_of(headers: &HeaderMap) -> Option<String> {
    [header::AUTHORIZATION.as_str(), "x-ray-authorization"]
        .into_iter()
        .find_map(|name| headers.get(name).and_then(|v| v.to_str().ok()).and_then(bearer))
        .map(str::to_string)
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

/// Whether `headers` carry `expected` (each node's metrics server, which has no sessions).
pub(crate) fn check_token(expected: &str, headers: &HeaderMap) -> Result<(), Refusal> {
    match token_of(headers) {
        None => Err(Refusal::Missing),
        Some(token) if token_matches(&token, expected) => Ok(()),
        Some(_) => Err(Refusal::Invalid),
    }
}

/// Who may use the head's HTTP server: holders of the cluster token, and browsers with a
/// session started with it.
pub(crate) struct Guard {
    token: String,
    pub(crate) sessions: Sessions,
}

impl Guard {
    pub(crate) fn new(token: String, sessions: Sessions) -> Self {
        Guard { token, sessions }
    }

    pub(crate) fn token_matches(&self, given: &str) -> bool {
        token_matches(given, &self.token)
    }

    /// The session id in a request's cookies, if any (live or not).
    pub(crate) fn session_id<'a>(&self, headers: &'a HeaderMap) -> Option<&'a str> {
        self.sessions.id_in(headers.get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok()))
    }

    /// Whether a request's headers carry the cluster token (a session does not count).
    pub(crate) fn check_token(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        check_token(&self.token, headers)
    }

    /// Whether a request may pass: a token in its headers decides; else a live session.
    pub(crate) fn check(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        if token_of(headers).is_some() {
            return self.check_token(headers);
        }
        match self.session_id(headers) {
            Some(id) if self.sessions.touch(id) => Ok(()),
            Some(_) => Err(Refusal::Invalid),
            None => Err(Refusal::Missing),
        }
    }
}

/// Whether an `Origin` header names another site than the one asked (`Host`).
fn cross_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else { return false };
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
    origin.split_once("://").map(|(_, rest)| rest) != Some(host)
}

/// A WebSocket handshake.
fn is_websocket(headers: &HeaderMap) -> bool {
    headers.get(header::UPGRADE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

/// A browser loading a page (not a script fetching data).
fn wants_html(headers: &HeaderMap) -> bool {
    headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|a| a.contains("text/html"))
}

pub(crate) async fn require_token(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
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
    if is_websocket(headers) && cross_origin(headers) {
        return (StatusCode::FORBIDDEN, "Forbidden: a WebSocket may only be opened from this server's own pages")
            .into_response();
    }
    if !is_public(request.uri().path())
        && let Err(refused) = guard.check(headers)
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
    fn the_token_comes_from_a_header_never_a_cookie() {
        assert_eq!(token_of(&headers(&[("authorization", "Bearer abc")])).as_deref(), Some("abc"));
        assert_eq!(token_of(&headers(&[("x-ray-authorization", "Bearer xyz")])).as_deref(), Some("xyz"));
        assert_eq!(token_of(&headers(&[("cookie", "ray-authentication-token=tok")])), None);
        assert_eq!(token_of(&headers(&[("authorization", "Basic abc")])), None);
    }

    #[test]
    fn a_browser_passes_with_a_live_session_only() {
        let guard = Guard::new("tok".into(), Sessions::new(8265, false));
        let id = guard.sessions.start();
        let mut with_session = HeaderMap::new();
        with_session.append("cookie", HeaderValue::from_str(&format!("oxray-session-8265={id}")).unwrap());
        assert_eq!(guard.check(&with_session), Ok(()));
        assert_eq!(guard.check(&headers(&[("cookie", "oxray-session-8265=tok")])), Err(Refusal::Invalid));
        assert_eq!(guard.check(&headers(&[("cookie", "ray-authentication-token=tok")])), Err(Refusal::Missing));
        assert_eq!(guard.check(&headers(&[("authorization", "Bearer tok")])), Ok(()));
        guard.sessions.end(&id);
        assert_eq!(guard.check(&with_session), Err(Refusal::Invalid));
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
