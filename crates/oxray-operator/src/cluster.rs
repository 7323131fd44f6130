//! An `OxrayCluster`'s reconcile step as a pure function: the cluster and what
//! the operator observed (its pods, Secret, Service, the head's demand) in; the
//! objects to create, the pods to delete and the new status out. The
//! controller (`controller.rs`) does the I/O; `oxray-operator render` prints
//! the same objects for `podman kube play`.

use crate::autoscale::{self, Demand, GroupState, WorkerView};
use crate::crd::{Condition, HeadStatus, OxrayCluster, OxrayClusterStatus, WorkerGroupStatus};
use crate::error::{CaError, DemandError};
use crate::resources::describe;
use crate::spec::{self, ClusterPlanSpec, GroupPlan, METRICS_PORT, STATE_DIR, STATE_VOLUME};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource, ObjectFieldSelector, Pod, PodSpec, Secret,
    SecretKeySelector, Service, ServicePort, ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;
use std::collections::{BTreeMap, BTreeSet};

/// Every object the operator makes carries this label with the cluster's name.
pub const CLUSTER_LABEL: &str = "oxray.io/cluster";
/// `head` or `worker`.
pub const NODE_TYPE_LABEL: &str = "oxray.io/node-type";
/// A worker's group.
pub const GROUP_LABEL: &str = "oxray.io/group";
/// The Secret's key holding the token.
pub const TOKEN_KEY: &str = "token";
/// The env var the `oxray` CLI reads the cluster token from.
const TOKEN_ENV: &str = "OXRAY_TOKEN";
/// The env var a worker's command joins (`oxray start --address`).
pub const HEAD_ADDRESS_ENV: &str = "OXRAY_HEAD_ADDRESS";

/// The memory-backed volume mounted at /dev/shm.
const SHM_VOLUME: &str = "oxray-shm";

/// The worker's init container: waits until the head's port answers.
const WAIT_FOR_HEAD: &str = "import os, socket, time
host, port = os.environ['OXRAY_HEAD_ADDRESS'].rsplit(':', 1)
while True:
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
        break
    except OSError as e:
        print(f'waiting for the head at {host}:{port}: {e}', flush=True)
        time.sleep(2)
";

/// An object to create.
#[derive(Clone, Debug)]
pub enum Child {
    Secret(Box<Secret>),
    Service(Box<Service>),
    Pod(Box<Pod>),
}

/// One of the cluster's pods, as observed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ObservedPod {
    pub name: String,
    /// The worker group; `None` for the head.
    pub group: Option<String>,
    /// `Pending`, `Running`, `Succeeded`, `Failed`.
    pub phase: Option<String>,
    /// Its `Ready` condition is true.
    pub ready: bool,
    /// It has a deletion timestamp.
    pub deleting: bool,
    pub ip: Option<String>,
}

/// What the operator saw of a cluster's parts.
#[derive(Debug, Default)]
pub struct Observed {
    /// Objects under this cluster's names that it does not own (no ownerReference to it): never
    /// adopted, they stop the cluster with a condition naming them.
    pub foreign: Vec<String>,
    pub secret_exists: bool,
    pub service_exists: bool,
    pub service_ip: Option<String>,
    pub pods: Vec<ObservedPod>,
    /// The head's report, when it could be read (autoscaling needs it).
    pub demand: Option<Demand>,
    /// Why the head could not be asked, when it could not.
    pub demand_error: Option<DemandError>,
    /// Why the CA of an HTTPS head (`spec.tls`) cannot be used, when it cannot: then the operator
    /// does not call the head at all.
    pub head_ca_error: Option<CaError>,
}

/// What to do.
#[derive(Clone, Debug, Default)]
pub struct ClusterPlan {
    pub create: Vec<Child>,
    pub delete_pods: Vec<String>,
    pub status: OxrayClusterStatus,
}

