//! The one place Rust errors become Python exceptions.

use oxray_runtime::client::{ClientError, Refusal};
use oxray_runtime::ids::IdError;
use pyo3::PyErr;
use pyo3::exceptions::PyValueError;

pyo3::create_exception!(_native, OxrayRpcError, pyo3::exceptions::PyRuntimeError);
pyo3::create_exception!(_native, OxrayAuthError, OxrayRpcError);

/// A failed call to the node agent: a refused value or name is the caller's
/// `ValueError`; a token problem is `OxrayAuthError`; anything else (an
/// unreachable agent, a broken stream) is `OxrayRpcError`.
pub(crate) fn client_error(e: ClientError) -> PyErr {
    match e {
        ClientError::Auth(m) => OxrayAuthError::new_err(m),
        ClientError::Refused { reason: Refusal::InvalidArgument | Refusal::AlreadyExists, message } => {
            PyValueError::new_err(message)
        }
        ClientError::BadId(e) => PyValueError::new_err(e.to_string()),
        other => OxrayRpcError::new_err(other.to_string()),
    }
}

/// An id passed in from Python with the wrong length.
pub(crate) fn bad_id(e: IdError) -> PyErr {
    PyValueError::new_err(e.to_string())
}
