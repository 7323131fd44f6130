//! An `OxrayJob`'s reconcile step as a pure function: the job, its cluster's
//! state and what the Jobs API said in; the cluster to make, the submission
//! to send, the cluster to delete and the job's new status out.
//!
//! The deployment goes Initializing (cluster not ready) → Running (submitted)
//! → Complete or Failed (the job ended); with `shutdownAfterJobFinishes` a
//! cluster made for the job is deleted `ttlSecondsAfterFinished` after that.

use crate::crd::{OxrayCluster, OxrayJob, OxrayJobStatus};
use crate::error::{HeadApiError, SpecError};
use crate::head_api::JobState;
use oxray_rest::JobStatus;
use serde_json::{Value, json};

/// Cluster selector keys naming an existing cluster (oxray's and KubeRay's).
pub(crate) const SELECTOR_KEYS: &[&str] = &["oxray.io/cluster", "ray.io/cluster"];

/// The job's cluster as observed.
#[derive(Clone, Debug, Default)]
pub struct ClusterView {
    pub exists: bool,
    /// `status.state` is `ready`.
    pub ready: bool,
    /// `status.state` is `failed`, with the reason.
    pub failed: Option<String>,
    pub dashboard_url: Option<String>,
}

/// What the operator saw for the job.
#[derive(Debug, Default)]
pub struct JobObserved {
    pub cluster: ClusterView,
    /// The Jobs API's answer about the submitted job, when asked.
    pub job: Option<Result<Option<JobState>, HeadApiError>>,
    /// Seconds since the epoch.
    pub now_s: i64,
}

/// What to do.
#[derive(Clone, Debug, Default)]
pub struct JobPlan {
    /// The cluster to make for the job (owned by it).
    pub create_cluster: Option<OxrayCluster>,
    /// The Jobs API submission to send to the cluster's head.
    pub submit: Option<Value>,
    /// Delete the job's own cluster now.
    pub delete_cluster: bool,
    pub status: OxrayJobStatus,
}

/// The cluster the job runs on, and whether the job owns it.
pub fn cluster_of(job: &OxrayJob) -> Result<(String, bool), SpecError> {
    let name = job.metadata.name.clone().unwrap_or_default();
    if job.spec.ray_cluster_spec.is_some() {
        return Ok((format!("{name}-cluster"), true));
    }
    for key in SELECTOR_KEYS {
        if let Some(cluster) = job.spec.cluster_selector.get(*key) {
            return Ok((cluster.clone(), false));
        }
    }
    Err(SpecError::NoCluster)
}

/// The submission id: `spec.jobId`, else the job's name and uid (unique per resource).
pub fn job_id_of(job: &OxrayJob) -> String {
    job.spec.job_id.clone().unwrap_or_else(|| {
        let uid = job.metadata.uid.clone().unwrap_or_default();
        let short: String = uid.chars().filter(|c| c.is_ascii_alphanumeric()).take(8).collect();
        format!("{}-{short}", job.metadata.name.clone().unwrap_or_default())
    })
}

fn rfc3339(now_s: i64) -> String {
    jiff::Timestamp::from_second(now_s).map(|t| t.to_string()).unwrap_or_default()
}

