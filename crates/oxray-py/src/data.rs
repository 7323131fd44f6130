//! `oxray._native`'s data engine (`data_*` functions, `Data*` classes): thin
//! wrappers over `oxray-data`. Arrow values cross as Arrow PyCapsules
//! (`pyo3-arrow`, zero-copy) and come back as pyarrow objects; every blocking
//! call releases the GIL.

use crate::error::data_error as to_py;
use arrow_array::RecordBatch;
use oxray_data::{Batcher, ParquetStream, ReadOptions, RowGroupSizes, StreamOptions};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use pyo3_arrow::input::AnyRecordBatch;
use pyo3_arrow::{PyRecordBatch, PySchema};

fn to_pyarrow(py: Python<'_>, batch: RecordBatch) -> PyResult<Bound<'_, PyAny>> {
    PyRecordBatch::new(batch).into_pyarrow(py)
}

fn all_to_pyarrow(py: Python<'_>, batches: Vec<RecordBatch>) -> PyResult<Vec<Bound<'_, PyAny>>> {
    batches.into_iter().map(|b| to_pyarrow(py, b)).collect()
}

/// Record batches out of RecordBatches and tables (anything with
/// `__arrow_c_array__` or `__arrow_c_stream__`).
fn collect_batches(inputs: Vec<AnyRecordBatch>) -> PyResult<Vec<RecordBatch>> {
    let mut out = Vec::with_capacity(inputs.len());
    for input in inputs {
        match input {
            AnyRecordBatch::RecordBatch(batch) => out.push(batch.into_inner()),
            stream => {
                for batch in stream.into_reader()? {
                    out.push(batch.map_err(|e| PyValueError::new_err(format!("cannot read an Arrow stream: {e}")))?);
                }
            }
        }
    }
    Ok(out)
}

/// A count that must not be negative (`name` and the value in the error).
fn count(name: &str, value: i64) -> PyResult<usize> {
    usize::try_from(value).map_err(|_| PyValueError::new_err(format!("{name}={value} is invalid: expected 0 or more")))
}

/// A count that must be positive.
fn positive(name: &str, value: i64) -> PyResult<usize> {
    match value {
        1.. => Ok(value as usize),
        _ => Err(PyValueError::new_err(format!("{name}={value} is invalid: expected a positive number"))),
    }
}

fn counts(name: &str, values: Option<Vec<i64>>) -> PyResult<Option<Vec<usize>>> {
    values.map(|v| v.into_iter().map(|x| count(name, x)).collect()).transpose()
}

/// Each input as `(uri, size)`: files, directories (walked) and globs, local or S3.
#[pyfunction]
#[pyo3(signature = (paths, extensions=None))]
pub(crate) fn data_expand_paths(
    py: Python<'_>,
    paths: Vec<String>,
    extensions: Option<Vec<String>>,
) -> PyResult<Vec<(String, u64)>> {
    py.detach(|| oxray_data::expand_paths(&paths, extensions.as_deref())).map_err(to_py)
}

/// The dataset schema and each file's row groups as `(num_rows, uncompressed bytes)`, from footers only.
#[pyfunction]
pub(crate) fn data_parquet_inspect(py: Python<'_>, uris: Vec<String>) -> PyResult<(Bound<'_, PyAny>, RowGroupSizes)> {
    let (schema, groups) = py.detach(|| oxray_data::inspect_parquet(&uris)).map_err(to_py)?;
    Ok((PySchema::new(schema).into_pyarrow(py)?, groups))
}

/// One fragment of a parquet file: chosen row groups and columns, at most `limit` rows.
#[pyfunction]
#[pyo3(signature = (uri, row_groups, columns, limit, batch_size))]
pub(crate) fn data_read_parquet(
    py: Python<'_>,
    uri: String,
    row_groups: Option<Vec<i64>>,
    columns: Option<Vec<String>>,
    limit: Option<i64>,
    batch_size: i64,
) -> PyResult<Vec<Bound<'_, PyAny>>> {
    let options = ReadOptions {
        row_groups: counts("row_groups", row_groups)?,
        columns,
        limit: limit.map(|l| count("limit", l)).transpose()?,
        batch_size: positive("batch_size", batch_size)?,
    };
    let batches = py.detach(|| oxray_data::read_parquet(&uri, &options)).map_err(to_py)?;
    all_to_pyarrow(py, batches)
}

/// Batches of many parquet fragments in order, decoded ahead on Rust threads
/// within a budget of decoded bytes.
#[pyclass(module = "oxray._native")]
pub(crate) struct DataParquetStream {
    inner: ParquetStream,
}

#[pymethods]
impl DataParquetStream {
    #[new]
    #[pyo3(signature = (fragments, columns, limit, batch_size, threads, max_bytes_in_flight))]
    fn new(
        fragments: Vec<(String, Option<Vec<i64>>)>,
        columns: Option<Vec<String>>,
        limit: Option<i64>,
        batch_size: i64,
        threads: i64,
        max_bytes_in_flight: i64,
    ) -> PyResult<Self> {
        let fragments = fragments
            .into_iter()
            .map(|(uri, groups)| Ok((uri, counts("row_groups", groups)?)))
            .collect::<PyResult<Vec<_>>>()?;
        let options = StreamOptions {
            columns,
            limit: limit.map(|l| count("limit", l)).transpose()?,
            batch_size: positive("batch_size", batch_size)?,
            threads: positive("threads", threads)?,
            max_bytes_in_flight: count("max_bytes_in_flight", max_bytes_in_flight)?,
        };
        Ok(DataParquetStream { inner: ParquetStream::new(fragments, options).map_err(to_py)? })
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        match py.detach(|| self.inner.next()) {
            None => Ok(None),
            Some(batch) => Ok(Some(to_pyarrow(py, batch.map_err(to_py)?)?)),
        }
    }

    /// Decoded bytes waiting for the consumer.
    #[getter]
    fn bytes_in_flight(&self) -> usize {
        self.inner.bytes_in_flight()
    }
}

/// A csv file's rows (schema inferred; `.gz` decompressed).
#[pyfunction]
#[pyo3(signature = (uri, delimiter=",", has_header=true, columns=None))]
pub(crate) fn data_read_csv<'py>(
    py: Python<'py>,
    uri: String,
    delimiter: &str,
    has_header: bool,
    columns: Option<Vec<String>>,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let batches = py.detach(|| oxray_data::read_csv(&uri, delimiter, has_header, columns.as_deref())).map_err(to_py)?;
    all_to_pyarrow(py, batches)
}

