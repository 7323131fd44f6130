//! `oxray._native`'s Serve controller: `ServeController` wraps `oxray-serve`'s
//! controller (applications, deployments, replicas, statuses) for the Serve
//! controller actor's control loop in `oxray/serve/_private/controller.py`.
//! A deployment's settings cross as a dict (Ray's option names, times in
//! seconds); actions as tuples; statuses as Ray's strings.

use oxray_serve::{
    Action, AdoptedReplica, Aggregation, AppStatusReport, AutoscalingConfig, Controller, DeploymentSpec, Replicas,
    ServeError,
};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyDictMethods};
use std::collections::BTreeMap;
use std::sync::Mutex;

fn value_error(e: ServeError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

fn ms(seconds: f64, option: &str) -> PyResult<u64> {
    if !(seconds.is_finite() && seconds >= 0.0) {
        return Err(PyValueError::new_err(format!("{option}={seconds}: expected 0 or more seconds")));
    }
    Ok((seconds * 1000.0).round() as u64)
}

/// `dict[key]` when set and not None.
fn set_item<'py>(dict: &Bound<'py, PyDict>, key: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
    Ok(dict.get_item(key)?.filter(|value| !value.is_none()))
}

fn get_f64(dict: &Bound<'_, PyDict>, key: &str, default: f64) -> PyResult<f64> {
    set_item(dict, key)?.map_or(Ok(default), |v| v.extract::<f64>())
}

fn get_u32(dict: &Bound<'_, PyDict>, key: &str, default: u32) -> PyResult<u32> {
    set_item(dict, key)?.map_or(Ok(default), |v| v.extract::<u32>())
}

fn get_string(dict: &Bound<'_, PyDict>, key: &str, default: &str) -> PyResult<String> {
    set_item(dict, key)?.map_or(Ok(default.to_string()), |v| v.extract::<String>())
}

fn autoscaling_from(config: &Bound<'_, PyDict>) -> PyResult<AutoscalingConfig> {
    let base = AutoscalingConfig::default();
    let aggregation = match get_string(config, "aggregation_function", "mean")?.as_str() {
        "mean" => Aggregation::Mean,
        "max" => Aggregation::Max,
        "min" => Aggregation::Min,
        other => {
            return Err(PyValueError::new_err(format!(
                "aggregation_function={other:?}: expected 'mean', 'max' or 'min'"
            )));
        }
    };
    let to_zero = set_item(config, "downscale_to_zero_delay_s")?.map(|v| v.extract::<f64>()).transpose()?;
    Ok(AutoscalingConfig {
        min_replicas: get_u32(config, "min_replicas", base.min_replicas)?,
        initial_replicas: set_item(config, "initial_replicas")?.map(|v| v.extract::<u32>()).transpose()?,
        max_replicas: get_u32(config, "max_replicas", base.max_replicas)?,
        target_ongoing_requests: get_f64(config, "target_ongoing_requests", base.target_ongoing_requests)?,
        look_back_period_ms: ms(get_f64(config, "look_back_period_s", 30.0)?, "look_back_period_s")?,
        upscaling_factor: get_f64(config, "upscaling_factor", base.upscaling_factor)?,
        downscaling_factor: get_f64(config, "downscaling_factor", base.downscaling_factor)?,
        upscale_delay_ms: ms(get_f64(config, "upscale_delay_s", 30.0)?, "upscale_delay_s")?,
        downscale_delay_ms: ms(get_f64(config, "downscale_delay_s", 600.0)?, "downscale_delay_s")?,
        downscale_to_zero_delay_ms: to_zero.map(|s| ms(s, "downscale_to_zero_delay_s")).transpose()?,
        aggregation,
    })
}

/// A deployment's settings from `{"code_version", "config_version", "num_replicas" | "autoscaling_config", ...}`.
fn spec_from(spec: &Bound<'_, PyDict>) -> PyResult<DeploymentSpec> {
    let code_version: String = get_string(spec, "code_version", "")?;
    let replicas = match spec.get_item("autoscaling_config")? {
        Some(config) if !config.is_none() => Replicas::Auto(autoscaling_from(config.cast::<PyDict>()?)?),
        _ => Replicas::Fixed(get_u32(spec, "num_replicas", 1)?),
    };
    let base = DeploymentSpec::new(&code_version, replicas);
    Ok(DeploymentSpec {
        config_version: get_string(spec, "config_version", "")?,
        rolling_update_percentage: get_f64(spec, "rolling_update_percentage", base.rolling_update_percentage)?,
        max_surge_percent: get_f64(spec, "max_surge_percent", base.max_surge_percent)?,
        health_check_period_ms: ms(get_f64(spec, "health_check_period_s", 10.0)?, "health_check_period_s")?,
        health_check_timeout_ms: ms(get_f64(spec, "health_check_timeout_s", 30.0)?, "health_check_timeout_s")?,
        graceful_shutdown_timeout_ms: ms(
            get_f64(spec, "graceful_shutdown_timeout_s", 20.0)?,
            "graceful_shutdown_timeout_s",
        )?,
        max_constructor_retry_count: get_u32(spec, "max_constructor_retry_count", base.max_constructor_retry_count)?,
        ..base
    })
}