/// The names of the cluster's parts.
pub fn secret_name(cluster: &str) -> String {
    format!("{cluster}-token")
}
pub fn service_name(cluster: &str) -> String {
    format!("{cluster}-head-svc")
}
/// The head Service's DNS name, what workers, drivers and the operator reach the head by.
pub fn service_host(cluster: &str, namespace: &str) -> String {
    format!("{}.{namespace}.svc", service_name(cluster))
}
pub fn head_pod_name(cluster: &str) -> String {
    format!("{cluster}-head")
}
fn worker_pod_name(cluster: &str, group: &str, index: usize) -> String {
    format!("{cluster}-worker-{group}-{index}")
}

/// The reconcile step. `new_token` is used only when the Secret must be made;
/// `now` is an RFC 3339 time for the conditions.
pub fn plan(cluster: &OxrayCluster, observed: &Observed, new_token: &str, now: &str) -> ClusterPlan {
    let name = cluster.metadata.name.clone().unwrap_or_default();
    let previous = cluster.status.clone().unwrap_or_default();
    let generation = cluster.metadata.generation;
    let spec = match spec::check(&name, &cluster.spec) {
        Ok(spec) => spec,
        Err(error) => {
            let message = error.to_string();
            let mut status = previous.clone();
            status.state = Some("failed".to_string());
            status.reason = Some(message.clone());
            status.observed_generation = generation;
            let reason = error.condition_reason();
            set_condition(&mut status.conditions, &previous.conditions, "SpecValid", false, reason, &message, now);
            set_condition(
                &mut status.conditions,
                &previous.conditions,
                "Ready",
                false,
                reason,
                error.ready_message(),
                now,
            );
            return ClusterPlan { create: vec![], delete_pods: vec![], status };
        }
    };
    if !observed.foreign.is_empty() {
        let message = format!(
            "{} already exist{} without this OxrayCluster as owner: the operator never adopts what it did not \
             make (its token or routing could be someone else's); delete {} or give the cluster another name",
            observed.foreign.join(" and "),
            if observed.foreign.len() == 1 { "s" } else { "" },
            if observed.foreign.len() == 1 { "it" } else { "them" },
        );
        let mut status = previous.clone();
        status.state = Some("failed".to_string());
        status.reason = Some(message.clone());
        status.observed_generation = generation;
        set_condition(&mut status.conditions, &previous.conditions, "Ready", false, "Conflict", &message, now);
        return ClusterPlan { create: vec![], delete_pods: vec![], status };
    }
    let namespace = cluster.metadata.namespace.clone().unwrap_or_else(|| "default".to_string());
    let parts = Parts::new(cluster, &name, &namespace, &spec);
    let mut plan = ClusterPlan::default();

    if !observed.secret_exists {
        plan.create.push(Child::Secret(Box::new(parts.secret(new_token))));
    }
    if !observed.service_exists {
        plan.create.push(Child::Service(Box::new(parts.service())));
    }

    // The head: replaced when it ended; made again once the old one is gone.
    let head = observed.pods.iter().find(|p| p.group.is_none() && p.name == head_pod_name(&name));
    match head {
        None => plan.create.push(Child::Pod(Box::new(parts.head_pod()))),
        Some(p) if !p.deleting && ended(p) => plan.delete_pods.push(p.name.clone()),
        Some(_) => {}
    }

    // Workers of groups no longer in the spec, and workers that ended, go.
    for pod in &observed.pods {
        let Some(group) = &pod.group else { continue };
        if pod.deleting {
            continue;
        }
        if !spec.groups.iter().any(|g| &g.name == group) || ended(pod) {
            plan.delete_pods.push(pod.name.clone());
        }
    }
    let live = |g: &GroupPlan| -> Vec<&ObservedPod> {
        observed
            .pods
            .iter()
            .filter(|p| p.group.as_deref() == Some(g.name.as_str()) && !p.deleting && !ended(p))
            .collect()
    };

    // Each group's size: the spec's, or the autoscaler's.
    let mut desired: Vec<i32> = spec.groups.iter().map(|g| g.replicas).collect();
    let mut remove: Vec<String> = Vec::new();
    if spec.autoscaling {
        let states: Vec<GroupState<'_>> = spec
            .groups
            .iter()
            .map(|g| GroupState {
                plan: g,
                baseline: previous
                    .worker_groups
                    .iter()
                    .find(|s| s.group_name == g.name)
                    .map_or(g.replicas, |s| s.desired_replicas),
                workers: live(g).iter().map(|p| WorkerView { pod: p.name.clone(), ip: p.ip.clone() }).collect(),
            })
            .collect();
        match &observed.demand {
            Some(demand) => {
                let decision = autoscale::decide(&states, demand, spec.idle_timeout_s.saturating_mul(1000));
                desired = decision.desired;
                remove = decision.remove;
                plan.status.unschedulable_demand = (!decision.unschedulable.is_empty()).then(|| {
                    let shapes: Vec<String> = decision.unschedulable.iter().map(describe).collect();
                    format!("no worker group can run work that needs {}", shapes.join(", "))
                });
            }
            None => {
                // Without the head's word nothing is removed: workers that exist stay.
                desired = states.iter().map(|s| s.current().clamp(s.plan.min, s.plan.max)).collect();
                plan.status.unschedulable_demand = previous.unschedulable_demand.clone();
            }
        }
    }

    let mut groups_status = Vec::new();
    for (group, want) in spec.groups.iter().zip(&desired) {
        let pods = live(group);
        let want = *want as usize;
        if pods.len() < want {
            let taken: BTreeSet<&str> = observed.pods.iter().map(|p| p.name.as_str()).collect();
            let mut index = 0;
            for _ in pods.len()..want {
                while taken.contains(worker_pod_name(&name, &group.name, index).as_str()) {
                    index += 1;
                }
                plan.create.push(Child::Pod(Box::new(parts.worker_pod(group, index))));
                index += 1;
            }
        } else if pods.len() > want {
            let mut order: Vec<&ObservedPod> = pods.clone();
            // Idle workers the autoscaler picked, then ones not ready, then the newest.
            order.sort_by_key(|p| {
                (!remove.contains(&p.name), p.ready, std::cmp::Reverse(autoscale::pod_index(&p.name)))
            });
            plan.delete_pods.extend(order.iter().take(pods.len() - want).map(|p| p.name.clone()));
        }
        let ready = pods.iter().filter(|p| p.ready && !plan.delete_pods.contains(&p.name)).count() as i32;
        groups_status.push(WorkerGroupStatus {
            group_name: group.name.clone(),
            replicas: pods.len() as i32,
            ready_replicas: ready,
            desired_replicas: want as i32,
        });
    }

    let head_ready = head.is_some_and(|p| p.ready && !p.deleting);
    let status = &mut plan.status;
    let host = service_host(&name, &namespace);
    status.head = Some(HeadStatus {
        service_name: service_name(&name),
        address: format!("{host}:{}", spec.head_port),
        dashboard_url: format!("{}://{host}:{}", spec.scheme(), spec.dashboard_port),
        pod_ip: head.and_then(|p| p.ip.clone()),
        service_ip: observed.service_ip.clone(),
    });
    status.ready_worker_replicas = groups_status.iter().map(|g| g.ready_replicas).sum();
    status.available_worker_replicas = status.ready_worker_replicas;
    status.desired_worker_replicas = groups_status.iter().map(|g| g.desired_replicas).sum();
    let all_workers_ready = groups_status.iter().all(|g| g.ready_replicas >= g.desired_replicas);
    status.worker_groups = groups_status;
    status.observed_generation = generation;
    let ready = head_ready && all_workers_ready;
    status.state = Some(if ready { "ready" } else { "pending" }.to_string());
    status.reason = if ready {
        None
    } else if !head_ready {
        Some("waiting for the head pod to be ready".to_string())
    } else {
        Some(format!(
            "waiting for workers: {} of {} ready",
            status.ready_worker_replicas, status.desired_worker_replicas
        ))
    };
    if spec.autoscaling
        && let Some(error) = &observed.demand_error
        && head_ready
    {
        status.reason = Some(error.cluster_reason());
    }
    if spec.https_ca.is_some() {
        let (usable, reason, message) = match &observed.head_ca_error {
            Some(error) => {
                status.reason = Some(error.cluster_reason());
                (false, "CaUnusable", error.to_string())
            }
            None => (true, "CaUsable", "the operator verifies the head's certificate with spec.tls".to_string()),
        };
        set_condition(
            &mut status.conditions,
            &previous.conditions,
            "HeadCertificateTrusted",
            usable,
            reason,
            &message,
            now,
        );
    }
    set_condition(&mut status.conditions, &previous.conditions, "SpecValid", true, "Valid", "the spec is valid", now);
    set_condition(
        &mut status.conditions,
        &previous.conditions,
        "HeadPodReady",
        head_ready,
        if head_ready { "HeadPodRunningAndReady" } else { "HeadPodNotReady" },
        if head_ready { "the head pod is ready" } else { "the head pod is not ready yet" },
        now,
    );
    let message = status.reason.clone().unwrap_or_else(|| "the head and every desired worker are ready".to_string());
    set_condition(
        &mut status.conditions,
        &previous.conditions,
        "Ready",
        ready,
        if ready { "AllPodsReady" } else { "PodsNotReady" },
        &message,
        now,
    );
    plan
}

