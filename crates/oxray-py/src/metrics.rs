//! `oxray._native`'s application metrics: the process's one registry
//! (`oxray_runtime::user_metrics::MetricsRegistry`), recorded into by
//! `oxray.util.metrics` (and Serve's series), reported to the node's agent by
//! `Client.report_metrics`.

use oxray_runtime::user_metrics::{MetricKind, MetricsRegistry};
use parking_lot::Mutex;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::sync::LazyLock;

pub(crate) static REGISTRY: LazyLock<Mutex<MetricsRegistry>> = LazyLock::new(Mutex::default);

/// Records `value` for metric `name` (`kind`: "counter", "gauge" or "histogram") with `tags`;
/// `ValueError` when the name already has another kind or other boundaries in this process.
#[pyfunction]
#[pyo3(signature = (kind, name, description, tags, value, boundaries=Vec::new()))]
pub(crate) fn record_metric(
    kind: &str,
    name: &str,
    description: &str,
    tags: Vec<(String, String)>,
    value: f64,
    boundaries: Vec<f64>,
) -> PyResult<()> {
    let kind = match kind {
        "counter" => MetricKind::Counter,
        "gauge" => MetricKind::Gauge,
        "histogram" => MetricKind::Histogram,
        other => {
            return Err(PyValueError::new_err(format!("metric kind {other:?}: expected counter, gauge or histogram")));
        }
    };
    REGISTRY
        .lock()
        .record(kind, name, description, tags, value, &boundaries)
        .map_err(|e| PyValueError::new_err(e.to_string()))
}
