//! The custom resources, `OxrayCluster`, `OxrayJob` and `OxrayService`
//! (`oxray.io/v1`), shaped like KubeRay's `RayCluster`, `RayJob` and `RayService`
//! so that a manifest ports by changing `apiVersion` and `kind`. The schema the API server enforces is derived from
//! these types (`oxray-operator crds` prints it).

use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A cluster: one head and groups of workers.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[kube(
    group = "oxray.io",
    version = "v1",
    kind = "OxrayCluster",
    namespaced,
    status = "OxrayClusterStatus",
    shortname = "oxc",
    category = "oxray",
    printcolumn = r#"{"name": "State", "type": "string", "jsonPath": ".status.state"}"#,
    printcolumn = r#"{"name": "Desired workers", "type": "integer", "jsonPath": ".status.desiredWorkerReplicas"}"#,
    printcolumn = r#"{"name": "Ready workers", "type": "integer", "jsonPath": ".status.readyWorkerReplicas"}"#,
    printcolumn = r#"{"name": "Head", "type": "string", "jsonPath": ".status.head.address"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct OxrayClusterSpec {
    /// The head: the cluster's control plane, Jobs API and dashboard.
    pub head_group_spec: HeadGroupSpec,
    /// Groups of worker pods that join the head.
    #[serde(default)]
    pub worker_group_specs: Vec<WorkerGroupSpec>,
    /// Scale worker groups between `minReplicas` and `maxReplicas` to meet the
    /// head's pending demand (tasks, actors and placement groups that don't fit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_in_tree_autoscaling: Option<bool>,
    /// How the autoscaler behaves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaler_options: Option<AutoscalerOptions>,
    /// Accepted so that KubeRay manifests apply unchanged; the image decides the version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ray_version: Option<String>,
    /// How the operator verifies the head's HTTPS certificate. Required when the head's
    /// `rayStartParams` has `tls-cert` (its Jobs API and dashboard then speak HTTPS only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<ClusterTls>,
    /// Fields this operator does not know (KubeRay's others): kept by the API
    /// server, so the operator can refuse them by name instead of ignoring them.
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(skip)]
    pub unknown: BTreeMap<String, serde_json::Value>,
}

/// The CA the operator trusts for a TLS cluster's head: it calls the head's Jobs API
/// (OxrayJob, autoscaling) over HTTPS and refuses a certificate this CA did not sign.
#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct ClusterTls {
    /// A Secret in the cluster's namespace that holds the CA certificate (PEM), such as the
    /// one cert-manager writes beside the head's certificate.
    #[schemars(length(min = 1, max = 253))]
    pub ca_secret_name: String,
    /// The Secret's key that holds the CA. Default `ca.crt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_key: Option<String>,
    /// Fields this operator does not know: refused by name.
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(skip)]
    pub unknown: BTreeMap<String, serde_json::Value>,
}

/// The head pod and its Service.
#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct HeadGroupSpec {
    /// `oxray start` options without the leading `--` (KubeRay's `ray start` spellings).
    #[serde(default)]
    pub ray_start_params: BTreeMap<String, String>,
    /// The head pod; its first container runs `oxray start --head`.
    pub template: PodTemplateSpec,
    /// The head Service's type: ClusterIP (default), NodePort or LoadBalancer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["ClusterIP", "NodePort", "LoadBalancer"]))]
    pub service_type: Option<String>,
    /// Fields this operator does not know (KubeRay's others): kept by the API
    /// server, so the operator can refuse them by name instead of ignoring them.
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(skip)]
    pub unknown: BTreeMap<String, serde_json::Value>,
}

/// One group of identical worker pods.
#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct WorkerGroupSpec {
    /// The group's name, unique in the cluster (part of each pod's name).
    #[schemars(regex(pattern = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"), length(min = 1, max = 40))]
    pub group_name: String,
    /// How many workers to run (with autoscaling: where it starts). Default: `minReplicas`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i32>,
    /// The fewest workers the group keeps. Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub min_replicas: Option<i32>,
    /// The most workers the group runs. Default: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_replicas: Option<i32>,
    /// `oxray start` options without the leading `--`.
    #[serde(default)]
    pub ray_start_params: BTreeMap<String, String>,
    /// The worker pod; its first container runs `oxray start --address=<head>`.
    pub template: PodTemplateSpec,
    /// Fields this operator does not know (KubeRay's others): kept by the API
    /// server, so the operator can refuse them by name instead of ignoring them.
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(skip)]
    pub unknown: BTreeMap<String, serde_json::Value>,
}

