//! The cluster's nodes: listing them as dicts, and following the
//! output of this job's workers on them.

use super::Client;
use crate::error::{bad_id, client_error as rpc_err};
use crate::runtime;
use oxray_runtime::ids::JobId;
use oxray_runtime::proto::Empty;
use pyo3::prelude::*;
use pyo3::types::PyDict;

#[pymethods]
impl Client {
    /// Every node the head knows, alive or not.
    fn cluster_info<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        self.flush(py)?;
        let mut agent = self.inner.driver();
        let reply = py.detach(|| runtime().block_on(agent.cluster_info(Empty {}))).map_err(|s| rpc_err(s.into()))?;
        reply
            .into_inner()
            .nodes
            .into_iter()
            .map(|n| {
                let d = PyDict::new(py);
                d.set_item("node_id", hex::encode(&n.node_id))?;
                d.set_item("address", n.address)?;
                d.set_item("ip", n.ip)?;
                d.set_item("alive", n.alive)?;
                d.set_item("total", n.total)?;
                d.set_item("available", n.available)?;
                d.set_item("is_head", n.is_head)?;
                d.set_item("session_dir", n.session_dir)?;
                d.set_item("start_time_ms", n.start_time_ms)?;
                Ok(d)
            })
            .collect()
    }

    /// Prints the output of this job's workers on other nodes in this
    /// terminal (and on this node too when `skip_address` is None).
    #[pyo3(signature = (token, job_id, skip_address=None))]
    fn follow_logs(
        &self,
        py: Python<'_>,
        token: String,
        job_id: Vec<u8>,
        skip_address: Option<String>,
    ) -> PyResult<()> {
        let c = self.inner.clone();
        let job_id = JobId::from_optional_bytes(&job_id).map_err(bad_id)?;
        py.detach(|| runtime().block_on(c.follow_logs(token, job_id, skip_address)));
        Ok(())
    }
}
