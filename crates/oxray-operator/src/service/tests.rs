//! The service's reconcile step through its life: the first cluster, the config, the switch of
//! the serve Service, an in-place config change, a zero-downtime upgrade and a rollback.

use super::*;
use crate::crd::{HeadGroupSpec, OxrayClusterSpec, OxrayServiceSpec, ServeDeploymentStatus, UpgradeStrategy};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};

const CONFIG: &str = "applications:\n  - name: fruit\n    route_prefix: /fruit\n    import_path: fruit:app\n  - name: math\n    route_prefix: /calc\n    import_path: math:app\n";

fn cluster_spec(image: &str) -> OxrayClusterSpec {
    OxrayClusterSpec {
        head_group_spec: HeadGroupSpec {
            template: PodTemplateSpec {
                metadata: None,
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "oxray".to_string(),
                        image: Some(image.to_string()),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            },
            ..Default::default()
        },
        ..Default::default()
    }
}

fn service() -> OxrayService {
    let spec = OxrayServiceSpec {
        serve_config_v2: Some(CONFIG.to_string()),
        ray_cluster_config: cluster_spec("localhost/oxray:v1"),
        ray_cluster_deletion_delay_seconds: Some(30),
        ..Default::default()
    };
    let mut s = OxrayService::new("shop", spec);
    s.metadata.namespace = Some("ml".into());
    s.metadata.uid = Some("5678efgh-0000".into());
    s
}

fn step(s: &mut OxrayService, observed: &ServiceObserved) -> ServicePlan {
    let p = plan(s, observed);
    s.status = Some(p.status.clone());
    p
}

fn app(status: &str) -> ServeAppStatus {
    ServeAppStatus {
        status: status.to_string(),
        message: String::new(),
        serve_deployment_statuses: BTreeMap::from([(
            "Model".to_string(),
            ServeDeploymentStatus { status: "HEALTHY".to_string(), message: String::new() },
        )]),
    }
}

/// A cluster the service made, as observed after what `plan` asked for was done.
fn made(p: &ServicePlan) -> ServeClusterView {
    let cluster = p.create_cluster.as_ref().expect("a cluster to make");
    let annotations = cluster.metadata.annotations.clone().unwrap_or_default();
    ServeClusterView {
        name: cluster.metadata.name.clone().unwrap(),
        spec_hash: annotations[CLUSTER_HASH_ANNOTATION].clone(),
        ..Default::default()
    }
}

/// `view` once ready, with the config `p` deployed there and its applications as given.
fn serving(mut view: ServeClusterView, p: &ServicePlan, fruit: &str, math: &str) -> ServeClusterView {
    view.ready = true;
    view.serve_pods = 2;
    if let Some((_, _, hash)) = p.deploy_config.iter().find(|(c, _, _)| *c == view.name) {
        view.config_hash = Some(hash.clone());
    }
    view.applications = Some(Ok(BTreeMap::from([("fruit".to_string(), app(fruit)), ("math".to_string(), app(math))])));
    view
}

fn at(now_s: i64, clusters: Vec<ServeClusterView>, routed: Option<&str>) -> ServiceObserved {
    ServiceObserved {
        clusters,
        serve_service_cluster: routed.map(str::to_string),
        now_s,
        now: "2026-11-28T07:00:00Z".into(),
    }
}

fn condition<'a>(p: &'a ServicePlan, type_: &str) -> &'a crate::crd::Condition {
    p.status.conditions.iter().find(|c| c.type_ == type_).unwrap()
}

/// Brings the service to serving on its first cluster; that cluster's view.
fn first_cluster_serving(s: &mut OxrayService) -> ServeClusterView {
    let p = step(s, &at(0, vec![], None));
    let first = made(&p);
    let ready = ServeClusterView { ready: true, ..first.clone() };
    let p = step(s, &at(10, vec![ready.clone()], None));
    serving(ready, &p, "RUNNING", "RUNNING")
}

