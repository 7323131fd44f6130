//! The Metrics page: each node's samples over the window the head keeps,
//! drawn by uPlot in the browser (`assets/charts.js`, which polls
//! `/api/oxray/metrics`); the page itself has nothing to refresh.

use super::Dashboard;
use super::render::ok;
use askama::Template;
use axum::Router;
use axum::extract::State;
use axum::response::Response;
use axum::routing::get;

pub(super) fn routes() -> Router<Dashboard> {
    Router::new().route("/charts", get(page))
}

#[derive(Template)]
#[template(path = "charts.html")]
struct ChartsPage {
    title: &'static str,
    here: &'static str,
    window_ms: u64,
    window_minutes: u64,
}

async fn page(State(dash): State<Dashboard>) -> Response {
    let window_ms = dash.config.metrics_window_ms;
    ok(&ChartsPage { title: "Metrics", here: "/charts", window_ms, window_minutes: window_ms / 60_000 })
}
