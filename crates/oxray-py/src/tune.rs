//! `oxray._native`'s Tune controller: `TuneController` wraps `oxray-tune`'s
//! trial controller (trial states, resources, retries, the schedulers'
//! decisions) for the Python driver loop in `oxray/tune/_internal/runner.py`.
//! Statuses cross as Ray's strings (`"PENDING"`, ...); a scheduler as a tuple
//! (`("fifo",)`, `("driver",)` for a `TrialScheduler` of the user's own, `("asha", max_t, grace_period, reduction_factor, brackets,
//! stop_last_trials)`, `("median", grace_period, min_samples_required)` or
//! `("pbt", perturbation_interval, burn_in_period, quantile_fraction)`).
//! `TensorBoardEventFile` writes a trial's TensorBoard events through `oxray-io`.

use oxray_io::tensorboard::EventFileWriter;
use oxray_tune::{
    AshaSpec, Config, Controller, Decision, HyperBandSpec, MedianSpec, PbtSpec, Resources, SchedulerSpec, TrialStatus,
    TuneError,
};
use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use std::path::PathBuf;
use std::sync::Mutex;

fn value_error(e: TuneError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

fn scheduler_from(spec: &Bound<'_, PyAny>) -> PyResult<SchedulerSpec> {
    let kind: String = spec.get_item(0)?.extract()?;
    match kind.as_str() {
        "fifo" => Ok(SchedulerSpec::Fifo),
        "driver" => Ok(SchedulerSpec::Driver),
        "asha" => {
            let (_, max_t, grace_period, reduction_factor, brackets, stop_last_trials): (
                String,
                f64,
                f64,
                f64,
                u32,
                bool,
            ) = spec.extract()?;
            Ok(SchedulerSpec::Asha(AshaSpec { max_t, grace_period, reduction_factor, brackets, stop_last_trials }))
        }
        "median" => {
            let (_, grace_period, min_samples_required): (String, f64, u32) = spec.extract()?;
            Ok(SchedulerSpec::Median(MedianSpec { grace_period, min_samples_required }))
        }
        "pbt" => {
            let (_, perturbation_interval, burn_in_period, quantile_fraction): (String, f64, f64, f64) =
                spec.extract()?;
            Ok(SchedulerSpec::Pbt(PbtSpec { perturbation_interval, burn_in_period, quantile_fraction }))
        }
        "hyperband" => {
            let (_, max_t, reduction_factor, stop_last_trials): (String, f64, f64, bool) = spec.extract()?;
            Ok(SchedulerSpec::HyperBand(HyperBandSpec { max_t, reduction_factor, stop_last_trials }))
        }
        other => Err(PyValueError::new_err(format!(
            "scheduler {other:?} is not one the engine runs; expected fifo, asha, median, pbt or hyperband"
        ))),
    }
}

fn action_tuple(action: oxray_tune::Action) -> (&'static str, u32, bool) {
    match action {
        oxray_tune::Action::Start { trial, restore } => ("start", trial, restore),
        oxray_tune::Action::Grant { trial } => ("grant", trial, false),
    }
}

fn status_from(name: &str) -> PyResult<TrialStatus> {
    Ok(match name {
        "PENDING" => TrialStatus::Pending,
        "RUNNING" => TrialStatus::Running,
        "PAUSED" => TrialStatus::Paused,
        "TERMINATED" => TrialStatus::Terminated,
        "ERROR" => TrialStatus::Error,
        other => return Err(PyValueError::new_err(format!("{other:?} is not a trial status"))),
    })
}

/// The trial controller of one experiment.
#[pyclass(module = "oxray._native", frozen)]
pub(crate) struct TuneController {
    inner: Mutex<Controller>,
}

impl TuneController {
    fn lock(&self) -> PyResult<std::sync::MutexGuard<'_, Controller>> {
        self.inner.lock().map_err(|_| PyRuntimeError::new_err("the Tune controller failed earlier (poisoned lock)"))
    }
}

#[pymethods]
impl TuneController {
    #[new]
    #[pyo3(signature = (capacity, max_concurrent, max_failures, scheduler))]
    fn new(
        capacity: Resources,
        max_concurrent: Option<u32>,
        max_failures: Option<u32>,
        scheduler: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let scheduler = scheduler_from(scheduler)?;
        let controller =
            Controller::new(Config { capacity, max_concurrent, max_failures, scheduler }).map_err(value_error)?;
        Ok(TuneController { inner: Mutex::new(controller) })
    }

    /// A new PENDING trial; its index. `ValueError` when it could never run on this cluster.
    /// `learns_demand`: Tune's default resources, replaced by what Train runs in trials ask for.
    #[pyo3(signature = (resources, learns_demand=false))]
    fn add_trial(&self, resources: Resources, learns_demand: bool) -> PyResult<u32> {
        self.lock()?.add_trial(resources, learns_demand).map_err(value_error)
    }

    /// A trial of a restored experiment: finished ones stay so, the rest come back PENDING.
    #[pyo3(signature = (resources, learns_demand, status, has_checkpoint, failures))]
    fn add_restored_trial(
        &self,
        resources: Resources,
        learns_demand: bool,
        status: &str,
        has_checkpoint: bool,
        failures: u32,
    ) -> PyResult<u32> {
        let status = status_from(status)?;
        self.lock()?.add_restored_trial(resources, learns_demand, status, has_checkpoint, failures).map_err(value_error)
    }

    /// A running trial's Train run asks for `demand`; the waiting runs that may start their workers now.
    fn on_train_demand(&self, trial: u32, demand: Resources) -> PyResult<Vec<u32>> {
        self.lock()?.on_train_demand(trial, demand).map_err(value_error)
    }

