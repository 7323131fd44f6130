//! The job's reconcile step through its whole life.

use super::*;
use crate::crd::{HeadGroupSpec, OxrayClusterSpec, OxrayJobSpec};
use std::collections::BTreeMap;

fn job(own_cluster: bool) -> OxrayJob {
    let mut spec = OxrayJobSpec {
        entrypoint: "python train.py".into(),
        runtime_env_yaml: Some("env_vars:\n  EPOCHS: \"2\"\n".into()),
        shutdown_after_job_finishes: Some(true),
        ttl_seconds_after_finished: Some(10),
        ..Default::default()
    };
    if own_cluster {
        spec.ray_cluster_spec =
            Some(OxrayClusterSpec { head_group_spec: HeadGroupSpec::default(), ..Default::default() });
    } else {
        spec.cluster_selector = BTreeMap::from([("ray.io/cluster".into(), "shared".into())]);
    }
    let mut j = OxrayJob::new("train", spec);
    j.metadata.namespace = Some("ml".into());
    j.metadata.uid = Some("1234abcd-0000".into());
    j
}

fn ready_cluster() -> ClusterView {
    ClusterView { exists: true, ready: true, failed: None, dashboard_url: Some("http://h:8265".into()) }
}

fn step(j: &mut OxrayJob, observed: JobObserved) -> JobPlan {
    let p = plan(j, &observed);
    j.status = Some(p.status.clone());
    p
}

/// A change to a valid spec that makes it invalid.
type Edit = Box<dyn Fn(&mut OxrayJob)>;

#[test]
fn a_job_with_its_own_cluster_runs_to_completion_and_the_cluster_goes() {
    let mut j = job(true);
    let p = step(&mut j, JobObserved::default());
    let cluster = p.create_cluster.expect("the job's cluster is made");
    assert_eq!(cluster.metadata.name.as_deref(), Some("train-cluster"));
    assert_eq!(cluster.metadata.namespace.as_deref(), Some("ml"));
    assert_eq!(cluster.metadata.owner_references.unwrap()[0].kind, "OxrayJob");
    assert_eq!(p.status.job_deployment_status.as_deref(), Some("Initializing"));

    let pending = ClusterView { exists: true, ..Default::default() };
    let p = step(&mut j, JobObserved { cluster: pending, ..Default::default() });
    assert!(p.submit.is_none() && p.create_cluster.is_none(), "waits for the cluster");

    let p = step(&mut j, JobObserved { cluster: ready_cluster(), ..Default::default() });
    let body = p.submit.expect("submitted once the cluster is ready");
    assert_eq!(body["entrypoint"], "python train.py");
    assert_eq!(body["submission_id"], "train-1234abcd");
    assert_eq!(body["runtime_env"]["env_vars"]["EPOCHS"], "2");
    assert_eq!(p.status.job_deployment_status.as_deref(), Some("Running"));

    let running = Some(Ok(Some(JobState { status: JobStatus::Running, message: String::new() })));
    let p = step(&mut j, JobObserved { cluster: ready_cluster(), job: running, now_s: 100 });
    assert!(p.submit.is_none(), "never submitted twice");
    assert_eq!(p.status.job_status.as_deref(), Some("RUNNING"));

    let done = Some(Ok(Some(JobState { status: JobStatus::Succeeded, message: "done".into() })));
    let p = step(&mut j, JobObserved { cluster: ready_cluster(), job: done, now_s: 200 });
    assert_eq!(p.status.job_deployment_status.as_deref(), Some("Complete"));
    assert!(!p.delete_cluster, "the ttl has not passed");

    let p = step(&mut j, JobObserved { cluster: ready_cluster(), job: None, now_s: 209 });
    assert!(!p.delete_cluster);
    let p = step(&mut j, JobObserved { cluster: ready_cluster(), job: None, now_s: 210 });
    assert!(p.delete_cluster, "deleted ttlSecondsAfterFinished after the end");
    assert_eq!(p.status.cluster_deleted, Some(true));
}

