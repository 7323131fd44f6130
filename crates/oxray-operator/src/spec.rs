//! Checks an `OxrayCluster` spec and turns it into what the rest of the
//! operator works from: the `oxray start` command of each role and the
//! resources one worker of each group offers. A bad spec becomes a
//! [`SpecError`] naming the field, the value and what was expected, shown as a
//! status condition (never a crash loop).

use crate::crd::{OxrayClusterSpec, WorkerGroupSpec};
use crate::error::SpecError;
use crate::resources::{ResourceMap, parse_quantity};
use k8s_openapi::api::core::v1::{Container, PodTemplateSpec};
use std::collections::BTreeMap;

/// The head's gRPC port (`oxray start --port`), as Ray's GCS port.
pub const DEFAULT_HEAD_PORT: u16 = 6379;
/// The Jobs API and dashboard.
pub const DEFAULT_DASHBOARD_PORT: u16 = 8265;
/// Each node's Prometheus `/metrics` (KubeRay's port).
pub const METRICS_PORT: u16 = 8080;
/// Where the head keeps its state when the head template has an `oxray-state` volume.
pub const STATE_DIR: &str = "/oxray/state";
/// The head template's volume that holds the head's state across head pods.
pub const STATE_VOLUME: &str = "oxray-state";
/// Seconds a worker stays idle before the autoscaler removes it (KubeRay's default).
pub const DEFAULT_IDLE_TIMEOUT_S: u64 = 60;

/// `rayStartParams` keys either role may set, passed on as `--key=value`.
const COMMON_PARAMS: &[&str] = &[
    "num-cpus",
    "num-gpus",
    "resources",
    "labels",
    "object-store-memory",
    "tls-cert",
    "tls-key",
    "tls-ca",
    "tls-client-auth",
];
/// Only the head's.
const HEAD_PARAMS: &[&str] = &["port", "dashboard-port", "dashboard-host"];
/// Keys the operator sets itself, with why a spec may not.
const OPERATOR_PARAMS: &[(&str, &str)] = &[
    ("address", "the operator joins workers to the head's Service"),
    ("node-ip-address", "the operator passes the pod's IP"),
    ("token", "the operator generates the cluster token into a Secret"),
    ("token-file", "the operator generates the cluster token into a Secret"),
    ("state-dir", "give the head template a volume named `oxray-state` instead"),
    ("metrics-export-port", "the operator serves metrics on 8080, as KubeRay"),
];

/// A worker group, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupPlan {
    pub name: String,
    pub min: i32,
    pub max: i32,
    /// `replicas`, else `minReplicas`, within the bounds.
    pub replicas: i32,
    /// What one worker offers the scheduler; `None` when neither `num-cpus` nor a CPU limit says.
    pub resources: Option<ResourceMap>,
    /// `oxray start` options (without `--address`, `--node-ip-address`).
    pub args: Vec<String>,
}

/// A whole cluster spec, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterPlanSpec {
    pub head_port: u16,
    pub dashboard_port: u16,
    pub head_args: Vec<String>,
    pub head_has_state_volume: bool,
    pub service_type: String,
    pub groups: Vec<GroupPlan>,
    pub autoscaling: bool,
    pub idle_timeout_s: u64,
    /// The head speaks HTTPS (`tls-cert`): where the CA the operator verifies it with is.
    pub https_ca: Option<CaRef>,
}

impl ClusterPlanSpec {
    /// How the head's Jobs API and dashboard are reached: `https` with a certificate, else `http`.
    pub fn scheme(&self) -> &'static str {
        if self.https_ca.is_some() { "https" } else { "http" }
    }
}

/// A key of a Secret in the cluster's namespace that holds a CA certificate.
#[derive(Clone, Debug, PartialEq)]
pub struct CaRef {
    pub secret: String,
    pub key: String,
}

/// The key of `spec.tls.caSecretName` that holds the CA when `caKey` does not say (cert-manager's).
pub const DEFAULT_CA_KEY: &str = "ca.crt";

