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
    /// A server could not start: its listener has no address.
    #[error("the {server} listener has no address: {source}")]
    Listener { server: &'static str, source: std::io::Error },
}

impl HttpError {
    fn status(&self) -> StatusCode {
        match self {
            HttpError::Jobs(JobError::BadRequest(_)) => StatusCode::BAD_REQUEST,
            HttpError::Jobs(JobError::NotFound(_)) => StatusCode::NOT_FOUND,
            HttpError::Jobs(JobError::Internal(_)) | HttpError::Listener { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        (self.status(), self.to_string()).into_response()
    }
}
