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
    /// The request names something invalid: 400.
    #[error("{0}")]
    BadRequest(String),
    /// What the request names does not exist: 404.
    #[error("{0}")]
    NotFound(String),
    /// The server failed: 500.
    #[error("{0}")]
    Internal(String),
    /// A server could not start: its listener has no address.
    #[error("the {server} listener has no address: {source}")]
    Listener { server: &'static str, source: std::io::Error },
}

impl HttpError {
    fn status(&self) -> StatusCode {
        match self {
            HttpError::Jobs(JobError::BadRequest(_)) | HttpError::BadRequest(_) => StatusCode::BAD_REQUEST,
            HttpError::Jobs(JobError::NotFound(_)) | HttpError::NotFound(_) => StatusCode::NOT_FOUND,
            HttpError::Jobs(JobError::Internal(_)) | HttpError::Internal(_) | HttpError::Listener { .. } => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        (self.status(), self.to_string()).into_response()
    }
}
