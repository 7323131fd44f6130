//! The Jobs pages: every job (submissions and drivers started by hand, newest
//! first) and one job (its fields, with Stop and Delete; its output comes over
//! the Jobs API's `/logs/tail` WebSocket, `assets/app.js`), from the Jobs API's
//! records.

use super::Dashboard;
use super::render::{Render, ok, page_and_fragment};
use askama::Template;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use oxray_rest::{JobDetails, JobType};

pub(super) fn routes() -> Router<Dashboard> {
    page_and_fragment("/jobs", "/ui/jobs", list).merge(page_and_fragment("/jobs/{id}", "/ui/jobs/{id}", one))
}

/// One row of the jobs' tables (here and on the overview), or one job's page.
pub(super) struct JobView {
    pub(super) id: String,
    /// Whether the job has a page (a submission does).
    pub(super) has_page: bool,
    pub(super) kind: String,
    pub(super) status: String,
    pub(super) entrypoint: String,
    pub(super) message: String,
    pub(super) start_ms: u64,
    pub(super) end_ms: u64,
    pub(super) running: bool,
    pub(super) ended: bool,
}

impl JobView {
    /// From a `JobDetails` (a submission, or a DRIVER row).
    pub(super) fn new(details: &JobDetails) -> Self {
        let id = details.id().to_string();
        let submission = details.job_type == JobType::Submission;
        Self {
            has_page: submission,
            id,
            kind: if submission { "SUBMISSION" } else { "DRIVER" }.to_string(),
            running: !details.status.is_terminal(),
            ended: details.status.is_terminal(),
            status: details.status.as_str().to_string(),
            entrypoint: details.entrypoint.clone(),
            message: details.message.clone(),
            start_ms: details.start_time,
            end_ms: details.end_time.unwrap_or(0),
        }
    }
}

/// Every job the Jobs API lists (none on a server without it).
pub(super) fn job_rows(dash: &Dashboard) -> Vec<JobDetails> {
    dash.sources.jobs.as_ref().and_then(|jobs| jobs.list(true).ok()).unwrap_or_default()
}

#[derive(Template)]
#[template(path = "jobs.html")]
struct JobsPage {
    title: &'static str,
    here: &'static str,
    jobs: Vec<JobView>,
}

/// The jobs page's table, which htmx refreshes.
#[derive(Template)]
#[template(path = "jobs.html", block = "table")]
struct JobsFragment {
    jobs: Vec<JobView>,
}

/// Every job, newest first.
async fn list(State(dash): State<Dashboard>, render: Render) -> Response {
    let mut jobs: Vec<JobView> = job_rows(&dash).iter().map(JobView::new).collect();
    jobs.sort_by_key(|j| std::cmp::Reverse(j.start_ms));
    match render {
        Render::Page => ok(&JobsPage { title: "Jobs", here: "/jobs", jobs }),
        Render::Fragment => ok(&JobsFragment { jobs }),
    }
}

#[derive(Template)]
#[template(path = "job.html")]
struct JobPage {
    title: &'static str,
    here: &'static str,
    job: JobView,
}

/// One job's fields and buttons, which htmx refreshes.
#[derive(Template)]
#[template(path = "job.html", block = "fields")]
struct JobFragment {
    job: JobView,
}

/// One job; 404 when no job has that id.
async fn one(State(dash): State<Dashboard>, Path(id): Path<String>, render: Render) -> Response {
    let Some(details) = dash.sources.jobs.as_ref().and_then(|jobs| jobs.details(&id, true).ok()) else {
        return (StatusCode::NOT_FOUND, format!("no job {id:?} on this cluster")).into_response();
    };
    let job = JobView::new(&details);
    match render {
        Render::Page => ok(&JobPage { title: "Job", here: "/jobs", job }),
        Render::Fragment => ok(&JobFragment { job }),
    }
}
