//! Train's controller telling the head where its run is (`UpdateTrainRun`),
//! for the dashboard's run pages and Ray's `/api/train/v2/runs/v1`.

use super::Client;
use crate::error::client_error as rpc_err;
use crate::runtime;
use oxray_runtime::proto::TrainRunUpdate;
use pyo3::prelude::*;

#[pymethods]
impl Client {
    /// Sends run `run_id`'s whole state (a JSON object) and its reports made since
    /// the last call (each a JSON object).
    fn update_train_run(
        &self,
        py: Python<'_>,
        run_id: String,
        run_json: String,
        new_reports_json: Vec<String>,
    ) -> PyResult<()> {
        let mut agent = self.inner.driver();
        let update = TrainRunUpdate { run_id, run_json, new_reports_json };
        py.detach(|| runtime().block_on(agent.update_train_run(update))).map_err(|s| rpc_err(s.into()))?;
        Ok(())
    }
}