/// Each `(name, settings)` of an application's deployments as the engine's `DeploymentSpec`.
fn specs_from(deployments: &[(String, Bound<'_, PyDict>)]) -> PyResult<Vec<(String, DeploymentSpec)>> {
    deployments.iter().map(|(name, spec)| Ok((name.clone(), spec_from(spec)?))).collect()
}

/// `(kind, app, deployment, replica, detail)`: detail is the code and config versions for
/// `"start"`, the config version for `"reconfigure"`, the graceful timeout (s) for `"stop"`.
type ActionTuple = (&'static str, String, String, String, Option<(String, String)>, Option<f64>);

/// `(route_prefix, app, ingress deployment, serving replicas)`.
type RouteTuple = (Option<String>, String, String, Vec<String>);

fn action_tuple(action: Action) -> ActionTuple {
    match action {
        Action::StartReplica { app, deployment, replica, code_version, config_version } => {
            ("start", app, deployment, replica, Some((code_version, config_version)), None)
        }
        Action::Reconfigure { app, deployment, replica, config_version } => {
            ("reconfigure", app, deployment, replica, Some((String::new(), config_version)), None)
        }
        Action::CheckHealth { app, deployment, replica } => ("check_health", app, deployment, replica, None, None),
        Action::StopReplica { app, deployment, replica, graceful_timeout_ms } => {
            ("stop", app, deployment, replica, None, Some(graceful_timeout_ms as f64 / 1000.0))
        }
        Action::KillReplica { app, deployment, replica } => ("kill", app, deployment, replica, None, None),
    }
}

fn status_dict<'py>(py: Python<'py>, report: &AppStatusReport) -> PyResult<Bound<'py, PyDict>> {
    let app = PyDict::new(py);
    app.set_item("name", &report.name)?;
    app.set_item("status", report.status.as_str())?;
    app.set_item("message", &report.message)?;
    app.set_item("route_prefix", &report.route_prefix)?;
    app.set_item("last_deployed_time_s", report.last_deployed_ms as f64 / 1000.0)?;
    let deployments = PyDict::new(py);
    for d in &report.deployments {
        let entry = PyDict::new(py);
        entry.set_item("status", d.status.as_str())?;
        entry.set_item("status_trigger", d.trigger.as_str())?;
        entry.set_item("message", &d.message)?;
        entry.set_item("target_num_replicas", d.target_replicas)?;
        let states: BTreeMap<&str, u32> = d.replica_states.iter().map(|(s, n)| (s.as_str(), *n)).collect();
        entry.set_item("replica_states", states)?;
        deployments.set_item(&d.name, entry)?;
    }
    app.set_item("deployments", deployments)?;
    Ok(app)
}

/// The Serve controller's state: what to run, and what runs.
#[pyclass(module = "oxray._native", frozen)]
pub(crate) struct ServeController {
    inner: Mutex<Controller>,
}

impl ServeController {
    fn lock(&self) -> PyResult<std::sync::MutexGuard<'_, Controller>> {
        self.inner.lock().map_err(|_| PyRuntimeError::new_err("the Serve controller failed earlier (poisoned lock)"))
    }
}

#[pymethods]
impl ServeController {
    #[new]
    fn new() -> Self {
        ServeController { inner: Mutex::new(Controller::new()) }
    }

