//! The controller driven as the runtime drives it: deploys, the replicas' reports, ticks.

use super::{Action, AdoptedReplica, AppStatusReport, Controller};
use crate::config::{AutoscalingConfig, DeploymentSpec, Replicas};
use crate::error::ServeError;
use crate::status::{ApplicationStatus, DeploymentStatus, DeploymentStatusTrigger, ReplicaState};
use std::collections::BTreeMap;

fn spec(code: &str, replicas: u32) -> DeploymentSpec {
    DeploymentSpec::new(code, Replicas::Fixed(replicas))
}

fn deploy(c: &mut Controller, app: &str, prefix: &str, spec: DeploymentSpec, now: u64) {
    c.deploy_app(app, Some(prefix), "Model", vec![("Model".to_string(), spec)], now).unwrap();
}

fn started(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| if let Action::StartReplica { replica, .. } = a { Some(replica.clone()) } else { None })
        .collect()
}

fn stopped(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| if let Action::StopReplica { replica, .. } = a { Some(replica.clone()) } else { None })
        .collect()
}

/// Reports every started replica as up; returns the actions that followed.
fn start_all(c: &mut Controller, app: &str, actions: &[Action], now: u64) -> Vec<Action> {
    for replica in started(actions) {
        c.replica_started(app, "Model", &replica, now);
    }
    c.take_actions()
}

fn app<'a>(status: &'a [AppStatusReport], name: &str) -> &'a AppStatusReport {
    status.iter().find(|a| a.name == name).unwrap()
}

fn model(
    c: &Controller,
    name: &str,
) -> (ApplicationStatus, DeploymentStatus, DeploymentStatusTrigger, BTreeMap<ReplicaState, u32>) {
    let status = c.status();
    let a = app(&status, name);
    let d = &a.deployments[0];
    (a.status, d.status, d.trigger, d.replica_states.clone())
}

#[test]
fn a_deploy_starts_the_target_and_is_running_once_every_replica_is() {
    let mut c = Controller::new();
    deploy(&mut c, "app", "/", spec("v1", 2), 0);
    let actions = c.take_actions();
    assert_eq!(started(&actions).len(), 2);
    let (app_status, status, trigger, states) = model(&c, "app");
    assert_eq!(
        (app_status, status, trigger),
        (ApplicationStatus::Deploying, DeploymentStatus::Updating, DeploymentStatusTrigger::ConfigUpdateStarted)
    );
    assert_eq!(states, BTreeMap::from([(ReplicaState::Starting, 2)]));
    let replicas = started(&actions);
    assert!(
        replicas.iter().all(|r| r.len() == 8 && r.chars().all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit()))
    );
    c.replica_started("app", "Model", &replicas[0], 10);
    assert_eq!(model(&c, "app").0, ApplicationStatus::Deploying, "one of two is not enough");
    assert!(c.take_actions().is_empty());
    c.replica_started("app", "Model", &replicas[1], 20);
    let (app_status, status, trigger, states) = model(&c, "app");
    assert_eq!(
        (app_status, status, trigger),
        (ApplicationStatus::Running, DeploymentStatus::Healthy, DeploymentStatusTrigger::ConfigUpdateCompleted)
    );
    assert_eq!(states, BTreeMap::from([(ReplicaState::Running, 2)]));
    let routes = c.routes();
    assert_eq!(routes.len(), 1);
    assert_eq!((routes[0].0.as_deref(), routes[0].1.as_str(), routes[0].2.as_str()), (Some("/"), "app", "Model"));
    assert_eq!(routes[0].3.len(), 2);
}

