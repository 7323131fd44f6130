//! An `OxrayService`'s reconcile step as a pure function: the service, its
//! clusters as observed (with their heads' Serve applications) and the serve
//! Service in; the cluster to make, the configs to deploy, the clusters to
//! retire or delete, the serve Service to write and the new status out.
//!
//! As KubeRay's `RayService`: the first cluster is *pending* until every
//! application of `serveConfigV2` is RUNNING there, then it becomes *active* and
//! the `<name>-serve-svc` Service routes to its pods. A changed
//! `rayClusterConfig` brings up a new pending cluster (upgrade strategy
//! `NewCluster`); the Service moves to it once it serves everything, and the old
//! one is deleted `rayClusterDeletionDelaySeconds` later. A changed
//! `serveConfigV2` alone is deployed in place to the clusters there are. Which
//! cluster runs what is kept on the clusters themselves (annotations), so an
//! operator restart loses nothing.

use crate::cluster::{CLUSTER_LABEL, NODE_TYPE_LABEL, set_condition};
use crate::crd::{OxrayCluster, OxrayService, OxrayServiceStatus, ServeAppStatus, ServeClusterStatus};
use crate::error::SpecError;
use crate::spec;
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// The clusters an `OxrayService` made carry this label with its name.
pub const SERVICE_LABEL: &str = "oxray.io/service";
/// A cluster's `rayClusterConfig`, hashed: a different one means a new cluster.
pub const CLUSTER_HASH_ANNOTATION: &str = "oxray.io/cluster-spec-hash";
/// The hash of the Serve config last deployed to a cluster.
pub const SERVE_CONFIG_ANNOTATION: &str = "oxray.io/serve-config-hash";
/// When (seconds since the epoch) a cluster the Service moved off is deleted.
pub const DELETE_AFTER_ANNOTATION: &str = "oxray.io/delete-after";
/// KubeRay's default `rayClusterDeletionDelaySeconds`.
const DEFAULT_DELETION_DELAY_S: i64 = 60;
/// The serve Service's port, named `serve`, as KubeRay's.
pub const SERVE_PORT: i32 = 8000;
/// The longest service name whose clusters (`<name>-<8 hex>`) still have usable names.
const MAX_NAME: usize = 45;

/// One of the service's clusters as observed.
#[derive(Clone, Debug, Default)]
pub struct ServeClusterView {
    pub name: String,
    /// Its `CLUSTER_HASH_ANNOTATION`.
    pub spec_hash: String,
    /// Its `SERVE_CONFIG_ANNOTATION`: the config last deployed there.
    pub config_hash: Option<String>,
    /// Its `DELETE_AFTER_ANNOTATION`.
    pub delete_after_s: Option<i64>,
    /// Its status is `ready` and the operator can reach its head.
    pub ready: bool,
    /// Its status is `failed`, with the reason.
    pub failed: Option<String>,
    /// Ready pods the serve Service would select (the head's counted unless excluded).
    pub serve_pods: i32,
    /// Its head's Serve applications, when asked (once the cluster is ready); `Err` says why not.
    pub applications: Option<Result<BTreeMap<String, ServeAppStatus>, String>>,
}

/// What the operator saw for the service.
#[derive(Clone, Debug, Default)]
pub struct ServiceObserved {
    /// Its clusters (labelled with its name and owned by it) that are not being deleted.
    pub clusters: Vec<ServeClusterView>,
    /// The cluster the `<name>-serve-svc` Service routes to; `None` when it does not exist.
    pub serve_service_cluster: Option<String>,
    /// Seconds since the epoch.
    pub now_s: i64,
    pub now: String,
}

/// What to do.
#[derive(Clone, Debug, Default)]
pub struct ServicePlan {
    pub create_cluster: Option<OxrayCluster>,
    /// `(cluster, config JSON, its hash)`: PUT to the cluster's head, then annotate the cluster.
    pub deploy_config: Vec<(String, Value, String)>,
    /// `(cluster, when)`: annotate it to be deleted then.
    pub retire: Vec<(String, i64)>,
    /// Clusters that serve again (an upgrade rolled back to them): drop their deletion time.
    pub keep: Vec<String>,
    pub delete_clusters: Vec<String>,
    /// The serve Service, to create or to point at the active cluster.
    pub serve_service: Option<Service>,
    pub status: OxrayServiceStatus,
}

