//! The reconcile step, spec in, objects and status out.

use super::*;
use crate::autoscale::NodeUsage;
use crate::crd::{AutoscalerOptions, ClusterTls, HeadGroupSpec, OxrayClusterSpec, WorkerGroupSpec};
use crate::error::HeadApiError;
use k8s_openapi::api::core::v1::{PodTemplateSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

fn template(cpu_limit: Option<&str>) -> PodTemplateSpec {
    let resources = cpu_limit.map(|cpu| ResourceRequirements {
        limits: Some(BTreeMap::from([("cpu".to_string(), Quantity(cpu.to_string()))])),
        ..Default::default()
    });
    PodTemplateSpec {
        metadata: None,
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "oxray".to_string(),
                image: Some("localhost/oxray:test".to_string()),
                resources,
                ..Default::default()
            }],
            ..Default::default()
        }),
    }
}

fn group(name: &str, replicas: i32, min: i32, max: i32) -> WorkerGroupSpec {
    WorkerGroupSpec {
        group_name: name.to_string(),
        replicas: Some(replicas),
        min_replicas: Some(min),
        max_replicas: Some(max),
        ray_start_params: BTreeMap::from([("num-cpus".to_string(), "2".to_string())]),
        template: template(None),
        ..Default::default()
    }
}

fn cluster(groups: Vec<WorkerGroupSpec>) -> OxrayCluster {
    let mut c = OxrayCluster::new(
        "demo",
        OxrayClusterSpec {
            head_group_spec: HeadGroupSpec {
                ray_start_params: BTreeMap::from([("num-cpus".to_string(), "0".to_string())]),
                template: template(None),
                service_type: None,
                ..Default::default()
            },
            worker_group_specs: groups,
            ..Default::default()
        },
    );
    c.metadata.namespace = Some("ml".to_string());
    c.metadata.uid = Some("uid-1".to_string());
    c.metadata.generation = Some(3);
    c
}

fn pod(name: &str, group: Option<&str>, ready: bool, ip: Option<&str>) -> ObservedPod {
    ObservedPod {
        name: name.to_string(),
        group: group.map(str::to_string),
        phase: Some(if ready { "Running" } else { "Pending" }.to_string()),
        ready,
        deleting: false,
        ip: ip.map(str::to_string),
    }
}

fn all_present(pods: Vec<ObservedPod>) -> Observed {
    Observed {
        secret_exists: true,
        service_exists: true,
        service_ip: Some("10.96.0.10".into()),
        pods,
        ..Default::default()
    }
}

fn created_pods(plan: &ClusterPlan) -> Vec<Pod> {
    plan.create.iter().filter_map(|c| if let Child::Pod(p) = c { Some((**p).clone()) } else { None }).collect()
}

fn names(pods: &[Pod]) -> Vec<String> {
    pods.iter().map(|p| p.metadata.name.clone().unwrap()).collect()
}

const NOW: &str = "2026-11-25T00:00:00Z";

/// A change to a valid spec that makes it invalid.
type Edit = Box<dyn Fn(&mut OxrayCluster)>;

#[test]
fn a_new_cluster_gets_its_secret_service_head_and_workers_all_owned() {
    let c = cluster(vec![group("cpu", 2, 0, 5)]);
    let plan = plan(&c, &Observed::default(), "tok-123", NOW);
    assert_eq!(plan.create.len(), 5, "secret, service, head, 2 workers");
    let Child::Secret(secret) = &plan.create[0] else { panic!("the Secret comes first") };
    assert_eq!(secret.metadata.name.as_deref(), Some("demo-token"));
    assert_eq!(secret.string_data.as_ref().unwrap()["token"], "tok-123");
    let Child::Service(service) = &plan.create[1] else { panic!("then the Service") };
    let ports: Vec<i32> = service.spec.as_ref().unwrap().ports.as_ref().unwrap().iter().map(|p| p.port).collect();
    assert_eq!(ports, vec![6379, 8265, 8080]);
    assert_eq!(service.spec.as_ref().unwrap().selector.as_ref().unwrap()["oxray.io/node-type"], "head");
    let pods = created_pods(&plan);
    assert_eq!(names(&pods), vec!["demo-head", "demo-worker-cpu-0", "demo-worker-cpu-1"]);
    for child in &plan.create {
        let meta = match child {
            Child::Secret(s) => &s.metadata,
            Child::Service(s) => &s.metadata,
            Child::Pod(p) => &p.metadata,
        };
        let owner = &meta.owner_references.as_ref().expect("owned by the cluster")[0];
        assert_eq!((owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()), ("OxrayCluster", "demo", "uid-1"));
        assert_eq!(owner.controller, Some(true));
        assert_eq!(meta.labels.as_ref().unwrap()["oxray.io/cluster"], "demo");
        assert_eq!(meta.namespace.as_deref(), Some("ml"));
    }
    assert_eq!(plan.status.state.as_deref(), Some("pending"));
    assert_eq!(plan.status.desired_worker_replicas, 2);
    assert_eq!(plan.status.head.as_ref().unwrap().address, "demo-head-svc.ml.svc:6379");
}