/// KubeRay's `autoscalerOptions`, of which oxray's in-tree autoscaler reads the timing.
#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct AutoscalerOptions {
    /// A worker idle this long (no resources in use) is removed, down to `minReplicas`. Default 60.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub idle_timeout_seconds: Option<i32>,
    /// KubeRay's autoscaler sidecar settings: refused (oxray scales from the operator, without a sidecar).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_value")]
    pub image: Option<serde_json::Value>,
    /// Refused, see `image`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_value")]
    pub resources: Option<serde_json::Value>,
    /// Refused, see `image`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_value")]
    pub env: Option<serde_json::Value>,
    /// Refused: oxray's autoscaler adds as many workers as the demand needs at once (KubeRay's `Default`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upscaling_mode: Option<String>,
    /// Fields this operator does not know (KubeRay's others): kept by the API
    /// server, so the operator can refuse them by name instead of ignoring them.
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(skip)]
    pub unknown: BTreeMap<String, serde_json::Value>,
}

/// Any JSON value: lets the schema accept a KubeRay field so that the operator
/// can refuse it by name instead of the API server pruning it silently.
fn any_value(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "x-kubernetes-preserve-unknown-fields": true })
}

/// What the operator observed and did.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OxrayClusterStatus {
    /// `pending` (pods starting), `ready` (head and every desired worker ready) or `failed` (see `reason`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Why the cluster failed, or what it waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Where to reach the head.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<HeadStatus>,
    /// Workers, all groups together, whose pods are ready.
    #[serde(default)]
    pub ready_worker_replicas: i32,
    /// Same as `readyWorkerReplicas` (KubeRay's name).
    #[serde(default)]
    pub available_worker_replicas: i32,
    /// Workers, all groups together, that the operator wants running.
    #[serde(default)]
    pub desired_worker_replicas: i32,
    /// Per group.
    #[serde(default)]
    pub worker_groups: Vec<WorkerGroupStatus>,
    /// Work that no group's worker can run (the autoscaler can't help it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unschedulable_demand: Option<String>,
    /// Conditions: `Ready`, `SpecValid`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The spec generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The head's addresses.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeadStatus {
    /// The head Service's name.
    pub service_name: String,
    /// `service.namespace.svc:port`: what workers and drivers join (`oxray start --address`).
    pub address: String,
    /// The Jobs API and dashboard.
    pub dashboard_url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_ip: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_ip: Option<String>,
}

/// One worker group's replicas.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkerGroupStatus {
    pub group_name: String,
    /// Pods that exist and are not being deleted.
    pub replicas: i32,
    pub ready_replicas: i32,
    pub desired_replicas: i32,
}

/// A Kubernetes-style condition.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    pub reason: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
}

