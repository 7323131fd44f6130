//! The Serve controller: applications (route prefix, ingress, deployments),
//! deploys and deletes, and the runtime's events, routed to each deployment's
//! replica logic. No I/O: the runtime calls [`Controller::tick`] on its control
//! loop (Ray's is every 0.1 s) and after events, then carries out
//! [`Controller::take_actions`].

use crate::config::DeploymentSpec;
use crate::deployment::{Deployment, ReplicaAction};
use crate::error::ServeError;
use crate::status::{ApplicationStatus, DeploymentStatus, DeploymentStatusTrigger, ReplicaState, application_status};
use std::collections::BTreeMap;

/// What the runtime does next, for one replica of `app`'s `deployment`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Start the replica's actor with this code, then its `reconfigure` with this config;
    /// report `replica_started` or `replica_start_failed`.
    StartReplica { app: String, deployment: String, replica: String, code_version: String, config_version: String },
    /// Call the running replica's `reconfigure` with this config; report `replica_reconfigured`.
    Reconfigure { app: String, deployment: String, replica: String, config_version: String },
    /// Run its health check; report `health_checked`.
    CheckHealth { app: String, deployment: String, replica: String },
    /// Take it out of routing, let it finish its requests and stop it within the timeout;
    /// report `replica_stopped`.
    StopReplica { app: String, deployment: String, replica: String, graceful_timeout_ms: u64 },
    /// It did not stop in time: kill its process; report `replica_stopped`.
    KillReplica { app: String, deployment: String, replica: String },
}

/// A deployment as `serve.status()` shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct DeploymentStatusReport {
    pub name: String,
    pub status: DeploymentStatus,
    pub trigger: DeploymentStatusTrigger,
    pub message: String,
    pub target_replicas: u32,
    pub replica_states: BTreeMap<ReplicaState, u32>,
}

/// An application as `serve.status()` shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct AppStatusReport {
    pub name: String,
    pub status: ApplicationStatus,
    pub message: String,
    pub route_prefix: Option<String>,
    pub last_deployed_ms: u64,
    pub deployments: Vec<DeploymentStatusReport>,
}

struct App {
    route_prefix: Option<String>,
    ingress: String,
    deployments: BTreeMap<String, Deployment>,
    /// The application could not be built (its import path, its builder): its traceback.
    build_error: Option<String>,
    deleting: bool,
    last_deployed_ms: u64,
}

impl App {
    fn new(now_ms: u64) -> Self {
        App {
            route_prefix: None,
            ingress: String::new(),
            deployments: BTreeMap::new(),
            build_error: None,
            deleting: false,
            last_deployed_ms: now_ms,
        }
    }
}

/// A replica found running when a controller starts again (after a head restart), with the
/// versions it runs: taken back instead of started anew.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdoptedReplica {
    pub deployment: String,
    pub replica: String,
    pub code_version: String,
    pub config_version: String,
}

#[derive(Default)]
pub struct Controller {
    apps: BTreeMap<String, App>,
    actions: Vec<Action>,
}

impl Controller {
    pub fn new() -> Self {
        Controller::default()
    }

    /// Deploys application `name` (new, or replacing its deployments: those it no longer has
    /// are deleted). `route_prefix` None serves no HTTP (handles only).
    pub fn deploy_app(
        &mut self,
        name: &str,
        route_prefix: Option<&str>,
        ingress: &str,
        deployments: Vec<(String, DeploymentSpec)>,
        now_ms: u64,
    ) -> Result<(), ServeError> {
        self.place_app(name, route_prefix, ingress, deployments, now_ms)?;
        self.tick(now_ms);
        Ok(())
    }

    /// A controller started again takes back application `name` from its checkpoint: deployed
    /// as `deploy_app` would, with the `adopted` replicas (those still running) serving at once
    /// and health-checked now; only what the target still lacks is started. An adopted replica
    /// of an older code version is rolled out as on a redeploy, one of a deployment the
    /// application no longer has is ignored (the runtime stops its actor).
    pub fn restore_app(
        &mut self,
        name: &str,
        route_prefix: Option<&str>,
        ingress: &str,
        deployments: Vec<(String, DeploymentSpec)>,
        adopted: Vec<AdoptedReplica>,
        now_ms: u64,
    ) -> Result<(), ServeError> {
        self.place_app(name, route_prefix, ingress, deployments, now_ms)?;
        if let Some(app) = self.apps.get_mut(name) {
            for replica in adopted {
                if let Some(deployment) = app.deployments.get_mut(&replica.deployment) {
                    deployment.adopt(&replica.replica, &replica.code_version, &replica.config_version, now_ms);
                }
            }
        }
        self.tick(now_ms);
        Ok(())
    }

