//! The server's one error type and its one mapping to an HTTP response: every
//! handler that can fail returns [`HttpError`], so the status a failure gets is
//! decided here and nowhere else.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use oxray_jobs::JobError;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The jobs engine refused or failed the request.
    #[error(transparent)]
    Jobs(#[from] JobError),
    /// No package was uploaded under this name.
    #[error("Package {protocol}://{name} does not exist")]
    PackageNotFound { protocol: String, name: String },
    /// A handler's blocking task panicked or was cancelled.
    #[error("{0}")]
    Task(#[from] tokio::task::JoinError),
    /// A server could not start: its listener has no address.
    #[error("the {server} listener has no address: {source}")]
    Listener { server: &'static str, source: std::io::Error },
}

impl HttpError {
    /// Every variant named, so a new failure needs a status chosen here.
    fn status(&self) -> StatusCode {
        match self {
            HttpError::Jobs(e) => match e {
                JobError::Submit(_)
                | JobError::Package(_)
                | JobError::DriverJob { .. }
                | JobError::NoScheduler { .. } => StatusCode::BAD_REQUEST,
                JobError::NotFound { .. } => StatusCode::NOT_FOUND,
                // Ray's head answers these two as 500s too.
                JobError::AlreadyExists { .. }
                | JobError::NotTerminal { .. }
                | JobError::Store(_)
                | JobError::CreateDir { .. }
                | JobError::StorePackage(_) => StatusCode::INTERNAL_SERVER_ERROR,
            },
            HttpError::PackageNotFound { .. } => StatusCode::NOT_FOUND,
            HttpError::Task(_) | HttpError::Listener { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        (self.status(), self.to_string()).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxray_jobs::record::JobStatus;
    use oxray_jobs::{PackageError, StoreError, SubmitError};

    #[test]
    fn each_failure_keeps_the_status_ray_answers() {
        let io = || std::io::Error::other("disk");
        let cases = [
            (JobError::Submit(SubmitError::NoEntrypoint).into(), StatusCode::BAD_REQUEST),
            (JobError::Package(PackageError::TooLarge).into(), StatusCode::BAD_REQUEST),
            (JobError::DriverJob { id: "01000000".into() }.into(), StatusCode::BAD_REQUEST),
            (JobError::NoScheduler { resources: [("CPU".to_string(), 1.0)].into() }.into(), StatusCode::BAD_REQUEST),
            (JobError::NotFound { id: "x".into() }.into(), StatusCode::NOT_FOUND),
            (HttpError::PackageNotFound { protocol: "gcs".into(), name: "a.zip".into() }, StatusCode::NOT_FOUND),
            (JobError::AlreadyExists { id: "x".into() }.into(), StatusCode::INTERNAL_SERVER_ERROR),
            (
                JobError::NotTerminal { id: "x".into(), status: JobStatus::Running }.into(),
                StatusCode::INTERNAL_SERVER_ERROR,
            ),
            (JobError::Store(StoreError::Corrupt { id: "x".into() }).into(), StatusCode::INTERNAL_SERVER_ERROR),
            (JobError::StorePackage(io()).into(), StatusCode::INTERNAL_SERVER_ERROR),
            (JobError::CreateDir { path: "/d".into(), source: io() }.into(), StatusCode::INTERNAL_SERVER_ERROR),
        ];
        for (error, status) in cases {
            assert_eq!(error.status(), status, "{error}");
        }
        let delete = HttpError::from(JobError::NotTerminal { id: "x".into(), status: JobStatus::Running });
        assert_eq!(
            delete.to_string(),
            "Attempted to delete job with id 'x', but it is in a non-terminal state RUNNING."
        );
    }
}