/// A job: an entrypoint run on a cluster, made for it or already there.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[kube(
    group = "oxray.io",
    version = "v1",
    kind = "OxrayJob",
    namespaced,
    status = "OxrayJobStatus",
    shortname = "oxj",
    category = "oxray",
    printcolumn = r#"{"name": "Job status", "type": "string", "jsonPath": ".status.jobStatus"}"#,
    printcolumn = r#"{"name": "Deployment", "type": "string", "jsonPath": ".status.jobDeploymentStatus"}"#,
    printcolumn = r#"{"name": "Cluster", "type": "string", "jsonPath": ".status.rayClusterName"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct OxrayJobSpec {
    /// The shell command the job runs on the head, e.g. `python train.py`.
    pub entrypoint: String,
    /// Ray's runtime_env, as YAML (KubeRay's `runtimeEnvYAML`).
    #[serde(default, rename = "runtimeEnvYAML", skip_serializing_if = "Option::is_none")]
    pub runtime_env_yaml: Option<String>,
    /// The job's metadata (strings).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// The id the job is submitted with. Default: the OxrayJob's name and uid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// A cluster made for this job (owned by it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ray_cluster_spec: Option<OxrayClusterSpec>,
    /// Or an existing cluster: `{"oxray.io/cluster": "<name>"}` (KubeRay's `ray.io/cluster` also works).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cluster_selector: BTreeMap<String, String>,
    /// Delete the cluster made for the job once the job ends (after `ttlSecondsAfterFinished`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shutdown_after_job_finishes: Option<bool>,
    /// Seconds to keep the cluster after the job ends, with `shutdownAfterJobFinishes`. Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds_after_finished: Option<i32>,
    /// CPUs, GPUs and resources reserved for the entrypoint on the head (Jobs API `entrypoint_num_cpus`...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint_num_cpus: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint_num_gpus: Option<f64>,
    /// Custom entrypoint resources, as a JSON object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint_resources: Option<String>,
    /// KubeRay's submission modes: only `HTTPMode` (the operator calls the Jobs API) is built.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submission_mode: Option<String>,
    /// Refused: the operator submits over HTTP, without a submitter pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_value")]
    pub submitter_pod_template: Option<serde_json::Value>,
    /// Fields this operator does not know (KubeRay's others): kept by the API
    /// server, so the operator can refuse them by name instead of ignoring them.
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(skip)]
    pub unknown: BTreeMap<String, serde_json::Value>,
}

/// The job's state, as the Jobs API reports it, and the operator's part.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OxrayJobStatus {
    /// The submission id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// PENDING, RUNNING, STOPPED, SUCCEEDED or FAILED (the Jobs API's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_status: Option<String>,
    /// Initializing, Running, Complete, Failed (KubeRay's deployment states).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_deployment_status: Option<String>,
    /// The cluster the job runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ray_cluster_name: Option<String>,
    /// The Jobs API's message, or why the operator could not submit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The dashboard (Jobs API) the job was submitted to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dashboard_url: Option<String>,
    /// When the job ended (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<String>,
    /// Whether the owned cluster was deleted after the job ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_deleted: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

impl OxrayJobStatus {
    /// The job ended: its deployment is `Complete` or `Failed`.
    pub fn finished(&self) -> bool {
        matches!(self.job_deployment_status.as_deref(), Some("Complete" | "Failed"))
    }

    /// The submission id of a job that was submitted and has not ended.
    pub fn running_job_id(&self) -> Option<&str> {
        if self.finished() { None } else { self.job_id.as_deref() }
    }
}

/// A Serve application kept running on a cluster made for it (KubeRay's `RayService`): the
/// operator deploys `serveConfigV2` through the head's Serve REST API, routes the
/// `<name>-serve-svc` Service to the cluster's pods, and on a change of `rayClusterConfig`
/// brings up a new cluster, deploys there, switches the Service once every application runs,
/// then deletes the old cluster (zero downtime).
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[kube(
    group = "oxray.io",
    version = "v1",
    kind = "OxrayService",
    namespaced,
    status = "OxrayServiceStatus",
    shortname = "oxs",
    category = "oxray",
    printcolumn = r#"{"name": "Service status", "type": "string", "jsonPath": ".status.serviceStatus"}"#,
    printcolumn = r#"{"name": "Active cluster", "type": "string", "jsonPath": ".status.activeServiceStatus.rayClusterName"}"#,
    printcolumn = r#"{"name": "Pending cluster", "type": "string", "jsonPath": ".status.pendingServiceStatus.rayClusterName"}"#,
    printcolumn = r#"{"name": "Endpoints", "type": "integer", "jsonPath": ".status.numServeEndpoints"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct OxrayServiceSpec {
    /// Ray Serve's config (`ServeDeploySchema`: `applications`, `http_options`, `proxy_location`)
    /// as a YAML string, as `serve build` writes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serve_config_v2: Option<String>,
    /// The cluster to serve on (an `OxrayCluster` spec); a change brings up a new cluster.
    pub ray_cluster_config: OxrayClusterSpec,
    /// `NewCluster` (the default: a new cluster serves before the old one goes) or `None` (a
    /// changed `rayClusterConfig` is not applied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_strategy: Option<UpgradeStrategy>,
    /// Seconds an old cluster keeps running after the Service moved off it. Default 60.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ray_cluster_deletion_delay_seconds: Option<i32>,
    /// Route the serve Service to worker pods only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude_head_pod_from_serve_svc: Option<bool>,
    /// Fields this operator does not know (KubeRay's others): refused by name.
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(skip)]
    pub unknown: BTreeMap<String, serde_json::Value>,
}