    /// `deploy_app` up to the tick: the application's settings and deployments in place.
    fn place_app(
        &mut self,
        name: &str,
        route_prefix: Option<&str>,
        ingress: &str,
        deployments: Vec<(String, DeploymentSpec)>,
        now_ms: u64,
    ) -> Result<(), ServeError> {
        if let Some(prefix) = route_prefix {
            if !prefix.starts_with('/') || (prefix.len() > 1 && prefix.ends_with('/')) {
                return Err(ServeError::invalid(
                    "route_prefix",
                    prefix,
                    "a path starting with '/' and not ending with one",
                ));
            }
            if let Some((taken_by, _)) = self
                .apps
                .iter()
                .find(|(other, app)| *other != name && !app.deleting && app.route_prefix.as_deref() == Some(prefix))
            {
                return Err(ServeError::RoutePrefixTaken {
                    prefix: prefix.to_string(),
                    app: name.to_string(),
                    taken_by: taken_by.clone(),
                });
            }
        }
        if !deployments.iter().any(|(deployment, _)| deployment == ingress) {
            return Err(ServeError::UnknownIngress { app: name.to_string(), deployment: ingress.to_string() });
        }
        for (_, spec) in &deployments {
            spec.check()?;
        }
        let app = self.apps.entry(name.to_string()).or_insert_with(|| App::new(now_ms));
        app.route_prefix = route_prefix.map(str::to_string);
        app.ingress = ingress.to_string();
        app.build_error = None;
        app.deleting = false;
        app.last_deployed_ms = now_ms;
        let names: Vec<String> = deployments.iter().map(|(n, _)| n.clone()).collect();
        for (deployment_name, deployment) in &mut app.deployments {
            if !names.contains(deployment_name) {
                deployment.delete();
            }
        }
        for (deployment_name, spec) in deployments {
            match app.deployments.get_mut(&deployment_name) {
                Some(deployment) => deployment.update(spec),
                None => {
                    let deployment = Deployment::new(&format!("{name}#{deployment_name}"), spec);
                    app.deployments.insert(deployment_name, deployment);
                }
            }
        }
        Ok(())
    }

    /// Application `name` could not be built (`message`: the import error's traceback): it is
    /// DEPLOY_FAILED; what it ran before keeps serving, and the other applications are untouched.
    pub fn fail_app(&mut self, name: &str, message: &str, now_ms: u64) {
        let app = self.apps.entry(name.to_string()).or_insert_with(|| App::new(now_ms));
        app.build_error = Some(message.to_string());
        app.last_deployed_ms = now_ms;
    }

    /// Deletes application `name` (an unknown name is no error, as in Ray): its replicas stop,
    /// then it is gone from the status.
    pub fn delete_app(&mut self, name: &str, now_ms: u64) {
        if let Some(app) = self.apps.get_mut(name) {
            app.deleting = true;
            for deployment in app.deployments.values_mut() {
                deployment.delete();
            }
        }
        self.tick(now_ms);
    }

    // The runtime's reports.

    pub fn replica_started(&mut self, app: &str, deployment: &str, replica: &str, now_ms: u64) {
        self.with(app, deployment, now_ms, |d| d.replica_started(replica, now_ms));
    }

    pub fn replica_reconfigured(&mut self, app: &str, deployment: &str, replica: &str, now_ms: u64) {
        self.with(app, deployment, now_ms, |d| d.replica_reconfigured(replica));
    }

    pub fn replica_start_failed(&mut self, app: &str, deployment: &str, replica: &str, error: &str, now_ms: u64) {
        self.with(app, deployment, now_ms, |d| d.replica_start_failed(replica, error));
    }

    pub fn replica_died(&mut self, app: &str, deployment: &str, replica: &str, reason: &str, now_ms: u64) {
        self.with(app, deployment, now_ms, |d| d.replica_died(replica, reason));
    }

    pub fn replica_stopped(&mut self, app: &str, deployment: &str, replica: &str, now_ms: u64) {
        self.with(app, deployment, now_ms, |d| d.replica_stopped(replica));
    }

    pub fn health_checked(
        &mut self,
        app: &str,
        deployment: &str,
        replica: &str,
        healthy: bool,
        error: &str,
        now_ms: u64,
    ) {
        self.with(app, deployment, now_ms, |d| d.health_checked(replica, healthy, error));
    }

