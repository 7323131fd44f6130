//! Live profiling of a worker from the dashboard: its Python stacks now, or a
//! CPU flame graph over N seconds, taken by py-spy on the worker's node and
//! shown in the page (`/profile`), or fetched whole (`/api/oxray/profile`).

use super::Dashboard;
use super::render::{ok, short_id};
use crate::state::rows::Profile;
use askama::Template;
use axum::Router;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// Seconds a flame graph lasts unless asked otherwise.
const DEFAULT_SECONDS: u32 = 5;

pub(super) fn routes() -> Router<Dashboard> {
    Router::new().route("/api/oxray/profile", get(raw)).route("/profile", get(page)).route("/ui/profile", get(fragment))
}

#[derive(serde::Deserialize)]
struct ProfileQuery {
    node_id: String,
    pid: u32,
    #[serde(default)]
    kind: String,
    duration: Option<u32>,
    #[serde(default)]
    name: String,
}

/// A `kind` that names no profile (a 400).
#[derive(Debug, thiserror::Error)]
#[error("kind={kind:?}: expected dump or flamegraph")]
struct UnknownKind {
    kind: String,
}

impl ProfileQuery {
    fn what(&self) -> Result<Profile, UnknownKind> {
        match self.kind.as_str() {
            "" | "dump" => Ok(Profile::Dump),
            "flamegraph" => Ok(Profile::FlameGraph { seconds: self.duration.unwrap_or(DEFAULT_SECONDS) }),
            other => Err(UnknownKind { kind: other.to_string() }),
        }
    }
}

/// The profile asked for, or the status and text of why not.
async fn take(dash: &Dashboard, query: &ProfileQuery) -> Result<(Profile, Vec<u8>), (StatusCode, String)> {
    let what = query.what().map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()))?;
    let cluster =
        dash.sources.cluster.as_ref().ok_or((StatusCode::BAD_REQUEST, "this server has no cluster".to_string()))?;
    let profile = cluster.profile(&query.node_id, query.pid, what).await.map_err(|e| (e.status(), e.to_string()))?;
    Ok((what, profile))
}

/// The stacks as text, or the flame graph as SVG (its own scripts barred: it is shown, not run).
async fn raw(State(dash): State<Dashboard>, Query(query): Query<ProfileQuery>) -> Response {
    match take(&dash, &query).await {
        Ok((Profile::Dump, text)) => ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response(),
        Ok((Profile::FlameGraph { .. }, svg)) => (
            [
                (header::CONTENT_TYPE, "image/svg+xml"),
                (header::CONTENT_SECURITY_POLICY, "default-src 'none'; style-src 'unsafe-inline'"),
            ],
            svg,
        )
            .into_response(),
        Err(e) => e.into_response(),
    }
}

#[derive(Template)]
#[template(path = "profile.html")]
struct ProfilePage {
    title: &'static str,
    here: &'static str,
    node_id: String,
    short: String,
    pid: u32,
    name: String,
    seconds: u32,
}

async fn page(Query(query): Query<ProfileQuery>) -> Response {
    ok(&ProfilePage {
        title: "Profile",
        here: "/actors",
        short: short_id(&query.node_id),
        node_id: query.node_id,
        pid: query.pid,
        name: query.name,
        seconds: DEFAULT_SECONDS,
    })
}

#[derive(Template)]
#[template(path = "profile_result.html")]
struct ProfileFragment {
    stacks: String,
    /// The flame graph, base64 SVG for an `<img>` (which never runs its scripts).
    flamegraph: String,
    seconds: u32,
    error: String,
}

async fn fragment(State(dash): State<Dashboard>, Query(query): Query<ProfileQuery>) -> Response {
    use base64::Engine;
    let mut out =
        ProfileFragment { stacks: String::new(), flamegraph: String::new(), seconds: 0, error: String::new() };
    match take(&dash, &query).await {
        Ok((Profile::Dump, text)) => out.stacks = String::from_utf8_lossy(&text).into_owned(),
        Ok((Profile::FlameGraph { seconds }, svg)) => {
            out.seconds = seconds;
            out.flamegraph = base64::engine::general_purpose::STANDARD.encode(svg);
        }
        Err((_, e)) => out.error = e,
    }
    ok(&out)
}
