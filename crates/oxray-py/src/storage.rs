//! `oxray._native.Storage`: Train's run storage (local path or S3) for Python.

use crate::error::storage_error as to_py;
use crate::runtime;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::path::PathBuf;

#[pyclass(frozen)]
pub(crate) struct Storage {
    inner: oxray_io::Storage,
}

#[pymethods]
impl Storage {
    #[new]
    fn new(uri: &str) -> PyResult<Self> {
        Ok(Storage { inner: oxray_io::Storage::open(uri).map_err(to_py)? })
    }

    #[getter]
    fn uri(&self) -> String {
        self.inner.uri()
    }

    fn write_bytes(&self, py: Python<'_>, rel: &str, data: Vec<u8>) -> PyResult<()> {
        py.detach(|| runtime().block_on(self.inner.write_bytes(rel, data))).map_err(to_py)
    }

    fn read_bytes<'py>(&self, py: Python<'py>, rel: &str) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let data = py.detach(|| runtime().block_on(self.inner.read_bytes(rel))).map_err(to_py)?;
        Ok(data.map(|d| PyBytes::new(py, &d)))
    }

    /// Copies a local directory's files under `rel/`, merging with what is there.
    fn upload_dir(&self, py: Python<'_>, local: PathBuf, rel: &str) -> PyResult<u64> {
        py.detach(|| runtime().block_on(self.inner.upload_dir(&local, rel))).map_err(to_py)
    }

    fn download_dir(&self, py: Python<'_>, rel: &str, local: PathBuf) -> PyResult<u64> {
        py.detach(|| runtime().block_on(self.inner.download_dir(rel, &local))).map_err(to_py)
    }

    fn list(&self, py: Python<'_>, rel: &str) -> PyResult<Vec<String>> {
        py.detach(|| runtime().block_on(self.inner.list(rel))).map_err(to_py)
    }

    fn delete_dir(&self, py: Python<'_>, rel: &str) -> PyResult<()> {
        py.detach(|| runtime().block_on(self.inner.delete_dir(rel))).map_err(to_py)
    }
}
