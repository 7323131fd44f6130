//! What every page of the dashboard shares: how a page is answered (`html`,
//! never cached, never framed), whether a request asks for the whole page or
//! only its refreshing part ([`Render`]), the navigation bar `base.html` draws,
//! and the small pieces of the pages' views (short ids, the tables' search
//! and their row limit).

use super::Dashboard;
use askama::Template;
use axum::extract::FromRequestParts;
use axum::handler::Handler;
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get};
use axum::{Extension, Router};

/// The navigation bar: (path, label).
pub(super) const NAV: &[(&str, &str)] = &[
    ("/overview", "Overview"),
    ("/jobs", "Jobs"),
    ("/actors", "Actors"),
    ("/tasks", "Tasks"),
    ("/train", "Train"),
    ("/tune", "Tune"),
    ("/serve", "Serve"),
    ("/datasets", "Datasets"),
    ("/charts", "Metrics"),
    ("/logs", "Logs"),
];

/// Rows a table shows at most (the rest are counted, and a filter narrows them).
pub(super) const MAX_ROWS: usize = 1000;

/// What a page's handler renders: the whole page, or only the part of it that
/// htmx refreshes in place (its template's block). A request from htmx
/// (`HX-Request: true`) asks for the fragment, as does every `/ui/...` route
/// ([`page_and_fragment`]); anything else gets the page, as does htmx when it
/// wants a whole page (`HX-Boosted`, `HX-History-Restore-Request`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Render {
    Page,
    Fragment,
}

impl<S: Send + Sync> FromRequestParts<S> for Render {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        if let Some(forced) = parts.extensions.get::<Render>() {
            return Ok(*forced);
        }
        let says = |name: &str| parts.headers.get(name).is_some_and(|v| v == "true");
        let fragment = says("hx-request") && !says("hx-boosted") && !says("hx-history-restore-request");
        Ok(if fragment { Render::Fragment } else { Render::Page })
    }
}

/// Routes `path` to a page's `handler` and `fragment_path` (`/ui/...`) to the
/// same handler, always rendering the fragment there.
pub(super) fn page_and_fragment<H, T>(path: &str, fragment_path: &str, handler: H) -> Router<Dashboard>
where
    H: Handler<T, Dashboard>,
    T: 'static,
{
    let fragment: MethodRouter<Dashboard> = get(handler.clone()).layer(Extension(Render::Fragment));
    Router::new().route(path, get(handler)).route(fragment_path, fragment)
}

/// A rendered page: never cached, never framed (its Content-Security-Policy, scripts only
/// from this server's static files, comes with every page: `headers.rs`).
pub(super) fn html(status: StatusCode, page: &impl Template) -> Response {
    match page.render() {
        Ok(body) => (
            status,
            [
                (header::CONTENT_TYPE, "text/html; charset=utf-8"),
                (header::CACHE_CONTROL, "no-store"),
                (header::X_FRAME_OPTIONS, "DENY"),
            ],
            body,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("the page could not be rendered: {e}")).into_response(),
    }
}

/// A rendered page or fragment, answered with 200.
pub(super) fn ok(page: &impl Template) -> Response {
    html(StatusCode::OK, page)
}

/// The first 12 characters of a hex id, as the tables show it.
pub(super) fn short_id(id: &str) -> String {
    id.chars().take(12).collect()
}

/// A table's search: text anywhere in the row's names and ids, and a state.
#[derive(Clone, Debug, Default, serde::Deserialize)]
pub(super) struct Search {
    #[serde(default)]
    pub(super) q: String,
    #[serde(default)]
    pub(super) state: String,
}

impl Search {
    pub(super) fn matches(&self, state: &str, texts: &[&str]) -> bool {
        let q = self.q.trim().to_lowercase();
        (self.state.is_empty() || self.state == state)
            && (q.is_empty() || texts.iter().any(|t| t.to_lowercase().contains(&q)))
    }
}

/// A JSON value as a table cell shows it: a string bare, null empty, anything else as JSON.
pub(super) fn cell(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Nanoseconds since the epoch (a JSON number) as milliseconds; 0 when absent.
pub(super) fn ns_as_ms(v: &serde_json::Value) -> u64 {
    v.as_u64().map(|ns| ns / 1_000_000).unwrap_or(0)
}

/// How long a record with `start_time_ns` and `end_time_ns` (a Train run, an attempt, an
/// experiment) ran, or has run so far while it has no end: `3m 05s`, `2h 07m`.
pub(super) fn run_duration(v: &serde_json::Value) -> String {
    let (start, end) = (ns_as_ms(&v["start_time_ns"]), ns_as_ms(&v["end_time_ns"]));
    if start == 0 {
        return String::new();
    }
    let end = if end == 0 { oxray_rest::now_ms() } else { end };
    let secs = end.saturating_sub(start) / 1000;
    if secs >= 3600 {
        format!("{}h {:02}m", secs / 3600, secs / 60 % 60)
    } else {
        format!("{}m {:02}s", secs / 60, secs % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Request;

    async fn render_of(request: Request<()>) -> Render {
        let (mut parts, ()) = request.into_parts();
        let Ok(render) = Render::from_request_parts(&mut parts, &()).await;
        render
    }

    #[tokio::test]
    async fn htmx_and_the_ui_routes_get_the_fragment_and_anything_else_the_page() {
        assert_eq!(render_of(Request::get("/jobs").body(()).unwrap()).await, Render::Page);
        let htmx = Request::get("/jobs").header("HX-Request", "true").body(()).unwrap();
        assert_eq!(render_of(htmx).await, Render::Fragment);
        let not_htmx = Request::get("/jobs").header("HX-Request", "false").body(()).unwrap();
        assert_eq!(render_of(not_htmx).await, Render::Page);
        for whole in ["HX-Boosted", "HX-History-Restore-Request"] {
            let htmx_wants_the_page =
                Request::get("/jobs").header("HX-Request", "true").header(whole, "true").body(()).unwrap();
            assert_eq!(render_of(htmx_wants_the_page).await, Render::Page, "{whole}");
        }
        let mut ui = Request::get("/ui/jobs").body(()).unwrap();
        ui.extensions_mut().insert(Render::Fragment);
        assert_eq!(render_of(ui).await, Render::Fragment);
    }

    #[test]
    fn search_matches_text_without_case_and_the_state_exactly() {
        let search = Search { q: "coun".into(), state: "ALIVE".into() };
        assert!(search.matches("ALIVE", &["Counter"]));
        assert!(!search.matches("DEAD", &["Counter"]));
        assert!(!search.matches("ALIVE", &["Other"]));
        assert!(Search::default().matches("DEAD", &[]));
    }
}