/// How a changed `rayClusterConfig` is applied.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct UpgradeStrategy {
    /// `NewCluster` or `None`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Fields this operator does not know (KubeRay's `clusterUpgradeOptions`): refused by name.
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(skip)]
    pub unknown: BTreeMap<String, serde_json::Value>,
}

/// What the operator observed and did, in KubeRay's `RayService` status shape.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OxrayServiceStatus {
    /// `Running` once the active cluster serves every application; else empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_status: Option<String>,
    /// The cluster the serve Service routes to, and its applications.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_service_status: Option<ServeClusterStatus>,
    /// A cluster being brought up (the first one, or an upgrade's), and its applications.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_service_status: Option<ServeClusterStatus>,
    /// Ready pods behind the serve Service.
    #[serde(default)]
    pub num_serve_endpoints: i32,
    /// Conditions: `Ready`, `UpgradeInProgress`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// What the operator waits for, or why it cannot go on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// One cluster of an `OxrayService` and its Serve applications.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServeClusterStatus {
    pub ray_cluster_name: String,
    /// Each application as the head's Serve API reports it.
    #[serde(default)]
    pub application_statuses: BTreeMap<String, ServeAppStatus>,
}

/// An application's status (Ray's `ApplicationStatus`) and its deployments'.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServeAppStatus {
    pub status: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default)]
    pub serve_deployment_statuses: BTreeMap<String, ServeDeploymentStatus>,
}

/// A deployment's status (Ray's `DeploymentStatus`).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServeDeploymentStatus {
    pub status: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// The CustomResourceDefinitions, as applied. The embedded pod templates keep
/// their full schema (the API server checks them) but not their field
/// descriptions, which would push each CRD past the API server's request
/// size limit; `kubectl explain pod.spec` has them.
pub fn crds() -> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> {
    use kube::CustomResourceExt;
    let mut crds = vec![OxrayCluster::crd(), OxrayJob::crd(), OxrayService::crd()];
    for crd in &mut crds {
        for version in &mut crd.spec.versions {
            if let Some(schema) = version.schema.as_mut().and_then(|s| s.open_api_v3_schema.as_mut()) {
                let mut value = serde_json::to_value(&*schema).unwrap_or_default();
                strip_template_descriptions(&mut value, false);
                if let Ok(stripped) = serde_json::from_value(value) {
                    *schema = stripped;
                }
            }
        }
    }
    crds
}

/// The CRDs as YAML documents: what `oxray-operator crds` prints and the Helm chart installs.
pub fn crds_yaml() -> Result<String, serde_saphyr::SerializeError> {
    let mut out = String::new();
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&crd)?);
    }
    Ok(out)
}

fn strip_template_descriptions(value: &mut serde_json::Value, inside_template: bool) {
    match value {
        serde_json::Value::Object(map) => {
            if inside_template {
                map.remove("description");
            }
            if let Some(serde_json::Value::Object(props)) = map.get_mut("properties") {
                for (name, prop) in props.iter_mut() {
                    strip_template_descriptions(prop, inside_template || name == "template");
                }
            }
            for (key, child) in map.iter_mut() {
                if key != "properties" {
                    strip_template_descriptions(child, inside_template);
                }
            }
        }
        serde_json::Value::Array(items) => {
            items.iter_mut().for_each(|v| strip_template_descriptions(v, inside_template))
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_helm_charts_crds_are_the_operators() {
        let committed = include_str!("../../../deploy/helm/oxray-operator/crds/oxray.io_crds.yaml");
        assert!(
            committed == super::crds_yaml().unwrap(),
            "deploy/helm/oxray-operator/crds/oxray.io_crds.yaml is not what the types say: run `make crds`"
        );
    }
}