/// A pod whose containers stopped for good.
fn ended(pod: &ObservedPod) -> bool {
    matches!(pod.phase.as_deref(), Some("Failed" | "Succeeded"))
}

/// Sets condition `type_`, keeping its transition time when its status did not change.
pub(crate) fn set_condition(
    conditions: &mut Vec<Condition>,
    previous: &[Condition],
    type_: &str,
    value: bool,
    reason: &str,
    message: &str,
    now: &str,
) {
    let value = if value { "True" } else { "False" };
    let since = previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == value)
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| now.to_string());
    conditions.retain(|c| c.type_ != type_);
    conditions.push(Condition {
        type_: type_.to_string(),
        status: value.to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
        last_transition_time: Some(since),
    });
}

/// Renders the cluster's objects.
pub struct Parts<'a> {
    name: &'a str,
    namespace: &'a str,
    spec: &'a ClusterPlanSpec,
    cluster: &'a OxrayCluster,
    owner: Option<OwnerReference>,
}

impl<'a> Parts<'a> {
    pub fn new(cluster: &'a OxrayCluster, name: &'a str, namespace: &'a str, spec: &'a ClusterPlanSpec) -> Self {
        // Without a uid (a manifest not yet applied) there is nothing to own by.
        let owner = cluster.controller_owner_ref(&());
        Self { name, namespace, spec, cluster, owner }
    }

