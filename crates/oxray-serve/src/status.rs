//! Ray Serve 2.60's status model: application, deployment and replica states,
//! spelt as Ray spells them, and the rule that derives an application's status
//! from its deployments'.

/// Ray's `ApplicationStatus`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApplicationStatus {
    NotStarted,
    Deploying,
    DeployFailed,
    Running,
    Unhealthy,
    Deleting,
}

/// Ray's `DeploymentStatus`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeploymentStatus {
    Updating,
    Healthy,
    Unhealthy,
    DeployFailed,
    Upscaling,
    Downscaling,
}

/// Ray's `DeploymentStatusTrigger`: why a deployment is in its status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeploymentStatusTrigger {
    Unspecified,
    ConfigUpdateStarted,
    ConfigUpdateCompleted,
    UpscaleCompleted,
    DownscaleCompleted,
    Autoscaling,
    ReplicaStartupFailed,
    HealthCheckFailed,
    Deleting,
}

/// Ray's `ReplicaState` (the keys of a deployment's `replica_states`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ReplicaState {
    Starting,
    Updating,
    Running,
    Stopping,
}

impl ApplicationStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ApplicationStatus::NotStarted => "NOT_STARTED",
            ApplicationStatus::Deploying => "DEPLOYING",
            ApplicationStatus::DeployFailed => "DEPLOY_FAILED",
            ApplicationStatus::Running => "RUNNING",
            ApplicationStatus::Unhealthy => "UNHEALTHY",
            ApplicationStatus::Deleting => "DELETING",
        }
    }
}

impl DeploymentStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            DeploymentStatus::Updating => "UPDATING",
            DeploymentStatus::Healthy => "HEALTHY",
            DeploymentStatus::Unhealthy => "UNHEALTHY",
            DeploymentStatus::DeployFailed => "DEPLOY_FAILED",
            DeploymentStatus::Upscaling => "UPSCALING",
            DeploymentStatus::Downscaling => "DOWNSCALING",
        }
    }
}

impl DeploymentStatusTrigger {
    pub fn as_str(self) -> &'static str {
        match self {
            DeploymentStatusTrigger::Unspecified => "UNSPECIFIED",
            DeploymentStatusTrigger::ConfigUpdateStarted => "CONFIG_UPDATE_STARTED",
            DeploymentStatusTrigger::ConfigUpdateCompleted => "CONFIG_UPDATE_COMPLETED",
            DeploymentStatusTrigger::UpscaleCompleted => "UPSCALE_COMPLETED",
            DeploymentStatusTrigger::DownscaleCompleted => "DOWNSCALE_COMPLETED",
            DeploymentStatusTrigger::Autoscaling => "AUTOSCALING",
            DeploymentStatusTrigger::ReplicaStartupFailed => "REPLICA_STARTUP_FAILED",
            DeploymentStatusTrigger::HealthCheckFailed => "HEALTH_CHECK_FAILED",
            DeploymentStatusTrigger::Deleting => "DELETING",
        }
    }
}

impl ReplicaState {
    pub fn as_str(self) -> &'static str {
        match self {
            ReplicaState::Starting => "STARTING",
            ReplicaState::Updating => "UPDATING",
            ReplicaState::Running => "RUNNING",
            ReplicaState::Stopping => "STOPPING",
        }
    }
}

/// An application's status and message from its deployments' (Ray's
/// `_determine_app_status`): the worst one decides.
pub fn application_status(
    deployments: &[(&str, DeploymentStatus, DeploymentStatusTrigger)],
) -> (ApplicationStatus, String) {
    let named = |wanted: DeploymentStatus| -> Vec<&str> {
        deployments.iter().filter(|(_, status, _)| *status == wanted).map(|(name, _, _)| *name).collect()
    };
    let failed = named(DeploymentStatus::DeployFailed);
    if !failed.is_empty() {
        return (ApplicationStatus::DeployFailed, format!("Failed to update the deployments {failed:?}."));
    }
    let unhealthy = named(DeploymentStatus::Unhealthy);
    if !unhealthy.is_empty() {
        return (ApplicationStatus::Unhealthy, format!("The deployments {unhealthy:?} are UNHEALTHY."));
    }
    let deploying = deployments.iter().any(|(_, status, trigger)| {
        *status == DeploymentStatus::Updating
            || (matches!(status, DeploymentStatus::Upscaling | DeploymentStatus::Downscaling)
                && *trigger == DeploymentStatusTrigger::ConfigUpdateStarted)
    });
    if deploying {
        return (ApplicationStatus::Deploying, String::new());
    }
    (ApplicationStatus::Running, String::new())
}

#[cfg(test)]
mod tests {
    use super::{ApplicationStatus as A, DeploymentStatus as D, DeploymentStatusTrigger as T, application_status};

    #[test]
    fn the_worst_deployment_decides_the_applications_status() {
        let healthy = ("a", D::Healthy, T::ConfigUpdateCompleted);
        assert_eq!(application_status(&[healthy]).0, A::Running);
        // Autoscaling keeps an application RUNNING; a config change's scaling makes it DEPLOYING.
        assert_eq!(application_status(&[healthy, ("b", D::Upscaling, T::Autoscaling)]).0, A::Running);
        assert_eq!(application_status(&[healthy, ("b", D::Upscaling, T::ConfigUpdateStarted)]).0, A::Deploying);
        assert_eq!(application_status(&[healthy, ("b", D::Updating, T::ConfigUpdateStarted)]).0, A::Deploying);
        let (status, message) = application_status(&[("b", D::Unhealthy, T::HealthCheckFailed), healthy]);
        assert_eq!((status, message.as_str()), (A::Unhealthy, "The deployments [\"b\"] are UNHEALTHY."));
        let (status, message) = application_status(&[
            ("b", D::Unhealthy, T::HealthCheckFailed),
            ("c", D::DeployFailed, T::ReplicaStartupFailed),
        ]);
        assert_eq!((status, message.as_str()), (A::DeployFailed, "Failed to update the deployments [\"c\"]."));
    }
}
