//! Ray's label selectors for Python: the agent's own parser and matcher
//! (`oxray_runtime::labels`), so options are checked, and Train's placement
//! pre-check decided, exactly as the scheduler will.

use oxray_runtime::labels::LabelSelector;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::collections::HashMap;

fn parse(selector: &HashMap<String, String>) -> PyResult<LabelSelector> {
    LabelSelector::parse(selector).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// Raises ValueError naming the first condition that is not Ray's `value`,
/// `!value`, `in(a, b)` or `!in(a, b)`.
#[pyfunction]
pub(crate) fn check_label_selector(selector: HashMap<String, String>) -> PyResult<()> {
    parse(&selector).map(|_| ())
}

/// Whether a node with `labels` matches `selector`.
#[pyfunction]
pub(crate) fn label_selector_matches(
    selector: HashMap<String, String>,
    labels: HashMap<String, String>,
) -> PyResult<bool> {
    Ok(parse(&selector)?.matches(&labels))
}