#[test]
fn a_new_version_rolls_in_with_new_replicas_serving_before_old_ones_stop() {
    let mut c = Controller::new();
    deploy(&mut c, "app", "/", spec("v1", 5), 0);
    let first = c.take_actions();
    start_all(&mut c, "app", &first, 1);
    let old: Vec<String> = started(&first);

    deploy(&mut c, "app", "/", spec("v2", 5), 100);
    let mut actions = c.take_actions();
    // A fifth of 5 at a time: one new replica, and no old one stops before it serves.
    assert_eq!((started(&actions).len(), stopped(&actions).len()), (1, 0));
    let mut now = 100;
    let mut stopping: Vec<String> = Vec::new();
    for _ in 0..20 {
        if started(&actions).is_empty() && stopped(&actions).is_empty() {
            break;
        }
        now += 10;
        stopping.extend(stopped(&actions));
        actions = start_all(&mut c, "app", &actions, now);
        c.tick(now);
        actions.extend(c.take_actions());
        // Never fewer than 5 serve: the serving ones are the routes' replicas.
        assert!(c.routes()[0].3.len() >= 5, "{:?}", c.routes());
    }
    stopping.sort();
    let mut expected = old.clone();
    expected.sort();
    assert_eq!(stopping, expected, "every old replica was stopped, once");
    assert_eq!(model(&c, "app").1, DeploymentStatus::Updating, "old replicas still stopping");
    for replica in &old {
        c.replica_stopped("app", "Model", replica, now);
    }
    let (app_status, status, trigger, states) = model(&c, "app");
    assert_eq!(
        (app_status, status, trigger),
        (ApplicationStatus::Running, DeploymentStatus::Healthy, DeploymentStatusTrigger::ConfigUpdateCompleted)
    );
    assert_eq!(states, BTreeMap::from([(ReplicaState::Running, 5)]));
    assert!(c.routes()[0].3.iter().all(|r| !old.contains(r)));
}

#[test]
fn a_new_config_reconfigures_running_replicas_in_place() {
    let mut c = Controller::new();
    deploy(&mut c, "app", "/", spec("v1", 2), 0);
    let first = c.take_actions();
    start_all(&mut c, "app", &first, 1);
    deploy(&mut c, "app", "/", DeploymentSpec { config_version: "threshold=0.9".into(), ..spec("v1", 2) }, 10);
    let actions = c.take_actions();
    assert!(started(&actions).is_empty() && stopped(&actions).is_empty(), "no restart: {actions:?}");
    let reconfigured: Vec<String> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Reconfigure { replica, config_version, .. } if config_version == "threshold=0.9" => {
                Some(replica.clone())
            }
            _ => None,
        })
        .collect();
    assert_eq!(reconfigured.len(), 2);
    assert_eq!(model(&c, "app").3, BTreeMap::from([(ReplicaState::Updating, 2)]));
    for replica in &reconfigured {
        c.replica_reconfigured("app", "Model", replica, 20);
    }
    assert_eq!(model(&c, "app").1, DeploymentStatus::Healthy);
}

#[test]
fn a_constructor_that_keeps_failing_fails_the_deployment_with_its_error_and_stops_the_retries() {
    let mut c = Controller::new();
    deploy(&mut c, "app", "/", spec("v1", 1), 0);
    let mut actions = c.take_actions();
    // min(20, 3 x 1): three tries.
    for attempt in 0..3 {
        let replicas = started(&actions);
        assert_eq!(replicas.len(), 1, "attempt {attempt}: {actions:?}");
        c.replica_start_failed("app", "Model", &replicas[0], "Traceback ...\nValueError: no weights", 10 + attempt);
        actions = c.take_actions();
    }
    assert!(started(&actions).is_empty(), "no retry loop: {actions:?}");
    let status = c.status();
    let a = app(&status, "app");
    assert_eq!(a.status, ApplicationStatus::DeployFailed);
    assert_eq!(a.message, "Failed to update the deployments [\"Model\"].");
    let d = &a.deployments[0];
    assert_eq!((d.status, d.trigger), (DeploymentStatus::DeployFailed, DeploymentStatusTrigger::ReplicaStartupFailed));
    assert!(d.message.contains("ValueError: no weights"), "{}", d.message);
    // A fixed version deploys again.
    deploy(&mut c, "app", "/", spec("v2", 1), 100);
    assert_eq!(started(&c.take_actions()).len(), 1);
}