/// The reconcile step.
pub fn plan(job: &OxrayJob, observed: &JobObserved) -> JobPlan {
    let previous = job.status.clone().unwrap_or_default();
    let mut status = previous.clone();
    status.observed_generation = job.metadata.generation;
    // The end time starts the clock of `ttlSecondsAfterFinished`.
    let fail = |mut status: OxrayJobStatus, message: String| JobPlan {
        status: {
            status.job_deployment_status = Some("Failed".to_string());
            status.message = Some(message);
            status.end_time.get_or_insert_with(|| rfc3339(observed.now_s));
            status
        },
        ..Default::default()
    };
    if let Err(error) = check(job) {
        return fail(status, error.to_string());
    }
    let (cluster_name, owned) = match cluster_of(job) {
        Ok(c) => c,
        Err(error) => return fail(status, error.to_string()),
    };
    status.ray_cluster_name = Some(cluster_name.clone());
    if previous.finished() {
        let mut plan = JobPlan { status, ..Default::default() };
        let shutdown = owned && job.spec.shutdown_after_job_finishes.unwrap_or(false);
        if shutdown && observed.cluster.exists {
            let ended_s = previous
                .end_time
                .as_deref()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .map_or(observed.now_s, |t| t.as_second());
            let ttl = i64::from(job.spec.ttl_seconds_after_finished.unwrap_or(0));
            if observed.now_s >= ended_s + ttl {
                plan.delete_cluster = true;
                plan.status.cluster_deleted = Some(true);
            }
        }
        return plan;
    }

    if !observed.cluster.exists {
        if owned {
            let mut plan = JobPlan { status, ..Default::default() };
            let spec = job.spec.ray_cluster_spec.clone().unwrap_or_default();
            let mut cluster = OxrayCluster::new(&cluster_name, spec);
            cluster.metadata.namespace = job.metadata.namespace.clone();
            cluster.metadata.owner_references = kube::Resource::controller_owner_ref(job, &()).map(|o| vec![o]);
            plan.create_cluster = Some(cluster);
            plan.status.job_deployment_status = Some("Initializing".to_string());
            plan.status.message = Some(format!("creating cluster {cluster_name}"));
            return plan;
        }
        if previous.job_id.is_none() {
            status.job_deployment_status = Some("Initializing".to_string());
            status.message = Some(format!("waiting for cluster {cluster_name}, which does not exist"));
            return JobPlan { status, ..Default::default() };
        }
        return fail(status, format!("cluster {cluster_name} is gone while the job was running"));
    }
    if let Some(reason) = &observed.cluster.failed {
        return fail(status, format!("cluster {cluster_name} failed: {reason}"));
    }
    // Submitted once the whole cluster is ready; then followed whatever its workers do (an autoscaling
    // cluster is not `ready` while workers it added start).
    if previous.job_id.is_none() {
        if !observed.cluster.ready {
            status.job_deployment_status = Some("Initializing".to_string());
            status.message = Some(format!("waiting for cluster {cluster_name} to be ready"));
            return JobPlan { status, ..Default::default() };
        }
        status.dashboard_url = observed.cluster.dashboard_url.clone();
        let id = job_id_of(job);
        let submission = match submission(job, &id) {
            Ok(s) => s,
            Err(error) => return fail(status, error.to_string()),
        };
        status.job_id = Some(id);
        status.job_status = Some(JobStatus::Pending.as_str().to_string());
        status.job_deployment_status = Some("Running".to_string());
        status.message = Some("submitted".to_string());
        return JobPlan { submit: Some(submission), status, ..Default::default() };
    }

    match &observed.job {
        None => {}
        Some(Err(error)) => status.message = Some(error.job_unread_message()),
        Some(Ok(None)) => {
            status.job_deployment_status = Some("Failed".to_string());
            status.message =
                Some(format!("the head no longer knows job {}", previous.job_id.clone().unwrap_or_default()));
            status.end_time = Some(rfc3339(observed.now_s));
        }
        Some(Ok(Some(state))) => {
            status.job_status = Some(state.status.as_str().to_string());
            status.message = Some(state.message.clone());
            let deployment = match state.status {
                JobStatus::Succeeded => Some("Complete"),
                JobStatus::Failed | JobStatus::Stopped => Some("Failed"),
                JobStatus::Pending | JobStatus::Running => None,
            };
            if let Some(d) = deployment {
                status.job_deployment_status = Some(d.to_string());
                status.end_time = Some(rfc3339(observed.now_s));
            }
        }
    }
    JobPlan { status, ..Default::default() }
}

/// Fields of KubeRay's RayJob that the operator refuses by name.
fn check(job: &OxrayJob) -> Result<(), SpecError> {
    crate::spec::refuse_unknown("spec", &job.spec.unknown)?;
    if job.spec.entrypoint.trim().is_empty() {
        return Err(SpecError::EmptyEntrypoint);
    }
    if let Some(mode) = &job.spec.submission_mode
        && mode != "HTTPMode"
    {
        return Err(SpecError::UnsupportedSubmissionMode(mode.clone()));
    }
    if job.spec.submitter_pod_template.is_some() {
        return Err(SpecError::SubmitterPodTemplate);
    }
    if job.spec.ray_cluster_spec.is_some() && !job.spec.cluster_selector.is_empty() {
        return Err(SpecError::TwoClusters);
    }
    Ok(())
}

/// The Jobs API request body.
fn submission(job: &OxrayJob, id: &str) -> Result<Value, SpecError> {
    let mut body = json!({"entrypoint": job.spec.entrypoint, "submission_id": id});
    if let Some(yaml) = &job.spec.runtime_env_yaml {
        let env: Value = serde_saphyr::from_str(yaml).map_err(SpecError::RuntimeEnvNotYaml)?;
        if !(env.is_object() || env.is_null()) {
            return Err(SpecError::RuntimeEnvNotMapping(env));
        }
        if env.is_object() {
            body["runtime_env"] = env;
        }
    }
    if !job.spec.metadata.is_empty() {
        body["metadata"] = json!(job.spec.metadata);
    }
    if let Some(n) = job.spec.entrypoint_num_cpus {
        body["entrypoint_num_cpus"] = json!(n);
    }
    if let Some(n) = job.spec.entrypoint_num_gpus {
        body["entrypoint_num_gpus"] = json!(n);
    }
    if let Some(r) = &job.spec.entrypoint_resources {
        let parsed: Value = serde_json::from_str(r)
            .map_err(|error| SpecError::EntrypointResourcesNotJson { value: r.clone(), error })?;
        body["entrypoint_resources"] = parsed;
    }
    Ok(body)
}

#[cfg(test)]
mod tests;