#[test]
fn pods_run_oxray_start_with_the_token_from_the_secret() {
    let c = cluster(vec![group("cpu", 1, 0, 5)]);
    let pods = created_pods(&plan(&c, &Observed::default(), "t", NOW));
    let head = pods[0].spec.as_ref().unwrap().containers[0].clone();
    assert_eq!(head.command.as_deref(), Some(&["/bin/sh".to_string(), "-c".to_string()][..]));
    let line = &head.args.as_ref().unwrap()[0];
    assert!(line.starts_with("exec oxray start --head --block"), "{line}");
    for part in [
        "--port=6379",
        "--dashboard-port=8265",
        "--dashboard-host=0.0.0.0",
        "--num-cpus=0",
        "--metrics-export-port=8080",
    ] {
        assert!(line.contains(part), "{part} missing from {line}");
    }
    assert!(!line.contains("--state-dir"), "no state volume, no state dir: {line}");
    let token = head.env.as_ref().unwrap().iter().find(|e| e.name == "OXRAY_TOKEN").unwrap();
    let key = token.value_from.as_ref().unwrap().secret_key_ref.as_ref().unwrap();
    assert_eq!((key.name.as_str(), key.key.as_str()), ("demo-token", "token"));
    assert!(token.value.is_none(), "the token never appears in the pod spec");

    let worker = pods[1].spec.as_ref().unwrap().containers[0].clone();
    let line = &worker.args.as_ref().unwrap()[0];
    assert!(line.starts_with("exec oxray start --address=\"$OXRAY_HEAD_ADDRESS\" --block"), "{line}");
    assert!(line.contains("--num-cpus=2"), "{line}");
    let address = worker.env.as_ref().unwrap().iter().find(|e| e.name == "OXRAY_HEAD_ADDRESS").unwrap();
    assert_eq!(address.value.as_deref(), Some("demo-head-svc.ml.svc:6379"));
    let init = &pods[1].spec.as_ref().unwrap().init_containers.as_ref().unwrap()[0];
    assert_eq!(init.name, "wait-for-head", "a worker waits for the head before joining");
    assert_eq!(init.image.as_deref(), Some("localhost/oxray:test"));
    assert!(pods[0].spec.as_ref().unwrap().init_containers.is_none(), "the head waits for nothing");
    for pod in &pods {
        let spec = pod.spec.as_ref().unwrap();
        let mount = spec.containers[0].volume_mounts.as_ref().unwrap().iter().find(|m| m.mount_path == "/dev/shm");
        let volume = &spec.volumes.as_ref().unwrap()[0];
        assert_eq!(mount.unwrap().name, volume.name);
        assert_eq!(
            volume.empty_dir.as_ref().unwrap().medium.as_deref(),
            Some("Memory"),
            "the arena gets memory, not 64 MiB"
        );
    }
}

#[test]
fn a_cpu_limit_becomes_num_cpus() {
    let mut g = group("cpu", 1, 0, 5);
    g.ray_start_params.clear();
    g.template = template(Some("3500m"));
    let c = cluster(vec![g]);
    let pods = created_pods(&plan(&c, &Observed::default(), "t", NOW));
    let line = pods[1].spec.as_ref().unwrap().containers[0].args.as_ref().unwrap()[0].clone();
    assert!(line.contains("--num-cpus=4"), "a 3.5-CPU limit offers 4 CPUs, as KubeRay rounds up: {line}");
}