/// Checks `spec` of the cluster named `name`.
pub fn check(name: &str, spec: &OxrayClusterSpec) -> Result<ClusterPlanSpec, SpecError> {
    check_name("metadata.name", name, 54)?;
    refuse_unknown("spec", &spec.unknown)?;
    refuse_unknown("spec.headGroupSpec", &spec.head_group_spec.unknown)?;
    if let Some(options) = &spec.autoscaler_options {
        refuse_unknown("spec.autoscalerOptions", &options.unknown)?;
    }
    for (i, group) in spec.worker_group_specs.iter().enumerate() {
        refuse_unknown(&format!("spec.workerGroupSpecs[{i}]"), &group.unknown)?;
    }
    let head = &spec.head_group_spec;
    first_container("headGroupSpec.template", &head.template)?;
    let head_params_field = "headGroupSpec.rayStartParams";
    let head_params = check_params(head_params_field, &head.ray_start_params, true)?;
    let head_port = port_param(head_params_field, &head.ray_start_params, "port", DEFAULT_HEAD_PORT)?;
    let dashboard_port =
        port_param(head_params_field, &head.ray_start_params, "dashboard-port", DEFAULT_DASHBOARD_PORT)?;
    let service_type = head.service_type.clone().unwrap_or_else(|| "ClusterIP".to_string());
    if !["ClusterIP", "NodePort", "LoadBalancer"].contains(&service_type.as_str()) {
        return Err(SpecError::UnknownServiceType(service_type));
    }
    let head_resources = node_resources("headGroupSpec", &head.ray_start_params, &head.template)?;
    let head_has_state_volume = head
        .template
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .is_some_and(|v| v.iter().any(|v| v.name == STATE_VOLUME));
    let mut head_args = vec![
        format!("--port={head_port}"),
        format!("--dashboard-port={dashboard_port}"),
        format!("--metrics-export-port={METRICS_PORT}"),
    ];
    if !head.ray_start_params.contains_key("dashboard-host") {
        head_args.push("--dashboard-host=0.0.0.0".to_string());
    }
    head_args.extend(explicit_resources(&head.ray_start_params, head_resources.as_ref()));
    head_args.extend(head_params);
    if head_has_state_volume {
        head_args.push(format!("--state-dir={STATE_DIR}"));
    }

    let autoscaling = spec.enable_in_tree_autoscaling.unwrap_or(false);
    let mut idle_timeout_s = DEFAULT_IDLE_TIMEOUT_S;
    if let Some(options) = &spec.autoscaler_options {
        for (field, set) in [
            ("image", options.image.is_some()),
            ("resources", options.resources.is_some()),
            ("env", options.env.is_some()),
        ] {
            if set {
                return Err(SpecError::SidecarOption(field));
            }
        }
        if let Some(mode) = &options.upscaling_mode
            && mode != "Default"
        {
            return Err(SpecError::UnsupportedUpscalingMode(mode.clone()));
        }
        if let Some(t) = options.idle_timeout_seconds {
            idle_timeout_s = u64::try_from(t).map_err(|_| SpecError::NegativeIdleTimeout(t))?;
        }
    }

    let https_ca = https_ca(spec)?;
    let mut groups = Vec::new();
    for (i, group) in spec.worker_group_specs.iter().enumerate() {
        let plan = check_group(i, group)?;
        if groups.iter().any(|g: &GroupPlan| g.name == plan.name) {
            return Err(SpecError::GroupNameUsedTwice { index: i, name: plan.name });
        }
        if autoscaling && plan.resources.is_none() {
            return Err(SpecError::WorkerResourcesUnknown { index: i, name: plan.name });
        }
        groups.push(plan);
    }
    Ok(ClusterPlanSpec {
        head_port,
        dashboard_port,
        head_args,
        head_has_state_volume,
        service_type,
        groups,
        autoscaling,
        idle_timeout_s,
        https_ca,
    })
}

/// `spec.tls`, which a head with `tls-cert` needs (it speaks HTTPS only) and any other head must
/// not have (nothing would use it).
fn https_ca(spec: &OxrayClusterSpec) -> Result<Option<CaRef>, SpecError> {
    let head_https = spec.head_group_spec.ray_start_params.contains_key("tls-cert");
    match &spec.tls {
        None if head_https => Err(SpecError::HttpsHeadWithoutCa),
        None => Ok(None),
        Some(_) if !head_https => Err(SpecError::CaWithoutHttpsHead),
        Some(tls) => {
            refuse_unknown("spec.tls", &tls.unknown)?;
            let key = tls.ca_key.clone().unwrap_or_else(|| DEFAULT_CA_KEY.to_string());
            if tls.ca_secret_name.is_empty() || key.is_empty() {
                return Err(SpecError::EmptyCaRef { secret: tls.ca_secret_name.clone(), key });
            }
            Ok(Some(CaRef { secret: tls.ca_secret_name.clone(), key }))
        }
    }
}

