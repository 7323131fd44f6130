//! The cluster token: every RPC carries `authorization: Bearer <token>` and the
//! servers refuse any call without the right one.

use oxray_http::token_matches;
use tonic::{Request, Status, metadata::MetadataValue, service::Interceptor};

pub fn generate_token() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}

/// Server side: checks the bearer token in constant time.
#[derive(Clone)]
pub struct RequireToken {
    expected: String,
}

impl RequireToken {
    pub fn new(token: &str) -> Self {
        RequireToken { expected: format!("Bearer {token}") }
    }
}

impl Interceptor for RequireToken {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        match request.metadata().get("authorization") {
            None => Err(Status::unauthenticated("missing cluster token")),
            Some(v) if token_matches(v.as_bytes(), &self.expected) => Ok(request),
            Some(_) => Err(Status::permission_denied("invalid cluster token")),
        }
    }
}

/// Client side: adds the bearer token to every call.
#[derive(Clone)]
pub struct AttachToken {
    header: MetadataValue<tonic::metadata::Ascii>,
    /// `grpc-timeout` for calls that did not set their own (`Request::set_timeout`).
    default_deadline: Option<MetadataValue<tonic::metadata::Ascii>>,
}

/// A token that cannot travel in an HTTP header.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the cluster token must be printable ASCII: check OXRAY_TOKEN or the token file")]
pub struct TokenError;

impl AttachToken {
    pub fn new(token: &str) -> Result<Self, TokenError> {
        let header = format!("Bearer {token}").parse().map_err(|_| TokenError)?;
        Ok(AttachToken { header, default_deadline: None })
    }

    /// Every call without a deadline of its own gets `deadline`.
    pub fn with_default_deadline(mut self, deadline: std::time::Duration) -> Self {
        let mut request = Request::new(());
        request.set_timeout(deadline);
        self.default_deadline = request.metadata().get(GRPC_TIMEOUT).cloned();
        self
    }
}

const GRPC_TIMEOUT: &str = "grpc-timeout";

impl Interceptor for AttachToken {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        request.metadata_mut().insert("authorization", self.header.clone());
        if let Some(deadline) = &self.default_deadline
            && !request.metadata().contains_key(GRPC_TIMEOUT)
        {
            request.metadata_mut().insert(GRPC_TIMEOUT, deadline.clone());
        }
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_missing_and_wrong_tokens() {
        let mut guard = RequireToken::new("secret");
        assert_eq!(guard.call(Request::new(())).unwrap_err().code(), tonic::Code::Unauthenticated);
        let mut wrong = Request::new(());
        wrong.metadata_mut().insert("authorization", "Bearer nope".parse().unwrap());
        assert_eq!(guard.call(wrong).unwrap_err().code(), tonic::Code::PermissionDenied);
        let good = AttachToken::new("secret").unwrap().call(Request::new(())).unwrap();
        assert!(guard.call(good).is_ok());
        assert_eq!(generate_token().len(), 64);
    }
}