#[test]
fn a_shared_cluster_is_never_deleted() {
    let mut j = job(false);
    let p = step(&mut j, JobObserved::default());
    assert!(p.create_cluster.is_none());
    assert_eq!(p.status.message.as_deref(), Some("waiting for cluster shared, which does not exist"));
    step(&mut j, JobObserved { cluster: ready_cluster(), ..Default::default() });
    let failed = Some(Ok(Some(JobState { status: JobStatus::Failed, message: "exit 1".into() })));
    let p = step(&mut j, JobObserved { cluster: ready_cluster(), job: failed, now_s: 50 });
    assert_eq!(p.status.job_deployment_status.as_deref(), Some("Failed"));
    assert_eq!(p.status.message.as_deref(), Some("exit 1"));
    let p = step(&mut j, JobObserved { cluster: ready_cluster(), job: None, now_s: 5000 });
    assert!(!p.delete_cluster);
}

#[test]
fn bad_jobs_fail_with_a_message_naming_the_field() {
    let cases: Vec<(Edit, &str)> = vec![
        (Box::new(|j| j.spec.entrypoint = " ".into()), "spec.entrypoint is empty"),
        (Box::new(|j| j.spec.submission_mode = Some("K8sJobMode".into())), "submissionMode \"K8sJobMode\""),
        (Box::new(|j| j.spec.ray_cluster_spec = None), "neither rayClusterSpec nor a clusterSelector"),
        (
            Box::new(|j| {
                j.spec.cluster_selector.insert("oxray.io/cluster".into(), "x".into());
            }),
            "both rayClusterSpec and clusterSelector",
        ),
    ];
    for (edit, expected) in cases {
        let mut j = job(true);
        edit(&mut j);
        let p = plan(&j, &JobObserved::default());
        assert!(p.create_cluster.is_none() && p.submit.is_none());
        assert_eq!(p.status.job_deployment_status.as_deref(), Some("Failed"));
        let message = p.status.message.unwrap();
        assert!(message.contains(expected), "{expected:?} not in {message:?}");
    }
    let mut j = job(true);
    j.spec.runtime_env_yaml = Some("- just\n- a list\n".into());
    let p = plan(&j, &JobObserved { cluster: ready_cluster(), ..Default::default() });
    assert!(p.submit.is_none());
    assert!(p.status.message.unwrap().contains("expected a mapping"));
}

#[test]
fn a_failed_cluster_fails_the_job() {
    let j = job(true);
    let cluster = ClusterView { exists: true, failed: Some("bad spec".into()), ..Default::default() };
    let p = plan(&j, &JobObserved { cluster, ..Default::default() });
    assert_eq!(p.status.message.as_deref(), Some("cluster train-cluster failed: bad spec"));
}

#[test]
fn a_submitted_job_is_followed_while_its_cluster_scales() {
    let mut j = job(true);
    step(&mut j, JobObserved { cluster: ready_cluster(), now_s: 10, ..Default::default() });
    // The autoscaler added a worker that is still starting: the cluster is not `ready`.
    let scaling = ClusterView { exists: true, ready: false, ..ready_cluster() };
    let done = Some(Ok(Some(JobState { status: JobStatus::Succeeded, message: String::new() })));
    let p = step(&mut j, JobObserved { cluster: scaling, job: done, now_s: 20 });
    assert_eq!(p.status.job_deployment_status.as_deref(), Some("Complete"));
}

#[test]
fn a_job_failed_by_its_spec_still_lets_its_cluster_go_after_the_ttl() {
    let mut j = job(true);
    j.spec.entrypoint_resources = Some("{bad".into());
    let p = step(&mut j, JobObserved { cluster: ready_cluster(), now_s: 100, ..Default::default() });
    assert_eq!(p.status.job_deployment_status.as_deref(), Some("Failed"));
    assert!(p.status.message.unwrap().contains("entrypointResources"));
    assert!(!step(&mut j, JobObserved { cluster: ready_cluster(), now_s: 105, ..Default::default() }).delete_cluster);
    assert!(step(&mut j, JobObserved { cluster: ready_cluster(), now_s: 110, ..Default::default() }).delete_cluster);
}