/// A field the operator does not know (a KubeRay one it does not build, or a typo) fails the spec by name.
pub fn refuse_unknown(at: &str, unknown: &BTreeMap<String, serde_json::Value>) -> Result<(), SpecError> {
    match unknown.keys().next() {
        None => Ok(()),
        Some(key) => Err(SpecError::UnknownField { at: at.to_string(), key: key.clone() }),
    }
}

fn check_group(i: usize, group: &WorkerGroupSpec) -> Result<GroupPlan, SpecError> {
    let at = format!("workerGroupSpecs[{i}]");
    check_name(&format!("{at}.groupName"), &group.group_name, 40)?;
    first_container(&format!("{at}.template"), &group.template)?;
    let min = group.min_replicas.unwrap_or(0);
    let max = group.max_replicas.unwrap_or(i32::MAX);
    if min < 0 || max < 0 {
        return Err(SpecError::NegativeReplicaBounds { index: i, min, max });
    }
    if min > max {
        return Err(SpecError::MinAboveMax { index: i, min, max });
    }
    let replicas = group.replicas.unwrap_or(min);
    if replicas < 0 {
        return Err(SpecError::NegativeReplicas { index: i, replicas });
    }
    let params = check_params(&format!("{at}.rayStartParams"), &group.ray_start_params, false)?;
    let resources = node_resources(&at, &group.ray_start_params, &group.template)?;
    let mut args = vec![format!("--metrics-export-port={METRICS_PORT}")];
    args.extend(explicit_resources(&group.ray_start_params, resources.as_ref()));
    args.extend(params);
    Ok(GroupPlan { name: group.group_name.clone(), min, max, replicas: replicas.clamp(min, max), resources, args })
}

/// A DNS-1035 label of at most `max` characters (room for the suffixes the operator adds).
fn check_name(field: &str, name: &str, max: usize) -> Result<(), SpecError> {
    let ok = !name.is_empty()
        && name.len() <= max
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok { Ok(()) } else { Err(SpecError::UnusableName { field: field.to_string(), name: name.to_string(), max }) }
}

fn first_container<'a>(field: &str, template: &'a PodTemplateSpec) -> Result<&'a Container, SpecError> {
    let container = template
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .ok_or_else(|| SpecError::NoContainer { template: field.to_string() })?;
    if container.image.as_deref().unwrap_or("").is_empty() {
        return Err(SpecError::NoImage { template: field.to_string() });
    }
    if container.command.is_some() || container.args.is_some() {
        return Err(SpecError::CommandOrArgsSet { template: field.to_string() });
    }
    Ok(container)
}

/// The `--key=value` options of `params`, refusing what the operator sets and what oxray doesn't know.
fn check_params(field: &str, params: &BTreeMap<String, String>, head: bool) -> Result<Vec<String>, SpecError> {
    let mut args = Vec::new();
    for (key, value) in params {
        if let Some((_, why)) = OPERATOR_PARAMS.iter().find(|(k, _)| k == key) {
            return Err(SpecError::ParamTheOperatorSets { params: field.to_string(), key: key.clone(), why });
        }
        if key == "block" {
            if value != "true" {
                return Err(SpecError::NotBlocking { params: field.to_string(), value: value.clone() });
            }
            continue;
        }
        let known = COMMON_PARAMS.contains(&key.as_str()) || (head && HEAD_PARAMS.contains(&key.as_str()));
        if !known {
            let mut allowed: Vec<&str> = COMMON_PARAMS.to_vec();
            if head {
                allowed.extend(HEAD_PARAMS);
            }
            let role = if head { "the head" } else { "a worker" };
            return Err(SpecError::UnknownParam { params: field.to_string(), key: key.clone(), role, allowed });
        }
        if key == "port" || key == "dashboard-port" {
            continue; // passed explicitly
        }
        check_value(field, key, value)?;
        if key == "num-cpus" || key == "num-gpus" {
            continue; // see explicit_resources
        }
        args.push(format!("--{key}={value}"));
    }
    Ok(args)
}

/// Values `oxray start` would refuse (and crash-loop the pod) fail the spec instead.
fn check_value(field: &str, key: &str, value: &str) -> Result<(), SpecError> {
    let expected = match key {
        "num-gpus" if value.parse::<u32>().is_err() => "a whole number of GPUs",
        "object-store-memory" if value.parse::<u64>().map_or(true, |b| b == 0) => {
            "a number of bytes, such as 268435456"
        }
        "tls-client-auth" if !["none", "require"].contains(&value) => "none or require",
        "resources" => {
            let parsed = custom_resources(field, value)?;
            if let Some(name) = parsed.keys().find(|k| ["CPU", "GPU", "memory"].contains(&k.as_str())) {
                return Err(SpecError::BuiltInResource { params: field.to_string(), name: name.clone() });
            }
            return Ok(());
        }
        _ => return Ok(()),
    };
    Err(SpecError::BadParam { params: field.to_string(), key: key.to_string(), value: value.to_string(), expected })
}