/// JSON Lines or a JSON array of objects (`lines=None`: detected).
#[pyfunction]
#[pyo3(signature = (uri, lines=None))]
pub(crate) fn data_read_json(py: Python<'_>, uri: String, lines: Option<bool>) -> PyResult<Vec<Bound<'_, PyAny>>> {
    let batches = py.detach(|| oxray_data::read_json(&uri, lines)).map_err(to_py)?;
    all_to_pyarrow(py, batches)
}

/// One row per line, in a column `text`.
#[pyfunction]
#[pyo3(signature = (uri, drop_empty_lines=false))]
pub(crate) fn data_read_text(py: Python<'_>, uri: String, drop_empty_lines: bool) -> PyResult<Vec<Bound<'_, PyAny>>> {
    let batches = py.detach(|| oxray_data::read_text(&uri, drop_empty_lines)).map_err(to_py)?;
    all_to_pyarrow(py, batches)
}

/// A whole file's bytes.
#[pyfunction]
pub(crate) fn data_read_bytes(py: Python<'_>, uri: String) -> PyResult<Bound<'_, PyBytes>> {
    let data = py.detach(|| oxray_data::read_bytes(&uri)).map_err(to_py)?;
    Ok(PyBytes::new(py, &data))
}

/// Bytes `start..end` of a file (fewer at its end).
#[pyfunction]
pub(crate) fn data_read_range(py: Python<'_>, uri: String, start: u64, end: u64) -> PyResult<Bound<'_, PyBytes>> {
    let data = py.detach(|| oxray_data::read_range(&uri, start, end)).map_err(to_py)?;
    Ok(PyBytes::new(py, &data))
}

/// The csv rows of the lines that start in bytes `start..end` of a file (its header: the first line).
#[pyfunction]
#[pyo3(signature = (uri, start, end, delimiter=",", has_header=true))]
pub(crate) fn data_read_csv_range<'py>(
    py: Python<'py>,
    uri: String,
    start: u64,
    end: u64,
    delimiter: &str,
    has_header: bool,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let batches = py.detach(|| oxray_data::read_csv_range(&uri, delimiter, has_header, start, end)).map_err(to_py)?;
    all_to_pyarrow(py, batches)
}

/// The JSON Lines rows of the lines that start in bytes `start..end` of a file.
#[pyfunction]
pub(crate) fn data_read_json_lines_range(
    py: Python<'_>,
    uri: String,
    start: u64,
    end: u64,
) -> PyResult<Vec<Bound<'_, PyAny>>> {
    let batches = py.detach(|| oxray_data::read_json_lines_range(&uri, start, end)).map_err(to_py)?;
    all_to_pyarrow(py, batches)
}

/// Writes one parquet file `<dir_uri>/<filename>`; returns its URI.
#[pyfunction]
#[pyo3(signature = (batches, dir_uri, filename, compression="snappy"))]
pub(crate) fn data_write_parquet(
    py: Python<'_>,
    batches: Vec<AnyRecordBatch>,
    dir_uri: String,
    filename: String,
    compression: &str,
) -> PyResult<String> {
    let batches = collect_batches(batches)?;
    py.detach(|| oxray_data::write_parquet(&batches, &dir_uri, &filename, compression)).map_err(to_py)
}

/// Writes one csv file (with a header row); returns its URI.
#[pyfunction]
pub(crate) fn data_write_csv(
    py: Python<'_>,
    batches: Vec<AnyRecordBatch>,
    dir_uri: String,
    filename: String,
) -> PyResult<String> {
    let batches = collect_batches(batches)?;
    py.detach(|| oxray_data::write_csv(&batches, &dir_uri, &filename)).map_err(to_py)
}

/// Writes one JSON Lines file; returns its URI.
#[pyfunction]
pub(crate) fn data_write_json(
    py: Python<'_>,
    batches: Vec<AnyRecordBatch>,
    dir_uri: String,
    filename: String,
) -> PyResult<String> {
    let batches = collect_batches(batches)?;
    py.detach(|| oxray_data::write_json(&batches, &dir_uri, &filename)).map_err(to_py)
}

/// Writes `data` as one file; returns its URI.
#[pyfunction]
pub(crate) fn data_write_bytes(py: Python<'_>, dir_uri: String, filename: String, data: &[u8]) -> PyResult<String> {
    py.detach(|| oxray_data::write_bytes(&dir_uri, &filename, data)).map_err(to_py)
}

/// Cuts added batches into batches of exactly `batch_size` rows, optionally
/// drawn from a seeded local shuffle buffer.
#[pyclass(module = "oxray._native")]
pub(crate) struct DataBatcher {
    inner: Batcher,
}

#[pymethods]
impl DataBatcher {
    #[new]
    #[pyo3(signature = (batch_size, drop_last=false, shuffle_buffer_size=None, seed=None))]
    fn new(
        batch_size: Option<i64>,
        drop_last: bool,
        shuffle_buffer_size: Option<i64>,
        seed: Option<u64>,
    ) -> PyResult<Self> {
        Ok(DataBatcher { inner: Batcher::new(batch_size, drop_last, shuffle_buffer_size, seed).map_err(to_py)? })
    }

    /// Adds a RecordBatch (or every batch of a table).
    fn add(&mut self, batch: AnyRecordBatch) -> PyResult<()> {
        for batch in collect_batches(vec![batch])? {
            self.inner.add(batch).map_err(to_py)?;
        }
        Ok(())
    }

    /// The next full batch, or `None` until one is ready (after `finish()`: what is left).
    fn next_batch<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        match py.detach(|| self.inner.next_batch()).map_err(to_py)? {
            Some(batch) => Ok(Some(to_pyarrow(py, batch)?)),
            None => Ok(None),
        }
    }

    /// Marks the end of the input.
    fn finish(&mut self) {
        self.inner.finish();
    }
}

/// One batch out of batches with the same columns.
#[pyfunction]
pub(crate) fn data_concat_batches(py: Python<'_>, batches: Vec<AnyRecordBatch>) -> PyResult<Bound<'_, PyAny>> {
    let batches = collect_batches(batches)?;
    let batch = py.detach(|| oxray_data::concat_batches(&batches)).map_err(to_py)?;
    to_pyarrow(py, batch)
}

/// An Arrow IPC stream holding one batch.
#[pyfunction]
pub(crate) fn data_encode_ipc(py: Python<'_>, batch: PyRecordBatch) -> PyResult<Bound<'_, PyBytes>> {
    let batch = batch.into_inner();
    let data = py.detach(|| oxray_data::encode_ipc(&batch)).map_err(to_py)?;
    Ok(PyBytes::new(py, &data))
}

/// Registers the data engine in `oxray._native`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<DataParquetStream>()?;
    m.add_class::<DataBatcher>()?;
    m.add_function(wrap_pyfunction!(data_expand_paths, m)?)?;
    m.add_function(wrap_pyfunction!(data_parquet_inspect, m)?)?;
    m.add_function(wrap_pyfunction!(data_read_parquet, m)?)?;
    m.add_function(wrap_pyfunction!(data_read_csv, m)?)?;
    m.add_function(wrap_pyfunction!(data_read_json, m)?)?;
    m.add_function(wrap_pyfunction!(data_read_text, m)?)?;
    m.add_function(wrap_pyfunction!(data_read_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(data_read_range, m)?)?;
    m.add_function(wrap_pyfunction!(data_read_csv_range, m)?)?;
    m.add_function(wrap_pyfunction!(data_read_json_lines_range, m)?)?;
    m.add_function(wrap_pyfunction!(data_write_parquet, m)?)?;
    m.add_function(wrap_pyfunction!(data_write_csv, m)?)?;
    m.add_function(wrap_pyfunction!(data_write_json, m)?)?;
    m.add_function(wrap_pyfunction!(data_write_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(data_concat_batches, m)?)?;
    m.add_function(wrap_pyfunction!(data_encode_ipc, m)?)?;
    Ok(())
}