#[test]
fn a_state_volume_keeps_the_heads_state() {
    let mut c = cluster(vec![]);
    let spec = c.spec.head_group_spec.template.spec.as_mut().unwrap();
    spec.volumes = Some(vec![Volume { name: "oxray-state".to_string(), ..Default::default() }]);
    let pods = created_pods(&plan(&c, &Observed::default(), "t", NOW));
    let container = &pods[0].spec.as_ref().unwrap().containers[0];
    assert!(container.args.as_ref().unwrap()[0].contains("--state-dir=/oxray/state"));
    let mount = container.volume_mounts.as_ref().unwrap().iter().find(|m| m.name == "oxray-state").unwrap();
    assert_eq!((mount.name.as_str(), mount.mount_path.as_str()), ("oxray-state", "/oxray/state"));
}

#[test]
fn ready_when_the_head_and_every_worker_are_ready() {
    let c = cluster(vec![group("cpu", 2, 0, 5)]);
    let observed = all_present(vec![
        pod("demo-head", None, true, Some("10.0.0.1")),
        pod("demo-worker-cpu-0", Some("cpu"), true, Some("10.0.0.2")),
        pod("demo-worker-cpu-1", Some("cpu"), false, None),
    ]);
    let p = plan(&c, &observed, "t", NOW);
    assert!(p.create.is_empty() && p.delete_pods.is_empty());
    assert_eq!(p.status.state.as_deref(), Some("pending"));
    assert_eq!(p.status.reason.as_deref(), Some("waiting for workers: 1 of 2 ready"));
    assert_eq!(
        p.status.worker_groups[0],
        WorkerGroupStatus { group_name: "cpu".into(), replicas: 2, ready_replicas: 1, desired_replicas: 2 }
    );

    let mut observed = observed;
    observed.pods[2] = pod("demo-worker-cpu-1", Some("cpu"), true, Some("10.0.0.3"));
    let p = plan(&c, &observed, "t", NOW);
    assert_eq!(p.status.state.as_deref(), Some("ready"));
    assert_eq!(p.status.ready_worker_replicas, 2);
    assert_eq!(p.status.head.as_ref().unwrap().pod_ip.as_deref(), Some("10.0.0.1"));
    assert_eq!(p.status.head.as_ref().unwrap().service_ip.as_deref(), Some("10.96.0.10"));
    let ready = p.status.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(ready.status, "True");
    assert_eq!(p.status.observed_generation, Some(3));
}

#[test]
fn a_dead_worker_is_deleted_and_replaced_under_a_new_name() {
    let c = cluster(vec![group("cpu", 2, 0, 5)]);
    let mut dead = pod("demo-worker-cpu-0", Some("cpu"), false, Some("10.0.0.2"));
    dead.phase = Some("Failed".into());
    let observed = all_present(vec![
        pod("demo-head", None, true, Some("10.0.0.1")),
        dead,
        pod("demo-worker-cpu-1", Some("cpu"), true, Some("10.0.0.3")),
    ]);
    let p = plan(&c, &observed, "t", NOW);
    assert_eq!(p.delete_pods, vec!["demo-worker-cpu-0"]);
    assert_eq!(names(&created_pods(&p)), vec!["demo-worker-cpu-2"], "the old name is still taken");
}

#[test]
fn a_dead_head_is_deleted_then_made_again() {
    let c = cluster(vec![]);
    let mut head = pod("demo-head", None, false, None);
    head.phase = Some("Failed".into());
    let p = plan(&c, &all_present(vec![head.clone()]), "t", NOW);
    assert_eq!(p.delete_pods, vec!["demo-head"]);
    assert!(created_pods(&p).is_empty(), "not while the old one exists");
    head.deleting = true;
    assert!(created_pods(&plan(&c, &all_present(vec![head]), "t", NOW)).is_empty());
    assert_eq!(names(&created_pods(&plan(&c, &all_present(vec![]), "t", NOW))), vec!["demo-head"]);
}