#[test]
fn the_first_cluster_gets_the_config_and_the_traffic_once_every_application_runs() {
    let mut s = service();
    let p = step(&mut s, &at(0, vec![], None));
    let cluster = p.create_cluster.clone().expect("the first cluster is made");
    let name = cluster.metadata.name.clone().unwrap();
    assert!(name.starts_with("shop-") && name.len() == "shop-".len() + 8, "{name}");
    assert_eq!(cluster.metadata.namespace.as_deref(), Some("ml"));
    assert_eq!(cluster.metadata.labels.unwrap()[SERVICE_LABEL], "shop");
    assert_eq!(cluster.metadata.owner_references.unwrap()[0].kind, "OxrayService");
    assert_eq!(
        cluster.spec.head_group_spec.template.spec.unwrap().containers[0].image.as_deref(),
        Some("localhost/oxray:v1")
    );
    assert_eq!(p.status.pending_service_status.as_ref().unwrap().ray_cluster_name, name);
    assert!(p.status.active_service_status.is_none() && p.serve_service.is_none());
    assert_eq!(condition(&p, "Ready").status, "False");
    assert_eq!(condition(&p, "Ready").reason, "Initializing");

    // Not ready yet: nothing is deployed.
    let first = made(&p);
    let p = step(&mut s, &at(5, vec![first.clone()], None));
    assert!(p.create_cluster.is_none() && p.deploy_config.is_empty());
    assert!(p.status.message.as_deref().unwrap().contains("to be ready"), "{:?}", p.status.message);

    // Ready: the config goes there, with the proxies on every interface for the Service.
    let ready = ServeClusterView { ready: true, ..first.clone() };
    let p = step(&mut s, &at(10, vec![ready.clone()], None));
    let [(to, config, _)] = p.deploy_config.as_slice() else { panic!("{:?}", p.deploy_config) };
    assert_eq!(to, &name);
    assert_eq!(config["applications"][1]["import_path"], "math:app");
    assert_eq!(config["http_options"]["host"], "0.0.0.0");

    // One application still deploying: no traffic yet, and the status says which.
    let deploying = serving(ready.clone(), &p, "RUNNING", "DEPLOYING");
    let p2 = step(&mut s, &at(15, vec![deploying.clone()], None));
    assert!(p2.serve_service.is_none() && p2.deploy_config.is_empty());
    assert!(p2.status.message.as_deref().unwrap().contains("math (DEPLOYING)"), "{:?}", p2.status.message);
    let pending = p2.status.pending_service_status.as_ref().unwrap();
    assert_eq!(pending.application_statuses["math"].status, "DEPLOYING");

    // Every application RUNNING: the cluster is active, and the serve Service routes to it.
    let up = serving(ready, &p, "RUNNING", "RUNNING");
    let p = step(&mut s, &at(20, vec![up.clone()], None));
    let svc = p.serve_service.clone().expect("the serve Service");
    assert_eq!(svc.metadata.name.as_deref(), Some("shop-serve-svc"));
    let spec = svc.spec.unwrap();
    assert_eq!(spec.selector.unwrap()[CLUSTER_LABEL], name);
    assert_eq!(spec.ports.unwrap()[0].port, 8000);
    assert_eq!(p.status.active_service_status.as_ref().unwrap().ray_cluster_name, name);
    assert!(p.status.pending_service_status.is_none());
    assert_eq!(p.status.service_status.as_deref(), Some("Running"));
    assert_eq!(p.status.num_serve_endpoints, 2);
    assert_eq!(
        (condition(&p, "Ready").status.as_str(), condition(&p, "Ready").reason.as_str()),
        ("True", "NonZeroServeEndpoints")
    );
    assert_eq!(condition(&p, "UpgradeInProgress").status, "False");

    // Settled: nothing more to do.
    let p = step(&mut s, &at(25, vec![up], Some(&name)));
    assert!(p.create_cluster.is_none() && p.deploy_config.is_empty() && p.serve_service.is_none());
    assert!(p.retire.is_empty() && p.delete_clusters.is_empty());
}

#[test]
fn a_new_serve_config_alone_is_deployed_in_place() {
    let mut s = service();
    let up = first_cluster_serving(&mut s);
    let p = step(&mut s, &at(20, vec![up.clone()], None));
    let name = up.name.clone();
    s.spec.serve_config_v2 = Some(CONFIG.replace("/calc", "/math"));
    let p = step(&mut s, &at(30, vec![up.clone()], Some(&p.status.active_service_status.unwrap().ray_cluster_name)));
    assert!(p.create_cluster.is_none(), "no new cluster for a config change");
    let [(to, config, hash)] = p.deploy_config.as_slice() else { panic!("{:?}", p.deploy_config) };
    assert_eq!((to.as_str(), config["applications"][1]["route_prefix"].as_str()), (name.as_str(), Some("/math")));
    assert_ne!(Some(hash), up.config_hash.as_ref());
    assert_eq!(p.status.active_service_status.unwrap().ray_cluster_name, name, "the cluster keeps serving");
}