    fn meta(&self, name: String, node_type: Option<&str>, group: Option<&str>) -> ObjectMeta {
        let mut labels = BTreeMap::from([
            (CLUSTER_LABEL.to_string(), self.name.to_string()),
            ("app.kubernetes.io/name".to_string(), "oxray".to_string()),
            ("app.kubernetes.io/created-by".to_string(), "oxray-operator".to_string()),
        ]);
        if let Some(t) = node_type {
            labels.insert(NODE_TYPE_LABEL.to_string(), t.to_string());
        }
        if let Some(g) = group {
            labels.insert(GROUP_LABEL.to_string(), g.to_string());
        }
        ObjectMeta {
            name: Some(name),
            namespace: Some(self.namespace.to_string()),
            labels: Some(labels),
            owner_references: self.owner.clone().map(|o| vec![o]),
            ..Default::default()
        }
    }

    /// The cluster token, private to the cluster's pods.
    pub fn secret(&self, token: &str) -> Secret {
        Secret {
            metadata: self.meta(secret_name(self.name), None, None),
            type_: Some("Opaque".to_string()),
            string_data: Some(BTreeMap::from([(TOKEN_KEY.to_string(), token.to_string())])),
            ..Default::default()
        }
    }

    /// The head's Service: gRPC (what workers and drivers join), the Jobs API and dashboard, metrics.
    pub fn service(&self) -> Service {
        let selector = BTreeMap::from([
            (CLUSTER_LABEL.to_string(), self.name.to_string()),
            (NODE_TYPE_LABEL.to_string(), "head".to_string()),
        ]);
        let port = |name: &str, port: u16| ServicePort {
            name: Some(name.to_string()),
            port: i32::from(port),
            target_port: Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i32::from(port))),
            protocol: Some("TCP".to_string()),
            ..Default::default()
        };
        Service {
            metadata: self.meta(service_name(self.name), Some("head"), None),
            spec: Some(ServiceSpec {
                type_: Some(self.spec.service_type.clone()),
                selector: Some(selector),
                ports: Some(vec![
                    port("gcs", self.spec.head_port),
                    port("dashboard", self.spec.dashboard_port),
                    port("metrics", METRICS_PORT),
                ]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    pub fn head_pod(&self) -> Pod {
        let template = &self.cluster.spec.head_group_spec.template;
        let mut line = vec!["exec oxray start --head --block".to_string()];
        line.push(node_ip_arg());
        line.extend(self.spec.head_args.iter().map(|a| shell_quote(a)));
        let ports = vec![
            container_port("gcs", self.spec.head_port),
            container_port("dashboard", self.spec.dashboard_port),
            container_port("metrics", METRICS_PORT),
        ];
        let mut pod = self.pod(template, head_pod_name(self.name), "head", None, line.join(" "), ports);
        if self.spec.head_has_state_volume
            && let Some(container) = pod.spec.as_mut().and_then(|s| s.containers.first_mut())
        {
            let mounts = container.volume_mounts.get_or_insert_with(Vec::new);
            if !mounts.iter().any(|m| m.name == STATE_VOLUME) {
                mounts.push(VolumeMount {
                    name: STATE_VOLUME.to_string(),
                    mount_path: STATE_DIR.to_string(),
                    ..Default::default()
                });
            }
        }
        pod
    }

    pub fn worker_pod(&self, group: &GroupPlan, index: usize) -> Pod {
        let template = self
            .cluster
            .spec
            .worker_group_specs
            .iter()
            .find(|g| g.group_name == group.name)
            .map(|g| &g.template)
            .cloned()
            .unwrap_or_default();
        let mut line = vec![format!("exec oxray start --address=\"${HEAD_ADDRESS_ENV}\" --block")];
        line.push(node_ip_arg());
        line.extend(group.args.iter().map(|a| shell_quote(a)));
        let ports = vec![container_port("metrics", METRICS_PORT)];
        let name = worker_pod_name(self.name, &group.name, index);
        let mut pod = self.pod(&template, name, "worker", Some(&group.name), line.join(" "), ports);
        let address = EnvVar {
            name: HEAD_ADDRESS_ENV.to_string(),
            value: Some(format!("{}:{}", service_host(self.name, self.namespace), self.spec.head_port)),
            value_from: None,
        };
        if let Some(spec) = pod.spec.as_mut() {
            let Some(container) = spec.containers.first_mut() else { return pod };
            container.env.get_or_insert_with(Vec::new).push(address.clone());
            // A worker that starts before the head would fail to join: wait for the head's port first (KubeRay's wait-gcs-ready).
            // The oxray container's security context and resources, so that a namespace's pod security
            // level and quotas accept it as they accept the template.
            let wait = Container {
                name: "wait-for-head".to_string(),
                image: container.image.clone(),
                image_pull_policy: container.image_pull_policy.clone(),
                command: Some(vec!["python3".to_string(), "-c".to_string(), WAIT_FOR_HEAD.to_string()]),
                env: Some(vec![address]),
                security_context: container.security_context.clone(),
                resources: container.resources.clone(),
                ..Default::default()
            };
            spec.init_containers.get_or_insert_with(Vec::new).insert(0, wait);
        }
        pod
    }

    fn pod(
        &self,
        template: &k8s_openapi::api::core::v1::PodTemplateSpec,
        name: String,
        node_type: &str,
        group: Option<&str>,
        command: String,
        ports: Vec<ContainerPort>,
    ) -> Pod {
        let mut meta = self.meta(name, Some(node_type), group);
        if let Some(template_meta) = &template.metadata {
            let labels = meta.labels.get_or_insert_with(BTreeMap::new);
            for (k, v) in template_meta.labels.iter().flatten() {
                labels.entry(k.clone()).or_insert_with(|| v.clone());
            }
            meta.annotations = template_meta.annotations.clone();
        }
        let mut pod_spec: PodSpec = template.spec.clone().unwrap_or_default();
        if let Some(container) = pod_spec.containers.first_mut() {
            set_oxray_container(container, self.name, command, ports);
            // The object store's arena lives in /dev/shm, which runtimes cap at 64 MiB: give it memory (as KubeRay).
            let mounts = container.volume_mounts.get_or_insert_with(Vec::new);
            if !mounts.iter().any(|m| m.mount_path == "/dev/shm") {
                mounts.push(VolumeMount {
                    name: SHM_VOLUME.to_string(),
                    mount_path: "/dev/shm".to_string(),
                    ..Default::default()
                });
                pod_spec.volumes.get_or_insert_with(Vec::new).push(Volume {
                    name: SHM_VOLUME.to_string(),
                    empty_dir: Some(EmptyDirVolumeSource { medium: Some("Memory".to_string()), size_limit: None }),
                    ..Default::default()
                });
            }
        }
        Pod { metadata: meta, spec: Some(pod_spec), status: None }
    }
}

/// The pod's IP (the downward API), else what `hostname -i` says (for runtimes without it).
fn node_ip_arg() -> String {
    "--node-ip-address=\"${OXRAY_POD_IP:-$(hostname -i | cut -d' ' -f1)}\"".to_string()
}

fn container_port(name: &str, port: u16) -> ContainerPort {
    ContainerPort {
        name: Some(name.to_string()),
        container_port: i32::from(port),
        protocol: Some("TCP".to_string()),
        ..Default::default()
    }
}

fn set_oxray_container(container: &mut Container, cluster: &str, command: String, ports: Vec<ContainerPort>) {
    container.command = Some(vec!["/bin/sh".to_string(), "-c".to_string()]);
    container.args = Some(vec![command]);
    let env = container.env.get_or_insert_with(Vec::new);
    let field = |path: &str| EnvVarSource {
        field_ref: Some(ObjectFieldSelector { field_path: path.to_string(), api_version: None }),
        ..Default::default()
    };
    env.push(EnvVar {
        name: TOKEN_ENV.to_string(),
        value: None,
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret_name(cluster),
                key: TOKEN_KEY.to_string(),
                optional: None,
            }),
            ..Default::default()
        }),
    });
    env.push(EnvVar { name: "OXRAY_POD_IP".to_string(), value: None, value_from: Some(field("status.podIP")) });
    env.push(EnvVar { name: "OXRAY_POD_NAME".to_string(), value: None, value_from: Some(field("metadata.name")) });
    let existing = container.ports.get_or_insert_with(Vec::new);
    for port in ports {
        if !existing.iter().any(|p| p.container_port == port.container_port) {
            existing.push(port);
        }
    }
}

/// `--key=value` quoted for `sh` (single quotes, with `'` written as `'\''`).
fn shell_quote(arg: &str) -> String {
    if arg.chars().all(|c| c.is_ascii_alphanumeric() || "-=_.,/:@".contains(c)) {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests;