/// The service's settings, checked.
struct Checked {
    config: Value,
    config_hash: String,
    spec_hash: String,
    /// Applications the config names: each must be RUNNING before a cluster takes traffic.
    applications: Vec<String>,
    http_port: i32,
    upgrade: bool,
    deletion_delay_s: i64,
    exclude_head: bool,
}

/// The Serve config the operator PUTs to a cluster's head (`serveConfigV2` parsed, the proxies on
/// every interface unless it names a host), and its HTTP port; `Err` names what is wrong with the spec.
pub fn serve_config(service: &OxrayService) -> Result<(Value, i32), SpecError> {
    check(service).map(|checked| (checked.config, checked.http_port))
}

pub fn serve_service_name(service: &str) -> String {
    format!("{service}-serve-svc")
}

fn short_hash(bytes: &[u8]) -> String {
    hex::encode(&Sha256::digest(bytes)[..8])
}

fn check(service: &OxrayService) -> Result<Checked, SpecError> {
    let name = service.metadata.name.clone().unwrap_or_default();
    let spec = &service.spec;
    spec::refuse_unknown("spec", &spec.unknown)?;
    if name.len() > MAX_NAME {
        return Err(SpecError::UnusableName { field: "metadata.name".to_string(), name, max: MAX_NAME });
    }
    // The cluster spec as its own `OxrayCluster` would be checked (under the first cluster's name).
    spec::check(&format!("{name}-00000000"), &spec.ray_cluster_config)?;
    let upgrade = match &spec.upgrade_strategy {
        None => true,
        Some(strategy) => {
            spec::refuse_unknown("spec.upgradeStrategy", &strategy.unknown)?;
            match strategy.type_.as_deref() {
                None | Some("NewCluster") => true,
                Some("None") => false,
                Some(other) => return Err(SpecError::UnsupportedUpgradeStrategy(other.to_string())),
            }
        }
    };
    let yaml = spec.serve_config_v2.as_deref().ok_or(SpecError::NoServeConfig)?;
    let mut config: Value = serde_saphyr::from_str(yaml).map_err(SpecError::ServeConfigNotYaml)?;
    let Some(top) = config.as_object_mut() else { return Err(SpecError::ServeConfigNotMapping(config)) };
    // The proxies listen on every interface unless the config says otherwise, as Ray's config
    // files default to: the serve Service reaches them by pod IP.
    let http = top.entry("http_options").or_insert_with(|| json!({}));
    if let Some(http) = http.as_object_mut() {
        http.entry("host").or_insert_with(|| json!("0.0.0.0"));
    }
    let http_port = config["http_options"]["port"].as_i64().map_or(SERVE_PORT, |p| p as i32);
    let applications = config["applications"]
        .as_array()
        .map(|apps| apps.iter().map(|a| a["name"].as_str().unwrap_or("default").to_string()).collect::<Vec<String>>())
        .unwrap_or_default();
    let cluster_spec = serde_json::to_vec(&spec.ray_cluster_config).unwrap_or_default();
    Ok(Checked {
        config_hash: short_hash(config.to_string().as_bytes()),
        config,
        spec_hash: short_hash(&cluster_spec),
        applications,
        http_port,
        upgrade,
        deletion_delay_s: spec.ray_cluster_deletion_delay_seconds.map_or(DEFAULT_DELETION_DELAY_S, i64::from),
        exclude_head: spec.exclude_head_pod_from_serve_svc.unwrap_or(false),
    })
}

/// Every application of the config is RUNNING on the cluster, with the current config deployed.
fn serves_all(view: &ServeClusterView, checked: &Checked) -> bool {
    if view.config_hash.as_deref() != Some(checked.config_hash.as_str()) {
        return false;
    }
    let Some(Ok(apps)) = &view.applications else { return false };
    checked.applications.iter().all(|name| apps.get(name).is_some_and(|a| a.status == "RUNNING"))
}

fn cluster_status(view: &ServeClusterView) -> ServeClusterStatus {
    let application_statuses = match &view.applications {
        Some(Ok(apps)) => apps.clone(),
        _ => BTreeMap::new(),
    };
    ServeClusterStatus { ray_cluster_name: view.name.clone(), application_statuses }
}