#[test]
fn a_new_cluster_spec_serves_before_the_old_cluster_goes() {
    let mut s = service();
    let old = first_cluster_serving(&mut s);
    let p = step(&mut s, &at(20, vec![old.clone()], None));
    assert_eq!(p.status.service_status.as_deref(), Some("Running"));

    s.spec.ray_cluster_config = cluster_spec("localhost/oxray:v2");
    let p = step(&mut s, &at(100, vec![old.clone()], Some(&old.name)));
    let new = made(&p);
    assert_ne!(new.name, old.name);
    assert!(p.serve_service.is_none(), "the traffic stays on the old cluster");
    assert_eq!(p.status.active_service_status.as_ref().unwrap().ray_cluster_name, old.name);
    assert_eq!(p.status.pending_service_status.as_ref().unwrap().ray_cluster_name, new.name);
    assert_eq!(condition(&p, "UpgradeInProgress").status, "True");
    assert_eq!(condition(&p, "Ready").status, "True", "the old cluster still serves");
    assert!(p.retire.is_empty());

    let ready = ServeClusterView { ready: true, ..new.clone() };
    let p = step(&mut s, &at(110, vec![old.clone(), ready.clone()], Some(&old.name)));
    assert_eq!(p.deploy_config.iter().map(|(c, _, _)| c.as_str()).collect::<Vec<_>>(), vec![new.name.as_str()]);
    let half = serving(ready.clone(), &p, "RUNNING", "DEPLOYING");
    let p2 = step(&mut s, &at(115, vec![old.clone(), half], Some(&old.name)));
    assert!(p2.serve_service.is_none() && p2.retire.is_empty(), "not before every application runs");

    let up = serving(ready, &p, "RUNNING", "RUNNING");
    let p = step(&mut s, &at(120, vec![old.clone(), up.clone()], Some(&old.name)));
    let svc = p.serve_service.clone().expect("the Service moves");
    assert_eq!(svc.spec.unwrap().selector.unwrap()[CLUSTER_LABEL], up.name);
    assert_eq!(p.status.active_service_status.as_ref().unwrap().ray_cluster_name, up.name);
    assert!(p.status.pending_service_status.is_none());
    assert_eq!(p.retire, vec![(old.name.clone(), 150)], "deleted rayClusterDeletionDelaySeconds later");
    assert!(p.delete_clusters.is_empty());
    assert_eq!(condition(&p, "UpgradeInProgress").status, "False");

    let retired = ServeClusterView { delete_after_s: Some(150), ..old.clone() };
    let p = step(&mut s, &at(140, vec![retired.clone(), up.clone()], Some(&up.name)));
    assert!(p.delete_clusters.is_empty() && p.retire.is_empty());
    let p = step(&mut s, &at(150, vec![retired, up.clone()], Some(&up.name)));
    assert_eq!(p.delete_clusters, vec![old.name]);
}

#[test]
fn an_upgrade_rolled_back_before_it_finished_keeps_the_old_cluster_and_retires_the_new_one() {
    let mut s = service();
    let old = first_cluster_serving(&mut s);
    step(&mut s, &at(20, vec![old.clone()], None));
    s.spec.ray_cluster_config = cluster_spec("localhost/oxray:v2");
    let p = step(&mut s, &at(100, vec![old.clone()], Some(&old.name)));
    let new = made(&p);
    s.spec.ray_cluster_config = cluster_spec("localhost/oxray:v1");
    let p = step(&mut s, &at(110, vec![old.clone(), new.clone()], Some(&old.name)));
    assert!(p.create_cluster.is_none() && p.serve_service.is_none());
    assert_eq!(p.retire, vec![(new.name.clone(), 140)]);
    assert!(p.status.pending_service_status.is_none());
    assert_eq!(p.status.active_service_status.unwrap().ray_cluster_name, old.name);
}

#[test]
fn upgrade_strategy_none_keeps_the_cluster_and_says_so() {
    let mut s = service();
    let old = first_cluster_serving(&mut s);
    step(&mut s, &at(20, vec![old.clone()], None));
    s.spec.upgrade_strategy = Some(UpgradeStrategy { type_: Some("None".into()), ..Default::default() });
    s.spec.ray_cluster_config = cluster_spec("localhost/oxray:v2");
    let p = step(&mut s, &at(100, vec![old.clone()], Some(&old.name)));
    assert!(p.create_cluster.is_none() && p.retire.is_empty());
    assert!(p.status.message.as_deref().unwrap().contains("upgradeStrategy.type is None"), "{:?}", p.status.message);
    assert_eq!(p.status.service_status.as_deref(), Some("Running"));
}

#[test]
fn a_bad_spec_is_refused_by_name_and_nothing_is_made() {
    type Edit = Box<dyn Fn(&mut OxrayService)>;
    let cases: Vec<(Edit, &str)> = vec![
        (Box::new(|s| s.spec.serve_config_v2 = None), "spec.serveConfigV2 is not set"),
        (Box::new(|s| s.spec.serve_config_v2 = Some("applications: [".into())), "spec.serveConfigV2 is not YAML"),
        (Box::new(|s| s.spec.serve_config_v2 = Some("- a\n- b\n".into())), "expected a mapping"),
        (
            Box::new(|s| {
                s.spec.upgrade_strategy = Some(UpgradeStrategy {
                    type_: Some("NewClusterWithIncrementalUpgrade".into()),
                    ..Default::default()
                })
            }),
            "Gateway API",
        ),
        (
            Box::new(|s| {
                s.spec.unknown.insert("serveService".into(), json!({}));
            }),
            "spec.serveService is not a field",
        ),
        (Box::new(|s| s.metadata.name = Some("a".repeat(46))), "metadata.name"),
    ];
    for (edit, expected) in cases {
        let mut s = service();
        edit(&mut s);
        let p = step(&mut s, &at(0, vec![], None));
        assert!(p.create_cluster.is_none() && p.deploy_config.is_empty(), "{expected}");
        let message = p.status.message.clone().unwrap_or_default();
        assert!(message.contains(expected), "{message:?} should name {expected:?}");
        assert_eq!(condition(&p, "Ready").reason, "InvalidSpec");
    }
}