    /// Deploys application `name`: `deployments` as `(name, settings)`; `ValueError` naming a bad
    /// setting or a route prefix another application has.
    #[pyo3(signature = (name, route_prefix, ingress, deployments, now_ms))]
    fn deploy_app(
        &self,
        name: &str,
        route_prefix: Option<&str>,
        ingress: &str,
        deployments: Vec<(String, Bound<'_, PyDict>)>,
        now_ms: u64,
    ) -> PyResult<()> {
        let specs = specs_from(&deployments)?;
        self.lock()?.deploy_app(name, route_prefix, ingress, specs, now_ms).map_err(value_error)
    }

    /// Takes back application `name` from the controller's checkpoint, after a head restart:
    /// `adopted` are the replicas found running, as `(deployment, replica, code_version,
    /// config_version)`; they serve at once, and only what the target lacks is started.
    #[pyo3(signature = (name, route_prefix, ingress, deployments, adopted, now_ms))]
    fn restore_app(
        &self,
        name: &str,
        route_prefix: Option<&str>,
        ingress: &str,
        deployments: Vec<(String, Bound<'_, PyDict>)>,
        adopted: Vec<(String, String, String, String)>,
        now_ms: u64,
    ) -> PyResult<()> {
        let specs = specs_from(&deployments)?;
        let adopted = adopted
            .into_iter()
            .map(|(deployment, replica, code_version, config_version)| AdoptedReplica {
                deployment,
                replica,
                code_version,
                config_version,
            })
            .collect();
        self.lock()?.restore_app(name, route_prefix, ingress, specs, adopted, now_ms).map_err(value_error)
    }

    fn fail_app(&self, name: &str, message: &str, now_ms: u64) -> PyResult<()> {
        self.lock()?.fail_app(name, message, now_ms);
        Ok(())
    }

    fn delete_app(&self, name: &str, now_ms: u64) -> PyResult<()> {
        self.lock()?.delete_app(name, now_ms);
        Ok(())
    }

    fn replica_started(&self, app: &str, deployment: &str, replica: &str, now_ms: u64) -> PyResult<()> {
        self.lock()?.replica_started(app, deployment, replica, now_ms);
        Ok(())
    }

    fn replica_reconfigured(&self, app: &str, deployment: &str, replica: &str, now_ms: u64) -> PyResult<()> {
        self.lock()?.replica_reconfigured(app, deployment, replica, now_ms);
        Ok(())
    }

    fn replica_start_failed(
        &self,
        app: &str,
        deployment: &str,
        replica: &str,
        error: &str,
        now_ms: u64,
    ) -> PyResult<()> {
        self.lock()?.replica_start_failed(app, deployment, replica, error, now_ms);
        Ok(())
    }

    fn replica_died(&self, app: &str, deployment: &str, replica: &str, reason: &str, now_ms: u64) -> PyResult<()> {
        self.lock()?.replica_died(app, deployment, replica, reason, now_ms);
        Ok(())
    }

    fn replica_stopped(&self, app: &str, deployment: &str, replica: &str, now_ms: u64) -> PyResult<()> {
        self.lock()?.replica_stopped(app, deployment, replica, now_ms);
        Ok(())
    }

    #[pyo3(signature = (app, deployment, replica, healthy, error, now_ms))]
    fn health_checked(
        &self,
        app: &str,
        deployment: &str,
        replica: &str,
        healthy: bool,
        error: &str,
        now_ms: u64,
    ) -> PyResult<()> {
        self.lock()?.health_checked(app, deployment, replica, healthy, error, now_ms);
        Ok(())
    }

    fn record_requests(&self, app: &str, deployment: &str, source: &str, requests: f64, now_ms: u64) -> PyResult<()> {
        self.lock()?.record_requests(app, deployment, source, requests, now_ms);
        Ok(())
    }

    fn tick(&self, now_ms: u64) -> PyResult<()> {
        self.lock()?.tick(now_ms);
        Ok(())
    }

    /// The actions decided since the last call, in order (see `ActionTuple`).
    fn take_actions(&self) -> PyResult<Vec<ActionTuple>> {
        Ok(self.lock()?.take_actions().into_iter().map(action_tuple).collect())
    }

    /// Every application's status, as dicts with Ray's field names and spellings.
    fn status<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let reports = self.lock()?.status();
        reports.iter().map(|report| status_dict(py, report)).collect()
    }

    /// `(route_prefix or None, app, ingress deployment, serving replicas)` for each application.
    fn routes(&self) -> PyResult<Vec<RouteTuple>> {
        Ok(self.lock()?.routes())
    }

    /// The replicas of `app`'s `deployment` that take requests now.
    fn serving(&self, app: &str, deployment: &str) -> PyResult<Vec<String>> {
        Ok(self.lock()?.serving(app, deployment))
    }
}

/// Checks a Serve config (Ray's `ServeDeploySchema`, as JSON) as the head's REST API does;
/// `ValueError` names what is wrong or not supported.
#[pyfunction]
fn check_serve_config(config_json: &str) -> PyResult<()> {
    let config: serde_json::Value =
        serde_json::from_str(config_json).map_err(|e| PyValueError::new_err(format!("the config is not JSON: {e}")))?;
    oxray_http::serve_api::check_config(&config).map_err(PyValueError::new_err)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ServeController>()?;
    m.add_function(wrap_pyfunction!(check_serve_config, m)?)
}
