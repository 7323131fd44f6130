//! The dashboard: server-rendered pages (askama templates in `templates/`)
//! that htmx refreshes in place from `/ui/...` fragments, over the same rows
//! the State API serves, with every asset embedded (`assets.rs`). A browser
//! logs in once: the token through the login form (`POST /api/authenticate`)
//! or a `/?token=` link sets an HttpOnly SameSite=Strict cookie.

mod assets;
mod datasets;
mod logs;
mod profile;
mod train;
pub(crate) mod views;

use crate::HttpConfig;
use crate::auth;
use crate::state::StateSources;
use askama::Template;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use oxray_jobs::JobManager;
use std::sync::Arc;
use views::{
    ActorsBody, ActorsFragment, ActorsPage, ChartsPage, JobFragment, JobPage, JobView, JobsBody, JobsFragment,
    JobsPage, LoginPage, OverviewBody, OverviewFragment, OverviewPage, Search, TasksBody, TasksFragment, TasksPage,
};

#[derive(Clone)]
pub(crate) struct Dashboard {
    config: Arc<HttpConfig>,
    sources: StateSources,
}

pub(crate) fn routes(config: Arc<HttpConfig>, sources: StateSources) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/overview", get(overview))
        .route("/jobs", get(jobs))
        .route("/jobs/{id}", get(job))
        .route("/actors", get(actors))
        .route("/tasks", get(tasks))
        .route("/charts", get(charts))
        .route("/ui/overview", get(overview_fragment))
        .route("/ui/jobs", get(jobs_fragment))
        .route("/ui/jobs/{id}", get(job_fragment))
        .route("/ui/actors", get(actors_fragment))
        .route("/ui/tasks", get(tasks_fragment))
        .route("/static/{*path}", get(assets::serve))
        .route("/favicon.ico", get(assets::favicon))
        .merge(train::routes())
        .merge(logs::routes())
        .merge(profile::routes())
        .merge(datasets::routes())
        .with_state(Dashboard { config, sources })
}

/// A rendered page: never cached, never framed, scripts only from this server.
pub(crate) fn html(status: StatusCode, page: &impl Template) -> Response {
    match page.render() {
        Ok(body) => (
            status,
            [
                (header::CONTENT_TYPE, "text/html; charset=utf-8"),
                (header::CACHE_CONTROL, "no-store"),
                (header::X_FRAME_OPTIONS, "DENY"),
                (
                    header::CONTENT_SECURITY_POLICY,
                    "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'",
                ),
            ],
            body,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("the page could not be rendered: {e}")).into_response(),
    }
}

fn ok(page: &impl Template) -> Response {
    html(StatusCode::OK, page)
}

#[derive(serde::Deserialize)]
struct Login {
    token: Option<String>,
}

/// The login page, or the overview for a browser that has the cookie; a
/// `?token=` link checks the token and sets the cookie.
async fn index(State(dash): State<Dashboard>, Query(login): Query<Login>, headers: HeaderMap) -> Response {
    if let Some(token) = login.token {
        if !auth::token_matches(&token, &dash.config.token) {
            let page = LoginPage { message: "That link's token is not this cluster's.".into() };
            return html(StatusCode::FORBIDDEN, &page);
        }
        let cookie = auth::session_cookie(&dash.config.token);
        return ([(header::SET_COOKIE, cookie)], Redirect::to("/overview")).into_response();
    }
    if auth::check(&dash.config, &headers).is_ok() {
        return Redirect::to("/overview").into_response();
    }
    ok(&LoginPage { message: String::new() })
}

fn job_manager(dash: &Dashboard) -> Option<&Arc<JobManager>> {
    dash.sources.jobs.as_ref()
}

fn job_rows(dash: &Dashboard) -> Vec<oxray_rest::JobDetails> {
    job_manager(dash).and_then(|jobs| jobs.list(true).ok()).unwrap_or_default()
}

