//! Serve's engine errors: each names the bad value and what was expected.

/// Why the controller refused a request.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ServeError {
    #[error("{option}={value}: expected {expected}")]
    InvalidOption { option: &'static str, value: String, expected: &'static str },
    #[error(
        "route_prefix {prefix:?} is already used by application {taken_by:?}; give application {app:?} another route_prefix"
    )]
    RoutePrefixTaken { prefix: String, app: String, taken_by: String },
    #[error("application {app:?} has no deployment named {deployment:?} to be its ingress")]
    UnknownIngress { app: String, deployment: String },
}

impl ServeError {
    pub(crate) fn invalid(option: &'static str, value: impl std::fmt::Debug, expected: &'static str) -> Self {
        ServeError::InvalidOption { option, value: format!("{value:?}"), expected }
    }
}
