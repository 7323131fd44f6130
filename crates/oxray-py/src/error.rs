//! The one place Rust errors become Python exceptions.

use oxray_data::DataError;
use oxray_io::StorageError;
use oxray_object_store::ShmError;
use oxray_runtime::client::{ClientError, Refusal};
use oxray_runtime::cluster::ClusterError;
use oxray_runtime::ids::{IdError, ObjectId};
use pyo3::PyErr;
use pyo3::exceptions::{PyFileNotFoundError, PyOSError, PyRuntimeError, PyValueError};

pyo3::create_exception!(_native, OxrayRpcError, PyRuntimeError);
pyo3::create_exception!(_native, OxrayAuthError, OxrayRpcError);

/// A failed call to the node agent: a refused value or name is the caller's
/// `ValueError`; a token problem is `OxrayAuthError`; anything else (an
/// unreachable agent, a broken stream) is `OxrayRpcError`.
pub(crate) fn client_error(e: ClientError) -> PyErr {
    match e {
        ClientError::Auth(m) => OxrayAuthError::new_err(m),
        e @ ClientError::Token(_) => OxrayAuthError::new_err(e.to_string()),
        e @ ClientError::Tls(_) => PyValueError::new_err(e.to_string()),
        ClientError::Refused { reason: Refusal::InvalidArgument | Refusal::AlreadyExists, message } => {
            PyValueError::new_err(message)
        }
        ClientError::BadId(e) => PyValueError::new_err(e.to_string()),
        ClientError::Refused { reason: Refusal::ResourceExhausted, message } => object_store_full(message),
        other => OxrayRpcError::new_err(other.to_string()),
    }
}

/// Ray's `ObjectStoreFullError` (defined in `oxray.exceptions`): no room for an
/// object in shared memory nor on the spill disk.
fn object_store_full(message: String) -> PyErr {
    use pyo3::prelude::*;
    use pyo3::types::PyType;
    Python::attach(|py| {
        let class = py.import("oxray.exceptions").and_then(|m| m.getattr("ObjectStoreFullError"));
        match class.and_then(|c| c.cast_into::<PyType>().map_err(PyErr::from)) {
            Ok(class) => PyErr::from_type(class, message),
            Err(e) => e,
        }
    })
}

/// An id passed in from Python with the wrong length.
pub(crate) fn bad_id(e: IdError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// Starting a node: a bad option is `ValueError`, a port in use `OSError`, a
/// refused token `OxrayAuthError`, anything else `RuntimeError`.
pub(crate) fn cluster_error(e: ClusterError) -> PyErr {
    match e {
        ClusterError::Config(m) => PyValueError::new_err(m),
        ClusterError::Auth(m) => OxrayAuthError::new_err(m),
        e @ ClusterError::Token(_) => OxrayAuthError::new_err(e.to_string()),
        e @ (ClusterError::Tls(_) | ClusterError::TlsServer(_)) => PyValueError::new_err(e.to_string()),
        e @ ClusterError::Bind { .. } => PyOSError::new_err(e.to_string()),
        other => PyRuntimeError::new_err(other.to_string()),
    }
}

/// Run storage: a URI we cannot use is `ValueError`; I/O and S3 failures are `OSError`.
pub(crate) fn storage_error(e: StorageError) -> PyErr {
    match e {
        StorageError::InvalidUri { .. } | StorageError::OutsideRoot { .. } => PyValueError::new_err(e.to_string()),
        _ => PyOSError::new_err(e.to_string()),
    }
}

/// The data engine: a missing path is `FileNotFoundError`, a disk or network
/// failure `OSError`, a bad value, file, schema or column `ValueError`.
pub(crate) fn data_error(e: DataError) -> PyErr {
    if e.is_not_found() {
        PyFileNotFoundError::new_err(e.to_string())
    } else if e.is_io() {
        PyOSError::new_err(e.to_string())
    } else {
        PyValueError::new_err(e.to_string())
    }
}

/// Why an object's bytes could not be mapped in this process.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MapError {
    #[error(transparent)]
    Shm(#[from] ShmError),
    #[error(transparent)]
    BadId(#[from] IdError),
    #[error("object {0} lies outside the arena")]
    OutsideArena(ObjectId),
    #[error("arena views are made by the client that maps the arena")]
    ArenaView,
    #[error("the object location is empty")]
    Empty,
}

impl From<MapError> for PyErr {
    fn from(e: MapError) -> Self {
        match e {
            MapError::Shm(e @ ShmError::NoSpace { .. }) => object_store_full(e.to_string()),
            other => OxrayRpcError::new_err(other.to_string()),
        }
    }
}