#[test]
fn three_failed_health_checks_replace_the_replica_and_a_timeout_counts_as_one() {
    let mut c = Controller::new();
    let spec = DeploymentSpec { health_check_period_ms: 1_000, health_check_timeout_ms: 500, ..spec("v1", 1) };
    deploy(&mut c, "app", "/", spec, 0);
    let first = c.take_actions();
    let replica = started(&first)[0].clone();
    c.replica_started("app", "Model", &replica, 0);
    c.take_actions();
    let mut now = 0;
    let mut checks = 0;
    let mut replacement = None;
    while replacement.is_none() && now < 20_000 {
        now += 50;
        c.tick(now);
        for action in c.take_actions() {
            match action {
                Action::CheckHealth { replica: checked, .. } => {
                    assert_eq!(checked, replica);
                    checks += 1;
                    // The first check fails, the second times out (no answer), the third fails.
                    if checks != 2 {
                        c.health_checked("app", "Model", &checked, false, "RuntimeError: bad GPU", now);
                    }
                }
                Action::StopReplica { replica: gone, .. } => assert_eq!(gone, replica),
                Action::StartReplica { replica: new, .. } => replacement = Some(new),
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    assert_eq!(checks, 3);
    // Checks come every period (0.9 to 1.1 of it), the timed-out one after its timeout.
    assert!((2_300..=3_900).contains(&now), "replaced at {now} ms");
    let status = c.status();
    let d = &app(&status, "app").deployments[0];
    assert_eq!((d.status, d.trigger), (DeploymentStatus::Unhealthy, DeploymentStatusTrigger::HealthCheckFailed));
    assert!(d.message.contains("bad GPU"), "{}", d.message);
    assert_eq!(app(&status, "app").status, ApplicationStatus::Unhealthy);
    c.replica_started("app", "Model", &replacement.unwrap(), now);
    c.replica_stopped("app", "Model", &replica, now);
    let (app_status, status, trigger, _) = model(&c, "app");
    assert_eq!(
        (app_status, status, trigger),
        (ApplicationStatus::Running, DeploymentStatus::Healthy, DeploymentStatusTrigger::Unspecified)
    );
}

#[test]
fn a_replica_that_does_not_stop_in_time_is_killed_and_a_crashed_one_is_replaced_at_once() {
    let mut c = Controller::new();
    let spec = DeploymentSpec { graceful_shutdown_timeout_ms: 2_000, ..spec("v1", 2) };
    deploy(&mut c, "app", "/", spec.clone(), 0);
    let first = c.take_actions();
    start_all(&mut c, "app", &first, 0);
    let replicas = started(&first);

    c.replica_died("app", "Model", &replicas[0], "the actor's process exited (SIGSEGV)", 10);
    let actions = c.take_actions();
    assert_eq!(started(&actions).len(), 1, "replaced at once: {actions:?}");
    assert_eq!(model(&c, "app").1, DeploymentStatus::Unhealthy);

    deploy(&mut c, "app", "/", DeploymentSpec { replicas: Replicas::Fixed(0), ..spec }, 100);
    let actions = c.take_actions();
    assert_eq!(stopped(&actions).len(), 2, "{actions:?}");
    c.tick(2_099);
    assert!(c.take_actions().is_empty());
    c.tick(2_100);
    let kills: Vec<Action> = c.take_actions();
    assert_eq!(kills.len(), 2);
    assert!(kills.iter().all(|a| matches!(a, Action::KillReplica { .. })));
    c.tick(10_000);
    assert!(c.take_actions().is_empty(), "killed once");
}

#[test]
fn route_prefixes_are_unique_and_a_deleted_app_goes_once_its_replicas_stopped() {
    let mut c = Controller::new();
    deploy(&mut c, "a", "/api", spec("v1", 1), 0);
    let err = c.deploy_app("b", Some("/api"), "Model", vec![("Model".into(), spec("v1", 1))], 0).unwrap_err();
    assert_eq!(err, ServeError::RoutePrefixTaken { prefix: "/api".into(), app: "b".into(), taken_by: "a".into() });
    assert!(err.to_string().contains("give application \"b\" another route_prefix"));
    assert!(c.deploy_app("b", Some("api"), "Model", vec![("Model".into(), spec("v1", 1))], 0).is_err());
    assert!(matches!(
        c.deploy_app("b", Some("/b"), "Missing", vec![("Model".into(), spec("v1", 1))], 0),
        Err(ServeError::UnknownIngress { .. })
    ));
    let actions = c.take_actions();
    start_all(&mut c, "a", &actions, 1);

    c.delete_app("a", 10);
    c.delete_app("never-deployed", 10);
    let actions = c.take_actions();
    assert_eq!(stopped(&actions).len(), 1);
    assert_eq!(app(&c.status(), "a").status, ApplicationStatus::Deleting);
    assert!(c.routes().is_empty(), "a deleting app takes no requests");
    // Its route prefix is free again already.
    deploy(&mut c, "b", "/api", spec("v1", 1), 11);
    c.replica_stopped("a", "Model", &stopped(&actions)[0], 20);
    assert!(c.status().iter().all(|a| a.name != "a"), "gone once its replicas stopped");
}

#[test]
fn a_load_step_scales_up_after_the_delay_and_the_app_keeps_running() {
    let mut c = Controller::new();
    let config =
        AutoscalingConfig { min_replicas: 1, max_replicas: 4, upscale_delay_ms: 1_000, ..AutoscalingConfig::default() };
    deploy(&mut c, "app", "/", DeploymentSpec::new("v1", Replicas::Auto(config)), 0);
    let first = c.take_actions();
    assert_eq!(started(&first).len(), 1, "initial_replicas defaults to min_replicas");
    start_all(&mut c, "app", &first, 0);
    // 8 requests in flight against 2 per replica: 4 wanted.
    c.record_requests("app", "Model", "proxy-handle", 8.0, 100);
    c.tick(100);
    assert!(started(&c.take_actions()).is_empty(), "not before the delay");
    c.record_requests("app", "Model", "proxy-handle", 8.0, 1_100);
    c.tick(1_100);
    let actions = c.take_actions();
    assert_eq!(started(&actions).len(), 3);
    let (app_status, status, trigger, _) = model(&c, "app");
    assert_eq!(
        (app_status, status, trigger),
        (ApplicationStatus::Running, DeploymentStatus::Upscaling, DeploymentStatusTrigger::Autoscaling)
    );
    start_all(&mut c, "app", &actions, 1_200);
    let (_, status, trigger, states) = model(&c, "app");
    assert_eq!((status, trigger), (DeploymentStatus::Healthy, DeploymentStatusTrigger::UpscaleCompleted));
    assert_eq!(states, BTreeMap::from([(ReplicaState::Running, 4)]));
}

#[test]
fn an_app_that_fails_to_build_reports_its_error_and_leaves_the_others_serving() {
    let mut c = Controller::new();
    deploy(&mut c, "good", "/good", spec("v1", 1), 0);
    let actions = c.take_actions();
    start_all(&mut c, "good", &actions, 0);
    c.fail_app("bad", "ModuleNotFoundError: No module named 'missing_model'", 5);
    let status = c.status();
    assert_eq!(app(&status, "bad").status, ApplicationStatus::DeployFailed);
    assert!(app(&status, "bad").message.contains("missing_model"));
    assert_eq!(app(&status, "good").status, ApplicationStatus::Running);
    assert_eq!(c.routes().len(), 1);
}

#[test]
fn an_old_replica_dying_during_a_rolling_update_is_replaced_without_failing_the_deploy() {
    let mut c = Controller::new();
    deploy(&mut c, "app", "/", spec("v1", 2), 0);
    let first = c.take_actions();
    start_all(&mut c, "app", &first, 1);
    deploy(&mut c, "app", "/", spec("v2", 2), 10);
    let actions = c.take_actions();
    assert_eq!(started(&actions).len(), 1);
    // An old replica crashes before any new one serves.
    c.replica_died("app", "Model", &started(&first)[0], "SIGKILL", 20);
    let (app_status, status, _, _) = model(&c, "app");
    assert_eq!((app_status, status), (ApplicationStatus::Deploying, DeploymentStatus::Updating));
    let mut actions = [actions, c.take_actions()].concat();
    for now in 30..60 {
        for replica in stopped(&actions) {
            c.replica_stopped("app", "Model", &replica, now);
        }
        actions = start_all(&mut c, "app", &actions, now);
        c.tick(now);
        actions.extend(c.take_actions());
    }
    let (app_status, status, trigger, states) = model(&c, "app");
    assert_eq!(
        (app_status, status, trigger),
        (ApplicationStatus::Running, DeploymentStatus::Healthy, DeploymentStatusTrigger::ConfigUpdateCompleted)
    );
    assert_eq!(states, BTreeMap::from([(ReplicaState::Running, 2)]));
}

fn adopted(replica: &str, code: &str) -> AdoptedReplica {
    AdoptedReplica {
        deployment: "Model".to_string(),
        replica: replica.to_string(),
        code_version: code.to_string(),
        config_version: String::new(),
    }
}

fn checks(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| if let Action::CheckHealth { replica, .. } = a { Some(replica.clone()) } else { None })
        .collect()
}

#[test]
fn a_restored_app_serves_with_its_adopted_replicas_and_starts_only_what_the_target_lacks() {
    // The replicas a first controller started, as a second one finds them after a head restart.
    let mut first = Controller::new();
    deploy(&mut first, "app", "/", spec("v1", 3), 0);
    let ids = started(&first.take_actions());
    let mut c = Controller::new();
    let found = vec![adopted(&ids[0], "v1"), adopted(&ids[1], "v1")];
    c.restore_app("app", Some("/"), "Model", vec![("Model".to_string(), spec("v1", 3))], found, 1_000).unwrap();
    let actions = c.take_actions();
    let new = started(&actions);
    assert_eq!(new.len(), 1, "{actions:?}");
    assert!(!ids[..2].contains(&new[0]), "a new replica never takes an adopted one's id: {new:?}");
    let mut checked = checks(&actions);
    checked.sort();
    let mut expected = ids[..2].to_vec();
    expected.sort();
    assert_eq!(checked, expected, "adopted replicas are health-checked at once");
    let mut serving = c.serving("app", "Model");
    serving.sort();
    assert_eq!(serving, expected, "adopted replicas serve before the new one starts");
    assert_eq!(model(&c, "app").0, ApplicationStatus::Deploying);
    c.replica_started("app", "Model", &new[0], 1_100);
    assert_eq!(model(&c, "app").0, ApplicationStatus::Running);

    // One that died with the head fails its check: replaced, as any dead replica is.
    c.replica_died("app", "Model", &ids[0], "its node is gone", 1_200);
    assert_eq!(started(&c.take_actions()).len(), 1);
}

#[test]
fn an_adopted_replica_of_an_older_version_is_rolled_out() {
    let mut c = Controller::new();
    let found = vec![adopted("oldreplc", "v1")];
    c.restore_app("app", Some("/"), "Model", vec![("Model".to_string(), spec("v2", 1))], found, 0).unwrap();
    let actions = c.take_actions();
    let new = started(&actions);
    assert_eq!(new.len(), 1);
    assert!(stopped(&actions).is_empty(), "the old one serves until the new one does");
    c.replica_started("app", "Model", &new[0], 10);
    assert_eq!(stopped(&c.take_actions()), vec!["oldreplc".to_string()]);
}