#[test]
fn fewer_replicas_delete_workers_not_ready_first_then_the_newest() {
    let c = cluster(vec![group("cpu", 1, 0, 5)]);
    let observed = all_present(vec![
        pod("demo-head", None, true, Some("10.0.0.1")),
        pod("demo-worker-cpu-0", Some("cpu"), true, Some("10.0.0.2")),
        pod("demo-worker-cpu-1", Some("cpu"), false, None),
        pod("demo-worker-cpu-2", Some("cpu"), true, Some("10.0.0.4")),
    ]);
    let p = plan(&c, &observed, "t", NOW);
    assert_eq!(p.delete_pods, vec!["demo-worker-cpu-1", "demo-worker-cpu-2"]);
}

#[test]
fn a_removed_group_loses_its_pods() {
    let c = cluster(vec![group("cpu", 0, 0, 5)]);
    let observed =
        all_present(vec![pod("demo-head", None, true, None), pod("demo-worker-gpu-0", Some("gpu"), true, None)]);
    assert_eq!(plan(&c, &observed, "t", NOW).delete_pods, vec!["demo-worker-gpu-0"]);
}

#[test]
fn an_invalid_spec_fails_with_a_condition_and_touches_nothing() {
    let cases: Vec<(Edit, &str)> = vec![
        (Box::new(|c| c.spec.worker_group_specs[0].min_replicas = Some(9)), "minReplicas 9 is above maxReplicas 5"),
        (Box::new(|c| c.spec.worker_group_specs[0].group_name = "Bad_Name".into()), "groupName \"Bad_Name\""),
        (
            Box::new(|c| {
                c.spec.worker_group_specs[0].ray_start_params.insert("redis-password".into(), "x".into());
            }),
            "\"redis-password\", which `oxray start` for a worker does not take",
        ),
        (
            Box::new(|c| {
                c.spec.head_group_spec.ray_start_params.insert("token".into(), "x".into());
            }),
            "the operator generates the cluster token",
        ),
        (
            Box::new(|c| {
                c.spec.head_group_spec.ray_start_params.insert("num-cpus".into(), "many".into());
            }),
            "num-cpus is \"many\"; expected a number",
        ),
        (
            Box::new(|c| {
                c.spec.head_group_spec.template.spec.as_mut().unwrap().containers[0].command = Some(vec!["x".into()])
            }),
            "sets command or args",
        ),
        (Box::new(|c| c.spec.head_group_spec.service_type = Some("Ingress".into())), "serviceType is \"Ingress\""),
        (
            Box::new(|c| {
                c.spec.worker_group_specs[0].ray_start_params.insert("num-gpus".into(), "1.5".into());
            }),
            "num-gpus is \"1.5\"; expected a whole number of GPUs",
        ),
        (
            Box::new(|c| {
                c.spec.worker_group_specs[0].ray_start_params.insert("object-store-memory".into(), "2Gi".into());
            }),
            "object-store-memory is \"2Gi\"; expected a number of bytes",
        ),
        (
            Box::new(|c| {
                c.spec.worker_group_specs[0].ray_start_params.insert("resources".into(), r#"{"CPU": 4}"#.into());
            }),
            "resources sets \"CPU\"",
        ),
        (
            Box::new(|c| {
                c.spec.unknown.insert("suspend".into(), serde_json::json!(true));
            }),
            "spec.suspend is not a field oxray's operator supports",
        ),
        (
            Box::new(|c| {
                c.spec.worker_group_specs[0].unknown.insert("numOfHosts".into(), serde_json::json!(2));
            }),
            "spec.workerGroupSpecs[0].numOfHosts is not a field",
        ),
        (Box::new(|c| c.spec.worker_group_specs.push(group("cpu", 0, 0, 1))), "groupName \"cpu\" is used twice"),
        (
            Box::new(|c| {
                c.spec.enable_in_tree_autoscaling = Some(true);
                c.spec.autoscaler_options =
                    Some(AutoscalerOptions { upscaling_mode: Some("Conservative".into()), ..Default::default() });
            }),
            "upscalingMode \"Conservative\" is not supported",
        ),
        (
            Box::new(|c| {
                c.spec.enable_in_tree_autoscaling = Some(true);
                c.spec.worker_group_specs[0].ray_start_params.clear();
            }),
            "the autoscaler can't tell what a new worker offers",
        ),
        (
            Box::new(|c| {
                c.spec.head_group_spec.ray_start_params.insert("tls-cert".into(), "/certs/tls.crt".into());
            }),
            "the head's Jobs API speaks HTTPS only; set spec.tls.caSecretName",
        ),
        (
            Box::new(|c| c.spec.tls = Some(ClusterTls { ca_secret_name: "ca".into(), ..Default::default() })),
            "spec.tls is set but headGroupSpec.rayStartParams has no tls-cert",
        ),
    ];
    for (edit, expected) in cases {
        let mut c = cluster(vec![group("cpu", 1, 0, 5)]);
        edit(&mut c);
        let p = plan(&c, &Observed::default(), "t", NOW);
        assert!(p.create.is_empty() && p.delete_pods.is_empty(), "{expected}: nothing is touched");
        assert_eq!(p.status.state.as_deref(), Some("failed"));
        let reason = p.status.reason.unwrap();
        assert!(reason.contains(expected), "expected {expected:?} in {reason:?}");
        let valid = p.status.conditions.iter().find(|c| c.type_ == "SpecValid").unwrap();
        assert_eq!((valid.status.as_str(), valid.message.as_str()), ("False", reason.as_str()));
    }
}

#[test]
fn a_tls_heads_dashboard_is_https_and_an_unusable_ca_is_a_condition() {
    let mut c = cluster(vec![group("cpu", 1, 0, 5)]);
    c.spec.head_group_spec.ray_start_params.insert("tls-cert".into(), "/certs/tls.crt".into());
    c.spec.tls = Some(ClusterTls { ca_secret_name: "ca".into(), ..Default::default() });
    let observed = all_present(vec![pod("demo-head", None, true, Some("10.0.0.1"))]);
    let p = plan(&c, &observed, "t", NOW);
    assert!(p.status.head.unwrap().dashboard_url.starts_with("https://"));
    let trusted = p.status.conditions.iter().find(|c| c.type_ == "HeadCertificateTrusted").unwrap();
    assert_eq!(trusted.status, "True");

    let observed = Observed { head_ca_error: Some(CaError::NoSecret("ca".into())), ..observed };
    let p = plan(&c, &observed, "t", NOW);
    let trusted = p.status.conditions.iter().find(|c| c.type_ == "HeadCertificateTrusted").unwrap();
    assert_eq!((trusted.status.as_str(), trusted.reason.as_str()), ("False", "CaUnusable"));
    assert!(p.status.reason.unwrap().contains("cannot verify it: spec.tls.caSecretName names Secret ca"));
}

#[test]
fn conditions_keep_their_transition_time_while_unchanged() {
    let c = cluster(vec![]);
    let observed = all_present(vec![pod("demo-head", None, true, None)]);
    let first = plan(&c, &observed, "t", "2026-01-01T00:00:00Z").status;
    let mut c2 = c.clone();
    c2.status = Some(first);
    let second = plan(&c2, &observed, "t", "2026-01-02T00:00:00Z").status;
    let ready = second.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(ready.last_transition_time.as_deref(), Some("2026-01-01T00:00:00Z"));
}

fn autoscaled(min: i32, max: i32) -> OxrayCluster {
    let mut c = cluster(vec![group("cpu", min, min, max)]);
    c.spec.enable_in_tree_autoscaling = Some(true);
    c.spec.autoscaler_options = Some(AutoscalerOptions { idle_timeout_seconds: Some(30), ..Default::default() });
    c
}

fn cpu(n: f64) -> crate::resources::ResourceMap {
    BTreeMap::from([("CPU".to_string(), n)])
}

#[test]
fn autoscaling_grows_a_group_for_pending_demand_and_remembers_it() {
    let mut c = autoscaled(0, 4);
    let head = NodeUsage { ip: "10.0.0.1".into(), total: cpu(0.0), available: cpu(0.0), idle_ms: 0 };
    let mut observed = all_present(vec![pod("demo-head", None, true, Some("10.0.0.1"))]);
    observed.demand = Some(Demand { spread_groups: vec![], requests: vec![(cpu(2.0), 3)], nodes: vec![head.clone()] });
    let p = plan(&c, &observed, "t", NOW);
    assert_eq!(names(&created_pods(&p)), vec!["demo-worker-cpu-0", "demo-worker-cpu-1", "demo-worker-cpu-2"]);
    assert_eq!(p.status.worker_groups[0].desired_replicas, 3);

    // Next round the pods exist but have not joined; the same demand adds nothing.
    c.status = Some(p.status);
    observed.pods.extend((0..3).map(|i| pod(&format!("demo-worker-cpu-{i}"), Some("cpu"), false, None)));
    let p = plan(&c, &observed, "t", NOW);
    assert!(created_pods(&p).is_empty());
    assert!(p.delete_pods.is_empty());

    // Without an answer from the head, the last decision stands.
    c.status = Some(p.status);
    observed.demand = None;
    observed.demand_error = Some(DemandError::Head(HeadApiError::Unreachable {
        method: hyper::Method::GET,
        url: "http://10.0.0.1:8265/api/cluster_status".into(),
        reason: "connection refused".into(),
    }));
    let p = plan(&c, &observed, "t", NOW);
    assert_eq!(p.status.worker_groups[0].desired_replicas, 3);
    assert!(p.delete_pods.is_empty());
    assert!(
        p.status.reason.unwrap().contains(
            "could not read the head's demand: GET http://10.0.0.1:8265/api/cluster_status: connection refused"
        )
    );
}

#[test]
fn autoscaling_removes_idle_workers_after_the_timeout() {
    let mut c = autoscaled(1, 4);
    c.status = Some(OxrayClusterStatus {
        worker_groups: vec![WorkerGroupStatus {
            group_name: "cpu".into(),
            replicas: 3,
            ready_replicas: 3,
            desired_replicas: 3,
        }],
        ..Default::default()
    });
    let node = |ip: &str, idle_ms| NodeUsage { ip: ip.into(), total: cpu(2.0), available: cpu(2.0), idle_ms };
    let mut observed = all_present(vec![
        pod("demo-head", None, true, Some("10.0.0.1")),
        pod("demo-worker-cpu-0", Some("cpu"), true, Some("10.0.0.2")),
        pod("demo-worker-cpu-1", Some("cpu"), true, Some("10.0.0.3")),
        pod("demo-worker-cpu-2", Some("cpu"), true, Some("10.0.0.4")),
    ]);
    observed.demand = Some(Demand {
        spread_groups: vec![],
        requests: vec![],
        nodes: vec![node("10.0.0.2", 31_000), node("10.0.0.3", 5_000), node("10.0.0.4", 31_000)],
    });
    let p = plan(&c, &observed, "t", NOW);
    assert_eq!(p.delete_pods, vec!["demo-worker-cpu-2", "demo-worker-cpu-0"], "the two idle past 30 s");
    assert_eq!(p.status.worker_groups[0].desired_replicas, 1);
    assert!(created_pods(&p).is_empty(), "and nothing made to replace them");
}

#[test]
fn unschedulable_demand_is_reported() {
    let c = autoscaled(0, 4);
    let mut observed = all_present(vec![pod("demo-head", None, true, Some("10.0.0.1"))]);
    observed.demand = Some(Demand { spread_groups: vec![], requests: vec![(cpu(64.0), 1)], nodes: vec![] });
    let p = plan(&c, &observed, "t", NOW);
    assert_eq!(p.status.unschedulable_demand.as_deref(), Some("no worker group can run work that needs {CPU: 64}"));
    assert!(created_pods(&p).is_empty());
}

#[test]
fn objects_under_the_clusters_names_that_it_does_not_own_stop_it_with_a_conflict() {
    let c = cluster(vec![group("cpu", 1, 0, 5)]);
    let observed = Observed { foreign: vec!["Secret demo-token".into()], ..Default::default() };
    let plan = plan(&c, &observed, "tok-123", NOW);
    assert!(plan.create.is_empty() && plan.delete_pods.is_empty(), "nothing is made beside it, nothing adopted");
    assert_eq!(plan.status.state.as_deref(), Some("failed"));
    let ready = plan.status.conditions.iter().find(|c| c.type_ == "Ready").expect("a Ready condition");
    assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "Conflict"));
    assert!(ready.message.contains("Secret demo-token"), "{}", ready.message);
}