/// What a cluster still lacks before it can take traffic.
fn waiting_for(view: &ServeClusterView, checked: &Checked) -> String {
    if let Some(reason) = &view.failed {
        return format!("cluster {} failed: {reason}", view.name);
    }
    if !view.ready {
        return format!("waiting for cluster {} to be ready", view.name);
    }
    if view.config_hash.as_deref() != Some(checked.config_hash.as_str()) {
        return format!("deploying the Serve config to cluster {}", view.name);
    }
    match &view.applications {
        None => format!("asking cluster {}'s head for its applications", view.name),
        Some(Err(e)) => format!("could not read cluster {}'s applications: {e}", view.name),
        Some(Ok(apps)) => {
            let not_running: Vec<String> = checked
                .applications
                .iter()
                .map(|name| match apps.get(name) {
                    None => format!("{name} (not deployed yet)"),
                    Some(app) if app.message.is_empty() => format!("{name} ({})", app.status),
                    Some(app) => format!("{name} ({}: {})", app.status, app.message),
                })
                .filter(|line| !line.contains("(RUNNING"))
                .collect();
            format!("waiting on cluster {} for {}", view.name, not_running.join(", "))
        }
    }
}

/// The reconcile step.
pub fn plan(service: &OxrayService, observed: &ServiceObserved) -> ServicePlan {
    let name = service.metadata.name.clone().unwrap_or_default();
    let previous = service.status.clone().unwrap_or_default();
    let mut plan = ServicePlan { status: previous.clone(), ..Default::default() };
    plan.status.observed_generation = service.metadata.generation;
    let checked = match check(service) {
        Ok(checked) => checked,
        Err(error) => {
            let message = error.to_string();
            plan.status.message = Some(message.clone());
            plan.status.service_status = Some(String::new());
            set_condition(
                &mut plan.status.conditions,
                &previous.conditions,
                "Ready",
                false,
                "InvalidSpec",
                &message,
                &observed.now,
            );
            return plan;
        }
    };
    let by_name: BTreeMap<&str, &ServeClusterView> = observed.clusters.iter().map(|c| (c.name.as_str(), c)).collect();
    let previous_name = |s: &Option<ServeClusterStatus>| {
        s.as_ref().map(|s| s.ray_cluster_name.clone()).filter(|n| by_name.contains_key(n.as_str()))
    };
    let mut active = previous_name(&previous.active_service_status);
    let desired = format!("{name}-{}", &checked.spec_hash[..8]);
    let needs_new = match &active {
        None => true,
        Some(a) => checked.upgrade && by_name[a.as_str()].spec_hash != checked.spec_hash,
    };
    let mut pending = needs_new.then(|| desired.clone());
    if let Some(p) = &pending
        && !by_name.contains_key(p.as_str())
    {
        let mut cluster = OxrayCluster::new(p, service.spec.ray_cluster_config.clone());
        cluster.metadata.namespace = service.metadata.namespace.clone();
        cluster.metadata.labels = Some(BTreeMap::from([(SERVICE_LABEL.to_string(), name.clone())]));
        cluster.metadata.annotations =
            Some(BTreeMap::from([(CLUSTER_HASH_ANNOTATION.to_string(), checked.spec_hash.clone())]));
        cluster.metadata.owner_references = kube::Resource::controller_owner_ref(service, &()).map(|o| vec![o]);
        plan.create_cluster = Some(cluster);
    }

    // The config goes to every serving or coming cluster that lacks it.
    for cluster in [&active, &pending].into_iter().flatten() {
        if let Some(view) = by_name.get(cluster.as_str())
            && view.ready
            && view.config_hash.as_deref() != Some(checked.config_hash.as_str())
        {
            plan.deploy_config.push((cluster.clone(), checked.config.clone(), checked.config_hash.clone()));
        }
    }
    // A pending cluster that serves everything takes the traffic.
    if let Some(p) = &pending
        && by_name.get(p.as_str()).is_some_and(|view| serves_all(view, &checked))
    {
        active = pending.take();
    }
    for view in &observed.clusters {
        let in_use = Some(&view.name) == active.as_ref() || Some(&view.name) == pending.as_ref();
        match (in_use, view.delete_after_s) {
            (true, Some(_)) => plan.keep.push(view.name.clone()),
            (true, None) => {}
            (false, None) => plan.retire.push((view.name.clone(), observed.now_s + checked.deletion_delay_s)),
            (false, Some(at)) if observed.now_s >= at => plan.delete_clusters.push(view.name.clone()),
            (false, Some(_)) => {}
        }
    }
    if let Some(a) = &active
        && observed.serve_service_cluster.as_deref() != Some(a.as_str())
    {
        plan.serve_service = Some(serve_service(service, a, &checked));
    }

    // The status.
    let active_view = active.as_deref().and_then(|a| by_name.get(a).copied());
    let pending_view = pending.as_deref().and_then(|p| by_name.get(p).copied());
    let serving = active_view.is_some_and(|v| serves_all(v, &checked));
    let status = &mut plan.status;
    status.active_service_status = active_view.map(cluster_status);
    status.pending_service_status = match (pending_view, &pending) {
        (Some(view), _) => Some(cluster_status(view)),
        (None, Some(p)) => {
            Some(ServeClusterStatus { ray_cluster_name: p.clone(), application_statuses: BTreeMap::new() })
        }
        (None, None) => None,
    };
    status.num_serve_endpoints = active_view.map_or(0, |v| v.serve_pods);
    status.service_status = Some(if serving { "Running".to_string() } else { String::new() });
    let waiting = match (active_view, pending_view, &pending) {
        (_, Some(view), _) => Some(waiting_for(view, &checked)),
        (_, None, Some(p)) => Some(format!("creating cluster {p}")),
        (Some(view), None, None) if !serving => Some(waiting_for(view, &checked)),
        _ => None,
    };
    let not_upgrading = (active.is_some()
        && !checked.upgrade
        && active_view.is_some_and(|v| v.spec_hash != checked.spec_hash))
    .then(|| "rayClusterConfig changed, but upgradeStrategy.type is None: the cluster is kept as it is".to_string());
    status.message = waiting.clone().or(not_upgrading);
    let (reason, message) = if serving {
        let reason = if status.num_serve_endpoints > 0 { "NonZeroServeEndpoints" } else { "ZeroServeEndpoints" };
        (reason, format!("cluster {} serves every application", active.clone().unwrap_or_default()))
    } else {
        ("Initializing", waiting.clone().unwrap_or_default())
    };
    set_condition(&mut status.conditions, &previous.conditions, "Ready", serving, reason, &message, &observed.now);
    let upgrading = active.is_some() && pending.is_some();
    let (reason, message) =
        if upgrading { ("UpgradeInProgress", waiting.unwrap_or_default()) } else { ("NoUpgrade", String::new()) };
    set_condition(
        &mut status.conditions,
        &previous.conditions,
        "UpgradeInProgress",
        upgrading,
        reason,
        &message,
        &observed.now,
    );
    plan
}

/// `<name>-serve-svc`: port `serve` (8000) to the proxies' port on the active cluster's pods.
fn serve_service(service: &OxrayService, cluster: &str, checked: &Checked) -> Service {
    let name = service.metadata.name.clone().unwrap_or_default();
    let mut selector = BTreeMap::from([(CLUSTER_LABEL.to_string(), cluster.to_string())]);
    if checked.exclude_head {
        selector.insert(NODE_TYPE_LABEL.to_string(), "worker".to_string());
    }
    Service {
        metadata: ObjectMeta {
            name: Some(serve_service_name(&name)),
            namespace: service.metadata.namespace.clone(),
            labels: Some(BTreeMap::from([
                (SERVICE_LABEL.to_string(), name.clone()),
                ("app.kubernetes.io/created-by".to_string(), "oxray-operator".to_string()),
            ])),
            owner_references: kube::Resource::controller_owner_ref(service, &()).map(|o| vec![o]),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            selector: Some(selector),
            ports: Some(vec![ServicePort {
                name: Some("serve".to_string()),
                port: SERVE_PORT,
                target_port: Some(IntOrString::Int(checked.http_port)),
                protocol: Some("TCP".to_string()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests;
