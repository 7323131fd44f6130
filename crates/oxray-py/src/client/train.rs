//! Train's controller telling the head where its run is (`UpdateTrainRun`),
//! Tune's driver where its experiment is (`UpdateExperiment`), and Data's
//! executor how an execution goes (`UpdateDataset`), for the dashboard's Train,
//! Tune and Datasets pages.

use super::Client;
use crate::error::client_error as rpc_err;
use crate::runtime;
use oxray_runtime::proto::{DatasetUpdate, ExperimentUpdate, TrainRunUpdate};
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

    /// Sends experiment `experiment_id`'s whole state (a JSON object) and its trials' results
    /// reported since the last call (each a JSON object).
    fn update_experiment(
        &self,
        py: Python<'_>,
        experiment_id: String,
        experiment_json: String,
        new_results_json: Vec<String>,
    ) -> PyResult<()> {
        let mut agent = self.inner.driver();
        let update = ExperimentUpdate { experiment_id, experiment_json, new_results_json };
        py.detach(|| runtime().block_on(agent.update_experiment(update))).map_err(|s| rpc_err(s.into()))?;
        Ok(())
    }

    /// Sends a Data execution's figures (a JSON object) to the head.
    fn update_dataset(&self, py: Python<'_>, dataset_id: String, dataset_json: String) -> PyResult<()> {
        let mut agent = self.inner.driver();
        let update = DatasetUpdate { dataset_id, dataset_json };
        py.detach(|| runtime().block_on(agent.update_dataset(update))).map_err(|s| rpc_err(s.into()))?;
        Ok(())
    }
}