/// `rayStartParams.resources` (at `params_field`): a JSON object of custom resource amounts.
fn custom_resources(params_field: &str, value: &str) -> Result<ResourceMap, SpecError> {
    serde_json::from_str(value).map_err(|error| SpecError::ResourcesNotJson {
        params: params_field.to_string(),
        value: value.to_string(),
        error,
    })
}

/// The port `params` (at `params_field`) sets under `key`, else `default`.
fn port_param(
    params_field: &str,
    params: &BTreeMap<String, String>,
    key: &str,
    default: u16,
) -> Result<u16, SpecError> {
    match params.get(key) {
        None => Ok(default),
        Some(v) => v.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| SpecError::BadParam {
            params: params_field.to_string(),
            key: key.to_string(),
            value: v.clone(),
            expected: "a port number from 1 to 65535",
        }),
    }
}

/// What one node of this role offers: `num-cpus`/`num-gpus`/`resources` in
/// `rayStartParams`, else the first container's CPU and `nvidia.com/gpu` limits
/// (or requests), as KubeRay derives them. `None` when the CPUs are unknown.
fn node_resources(
    field: &str,
    params: &BTreeMap<String, String>,
    template: &PodTemplateSpec,
) -> Result<Option<ResourceMap>, SpecError> {
    let container = template.spec.as_ref().and_then(|s| s.containers.first());
    let limits = container.and_then(|c| c.resources.as_ref());
    let from_pod = |name: &str| -> Result<Option<f64>, SpecError> {
        let quantity = limits.and_then(|r| {
            r.limits.as_ref().and_then(|l| l.get(name)).or(r.requests.as_ref().and_then(|l| l.get(name)))
        });
        quantity
            .map(|q| {
                parse_quantity(&q.0).ok_or_else(|| SpecError::BadQuantity {
                    role: field.to_string(),
                    resource: name.to_string(),
                    quantity: q.0.clone(),
                })
            })
            .transpose()
    };
    let number = |key: &str| -> Result<Option<f64>, SpecError> {
        params
            .get(key)
            .map(|v| {
                v.parse::<f64>().ok().filter(|n| n.is_finite() && *n >= 0.0).ok_or_else(|| SpecError::BadParam {
                    params: format!("{field}.rayStartParams"),
                    key: key.to_string(),
                    value: v.clone(),
                    expected: "a number of 0 or more",
                })
            })
            .transpose()
    };
    // A fractional CPU limit rounds up, as KubeRay does (a 500m worker still runs 1-CPU tasks).
    let cpus = match number("num-cpus")? {
        Some(n) => Some(n),
        None => from_pod("cpu")?.map(f64::ceil),
    };
    let gpus = match number("num-gpus")? {
        Some(n) => Some(n),
        None => from_pod("nvidia.com/gpu")?,
    };
    let Some(cpus) = cpus else { return Ok(None) };
    let mut resources = ResourceMap::new();
    resources.insert("CPU".to_string(), cpus);
    if let Some(g) = gpus.filter(|g| *g > 0.0) {
        resources.insert("GPU".to_string(), g);
    }
    if let Some(custom) = params.get("resources") {
        resources.extend(custom_resources(&format!("{field}.rayStartParams"), custom)?);
    }
    Ok(Some(resources))
}

/// `--num-cpus`/`--num-gpus` as the scheduler will count them, so that a node
/// in a CPU-limited pod does not offer every core of its host.
fn explicit_resources(params: &BTreeMap<String, String>, resources: Option<&ResourceMap>) -> Vec<String> {
    let mut args = Vec::new();
    if let Some(cpus) = resources.and_then(|r| r.get("CPU")) {
        args.push(format!("--num-cpus={}", trim_number(*cpus)));
    }
    match (params.get("num-gpus"), resources.and_then(|r| r.get("GPU"))) {
        (Some(g), _) => args.push(format!("--num-gpus={g}")),
        (None, Some(g)) => args.push(format!("--num-gpus={}", trim_number(*g))),
        _ => {}
    }
    args
}

fn trim_number(n: f64) -> String {
    if n.fract() == 0.0 { format!("{}", n as i64) } else { format!("{n}") }
}