fn overview_body(dash: &Dashboard) -> OverviewBody {
    let (nodes, actors, runs) = match &dash.sources.cluster {
        Some(cluster) => (cluster.nodes(), cluster.actors(), cluster.train_runs()),
        None => (Vec::new(), Vec::new(), Vec::new()),
    };
    OverviewBody::new(&nodes, &actors, &job_rows(dash), &runs)
}

async fn overview(State(dash): State<Dashboard>) -> Response {
    ok(&OverviewPage { title: "Overview", here: "/overview", body: overview_body(&dash) })
}

async fn overview_fragment(State(dash): State<Dashboard>) -> Response {
    ok(&OverviewFragment { body: overview_body(&dash) })
}

/// Newest first.
fn jobs_body(dash: &Dashboard) -> JobsBody {
    let mut jobs: Vec<JobView> = job_rows(dash).iter().map(JobView::new).collect();
    jobs.sort_by_key(|j| std::cmp::Reverse(j.start_ms));
    JobsBody { jobs }
}

async fn jobs(State(dash): State<Dashboard>) -> Response {
    ok(&JobsPage { title: "Jobs", here: "/jobs", body: jobs_body(&dash) })
}

async fn jobs_fragment(State(dash): State<Dashboard>) -> Response {
    ok(&JobsFragment { body: jobs_body(&dash) })
}

/// The job's view; None when no job has that id.
fn one_job(dash: &Dashboard, id: &str) -> Option<JobView> {
    let details = job_manager(dash)?.details(id, true).ok()?;
    Some(JobView::new(&details))
}

fn no_job(id: &str) -> Response {
    (StatusCode::NOT_FOUND, format!("no job {id:?} on this cluster")).into_response()
}

async fn job(State(dash): State<Dashboard>, Path(id): Path<String>) -> Response {
    match one_job(&dash, &id) {
        Some(job) => ok(&JobPage { title: "Job", here: "/jobs", job }),
        None => no_job(&id),
    }
}

async fn job_fragment(State(dash): State<Dashboard>, Path(id): Path<String>) -> Response {
    match one_job(&dash, &id) {
        Some(job) => ok(&JobFragment { job }),
        None => no_job(&id),
    }
}

fn actors_body(dash: &Dashboard, search: &Search) -> ActorsBody {
    let actors = dash.sources.cluster.as_ref().map(|c| c.actors()).unwrap_or_default();
    ActorsBody::new(actors, search)
}

async fn actors(State(dash): State<Dashboard>, Query(search): Query<Search>) -> Response {
    let body = actors_body(&dash, &search);
    ok(&ActorsPage { title: "Actors", here: "/actors", query: search, body })
}

async fn actors_fragment(State(dash): State<Dashboard>, Query(search): Query<Search>) -> Response {
    ok(&ActorsFragment { body: actors_body(&dash, &search) })
}

async fn tasks_body(dash: &Dashboard, search: &Search) -> TasksBody {
    let Some(cluster) = &dash.sources.cluster else { return TasksBody::new(&[], 0, String::new(), search) };
    let (tasks, total, warning) = crate::state::newest_tasks(cluster.as_ref()).await;
    TasksBody::new(&tasks, total, warning, search)
}

async fn tasks(State(dash): State<Dashboard>, Query(search): Query<Search>) -> Response {
    let body = tasks_body(&dash, &search).await;
    ok(&TasksPage { title: "Tasks", here: "/tasks", query: search, body })
}

async fn tasks_fragment(State(dash): State<Dashboard>, Query(search): Query<Search>) -> Response {
    ok(&TasksFragment { body: tasks_body(&dash, &search).await })
}

async fn charts(State(dash): State<Dashboard>) -> Response {
    let window_ms = dash.config.metrics_window_ms;
    ok(&ChartsPage { title: "Metrics", here: "/charts", window_ms, window_minutes: window_ms / 60_000 })
}

/// What a browser gets instead of a bare 401/403 on a page: the login form.
pub(crate) fn login_instead(status: StatusCode) -> Response {
    let message =
        if status == StatusCode::FORBIDDEN { "The token this browser sent is not this cluster's." } else { "" };
    html(status, &LoginPage { message: message.into() })
}