    /// A handle's or replica's running plus queued requests, for the autoscaler.
    pub fn record_requests(&mut self, app: &str, deployment: &str, source: &str, requests: f64, now_ms: u64) {
        if let Some(d) = self.apps.get_mut(app).and_then(|a| a.deployments.get_mut(deployment)) {
            d.record_requests(source, requests, now_ms);
        }
    }

    fn with(&mut self, app: &str, deployment: &str, now_ms: u64, event: impl FnOnce(&mut Deployment)) {
        if let Some(d) = self.apps.get_mut(app).and_then(|a| a.deployments.get_mut(deployment)) {
            event(d);
            self.tick(now_ms);
        }
    }

    /// One pass of the control loop: every deployment toward its target, health checks due,
    /// autoscaling decisions; deleted deployments and applications whose replicas are all
    /// gone are forgotten.
    pub fn tick(&mut self, now_ms: u64) {
        let mut replica_actions = Vec::new();
        for (app_name, app) in &mut self.apps {
            for (deployment_name, deployment) in &mut app.deployments {
                deployment.reconcile(now_ms, &mut replica_actions);
                for action in replica_actions.drain(..) {
                    self.actions.push(for_replica(app_name, deployment_name, action));
                }
            }
            app.deployments.retain(|_, d| !d.is_gone());
        }
        self.apps.retain(|_, app| !(app.deleting && app.deployments.is_empty()));
    }

    /// The actions decided since the last call, in order.
    pub fn take_actions(&mut self) -> Vec<Action> {
        std::mem::take(&mut self.actions)
    }

    /// Each application's status, by name.
    pub fn status(&self) -> Vec<AppStatusReport> {
        self.apps
            .iter()
            .map(|(name, app)| {
                let deployments: Vec<DeploymentStatusReport> = app
                    .deployments
                    .iter()
                    .map(|(deployment_name, d)| {
                        let (status, trigger, message) = d.status();
                        DeploymentStatusReport {
                            name: deployment_name.clone(),
                            status,
                            trigger,
                            message: message.to_string(),
                            target_replicas: d.target(),
                            replica_states: d.replica_states(),
                        }
                    })
                    .collect();
                let (status, message) = if app.deleting {
                    (ApplicationStatus::Deleting, String::new())
                } else if let Some(error) = &app.build_error {
                    (ApplicationStatus::DeployFailed, error.clone())
                } else {
                    let summary: Vec<(&str, DeploymentStatus, DeploymentStatusTrigger)> =
                        deployments.iter().map(|d| (d.name.as_str(), d.status, d.trigger)).collect();
                    application_status(&summary)
                };
                AppStatusReport {
                    name: name.clone(),
                    status,
                    message,
                    route_prefix: app.route_prefix.clone(),
                    last_deployed_ms: app.last_deployed_ms,
                    deployments,
                }
            })
            .collect()
    }

    /// The replicas of `app`'s `deployment` that take requests now (none if there is no such deployment).
    pub fn serving(&self, app: &str, deployment: &str) -> Vec<String> {
        self.apps
            .get(app)
            .filter(|a| !a.deleting)
            .and_then(|a| a.deployments.get(deployment))
            .map(|d| d.serving())
            .unwrap_or_default()
    }

    /// The proxies' routes: (route prefix, or None for an application HTTP does not reach,
    /// application, its ingress deployment, the replicas serving it).
    pub fn routes(&self) -> Vec<(Option<String>, String, String, Vec<String>)> {
        self.apps
            .iter()
            .filter(|(_, app)| !app.deleting)
            .filter_map(|(name, app)| {
                // An application that failed to build has no ingress to route to.
                let replicas = app.deployments.get(&app.ingress)?.serving();
                Some((app.route_prefix.clone(), name.clone(), app.ingress.clone(), replicas))
            })
            .collect()
    }
}

fn for_replica(app: &str, deployment: &str, action: ReplicaAction) -> Action {
    let (app, deployment) = (app.to_string(), deployment.to_string());
    match action {
        ReplicaAction::Start { replica, code_version, config_version } => {
            Action::StartReplica { app, deployment, replica, code_version, config_version }
        }
        ReplicaAction::Reconfigure { replica, config_version } => {
            Action::Reconfigure { app, deployment, replica, config_version }
        }
        ReplicaAction::CheckHealth { replica } => Action::CheckHealth { app, deployment, replica },
        ReplicaAction::Stop { replica, graceful_timeout_ms } => {
            Action::StopReplica { app, deployment, replica, graceful_timeout_ms }
        }
        ReplicaAction::Kill { replica } => Action::KillReplica { app, deployment, replica },
    }
}

#[cfg(test)]
mod tests;
