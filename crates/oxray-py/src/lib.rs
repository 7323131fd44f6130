//! `oxray._native`: the Python binding of the oxray engine. It starts the
//! embedded cluster, and gives each Python process a client for its node
//! agent plus zero-copy access to objects in shared memory.

mod buffers;
mod client;
mod cluster;

use pyo3::prelude::*;
use std::sync::OnceLock;

static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();

/// The process-wide async runtime that runs RPCs and, in a driver, the embedded cluster.
pub(crate) fn runtime() -> &'static tokio::runtime::Runtime {
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("oxray-rt")
            .enable_all()
            .build()
            .expect("cannot start the oxray async runtime")
    })
}

pyo3::create_exception!(_native, OxrayRpcError, pyo3::exceptions::PyRuntimeError);

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<buffers::ObjectBuffer>()?;
    m.add_class::<buffers::PreparedObject>()?;
    m.add_class::<client::Client>()?;
    m.add_class::<cluster::Cluster>()?;
    m.add_function(wrap_pyfunction!(cluster::start_cluster, m)?)?;
    m.add_function(wrap_pyfunction!(buffers::encode_object, m)?)?;
    m.add("INLINE_THRESHOLD", oxray_store::INLINE_THRESHOLD)?;
    m.add("OxrayRpcError", m.py().get_type::<OxrayRpcError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