    /// What to do now: `("start", trial, restore)`, or `("grant", trial, False)`: a waiting Train run may go.
    fn schedule(&self) -> PyResult<Vec<(&'static str, u32, bool)>> {
        Ok(self.lock()?.schedule().into_iter().map(action_tuple).collect())
    }

    /// A result; the scheduler's decision: `("continue", None)`, `("stop", None)`, `("pause", None)`
    /// (the trial is PAUSED: stop its run), `("exploit", source)` or `("no_checkpoint", source)`
    /// (PBT would clone `source`, which has no checkpoint).
    #[pyo3(signature = (trial, time, reward=None))]
    fn on_result(&self, trial: u32, time: f64, reward: Option<f64>) -> PyResult<(&'static str, Option<u32>)> {
        Ok(match self.lock()?.on_result(trial, time, reward).map_err(value_error)? {
            Decision::Continue => ("continue", None),
            Decision::Stop => ("stop", None),
            Decision::Pause => ("pause", None),
            Decision::Exploit { source } => ("exploit", Some(source)),
            Decision::NoCheckpoint { source } => ("no_checkpoint", Some(source)),
        })
    }

    /// PBT: the trial restarts from the checkpoint the driver copied into it.
    /// `("start", trial, restore)` when the chosen PENDING or PAUSED trial fits now, else None.
    fn start_chosen(&self, trial: u32) -> PyResult<Option<(&'static str, u32, bool)>> {
        let action = self.lock()?.start_chosen(trial).map_err(value_error)?;
        Ok(action.map(action_tuple))
    }

    fn has_room_for(&self, trial: u32) -> PyResult<bool> {
        self.lock()?.has_room_for(trial).map_err(value_error)
    }

    fn pause(&self, trial: u32) -> PyResult<()> {
        self.lock()?.pause(trial).map_err(value_error)
    }

    fn on_exploit(&self, trial: u32) -> PyResult<()> {
        self.lock()?.on_exploit(trial).map_err(value_error)
    }

    fn on_checkpoint(&self, trial: u32) -> PyResult<()> {
        self.lock()?.on_checkpoint(trial).map_err(value_error)
    }

    fn on_ended(&self, trial: u32) -> PyResult<()> {
        self.lock()?.on_ended(trial).map_err(value_error)
    }

    /// Paused trials the scheduler ended since the last call, with their new status.
    fn take_changes(&self) -> PyResult<Vec<(u32, &'static str)>> {
        Ok(self.lock()?.take_changes().into_iter().map(|(trial, status)| (trial, status.as_str())).collect())
    }

    /// The trial failed; its new status (`"PENDING"` for a retry, or `"ERROR"`).
    fn on_failed(&self, trial: u32) -> PyResult<&'static str> {
        Ok(self.lock()?.on_failed(trial).map_err(value_error)?.as_str())
    }

    /// Ends every unfinished trial; the running ones, for the caller to stop.
    fn stop_all(&self) -> PyResult<Vec<u32>> {
        Ok(self.lock()?.stop_all())
    }

    fn status(&self, trial: u32) -> PyResult<&'static str> {
        Ok(self.lock()?.status(trial).map_err(value_error)?.as_str())
    }

    fn failures(&self, trial: u32) -> PyResult<u32> {
        self.lock()?.failures(trial).map_err(value_error)
    }

    fn count(&self, status: &str) -> PyResult<usize> {
        let status = status_from(status)?;
        Ok(self.lock()?.count(status))
    }

    fn all_finished(&self) -> PyResult<bool> {
        Ok(self.lock()?.all_finished())
    }

    fn in_use(&self) -> PyResult<Resources> {
        Ok(self.lock()?.in_use().clone())
    }
}

/// One trial's TensorBoard event file, for `TBXLoggerCallback`: `oxray-io`'s writer, so the driver
/// needs neither tensorboardX nor torch to write it.
#[pyclass]
pub(crate) struct TensorBoardEventFile {
    path: PathBuf,
    writer: Option<EventFileWriter>,
}

impl TensorBoardEventFile {
    fn io_error(&self, op: &str, e: std::io::Error) -> PyErr {
        PyOSError::new_err(format!("{op} TensorBoard event file {}: {e}", self.path.display()))
    }

    fn writer(&mut self) -> PyResult<&mut EventFileWriter> {
        let path = &self.path;
        self.writer
            .as_mut()
            .ok_or_else(|| PyRuntimeError::new_err(format!("TensorBoard event file {} is closed", path.display())))
    }
}

#[pymethods]
impl TensorBoardEventFile {
    /// Creates the file (0600; it must not exist) and writes its version event.
    #[new]
    fn new(path: PathBuf) -> PyResult<Self> {
        let writer = EventFileWriter::create(&path)
            .map_err(|e| PyOSError::new_err(format!("creating TensorBoard event file {}: {e}", path.display())))?;
        Ok(Self { path, writer: Some(writer) })
    }

    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// One event holding these (tag, value) scalars at `step`; buffered until `flush`.
    fn add_scalars(&mut self, step: i64, scalars: Vec<(String, f64)>) -> PyResult<()> {
        let result = self.writer()?.add_scalars(step, scalars);
        result.map_err(|e| self.io_error("writing", e))
    }

    fn flush(&mut self) -> PyResult<()> {
        let result = self.writer()?.flush();
        result.map_err(|e| self.io_error("flushing", e))
    }

    /// Flushes the file; later calls but `close` raise.
    fn close(&mut self) -> PyResult<()> {
        match self.writer.take() {
            Some(writer) => writer.close().map_err(|e| self.io_error("closing", e)),
            None => Ok(()),
        }
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<TuneController>()?;
    m.add_class::<TensorBoardEventFile>()
}
