//! Scheduling, reference counting and failure handling of `AgentState`, driven
//! directly: "workers" are channels, and process spawns are observed as actions.

use super::*;
use crate::agent::AgentError;
use crate::errors::FLAG_SYSTEM_ERROR;
use crate::ids::{ActorId, ClientId, NodeId, ObjectId, PlacementGroupId, TaskId, WorkerId};
use crate::resources::ResourceSet;
use crate::task_env::{CUDA_VISIBLE_DEVICES, OMP_NUM_THREADS, WorkerStartEnv};
use oxray_object_store::ObjectStore;
use oxray_proto::task_arg::Kind;
use oxray_proto::{
    Assignment, ObjectLocation, PlacementGroupBundle, TaskArg, TaskDoneRequest, TaskKind, TaskSpec,
    object_location::Place,
};
use std::collections::HashMap;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

const DRIVER: ClientId = ClientId::from_array([0xd; 16]);

/// When every event of these tests happens: the state machine reads no clock, it is given the time.
const NOW: u64 = 1_700_000_000_000;

fn oid(n: u8) -> ObjectId {
    ObjectId::from_array([n; 16])
}

/// A test's agent state; its store's directories go when it drops (the state first, then them).
struct TestState {
    state: AgentState,
    _root: RemovedOnDrop,
}

struct RemovedOnDrop(std::path::PathBuf);

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl std::ops::Deref for TestState {
    type Target = AgentState;
    fn deref(&self) -> &AgentState {
        &self.state
    }
}

impl std::ops::DerefMut for TestState {
    fn deref_mut(&mut self) -> &mut AgentState {
        &mut self.state
    }
}

fn new_state(cpus: f64, gpus: usize) -> TestState {
    new_state_in(cpus, gpus, WorkerStartEnv::default())
}

/// A node whose own environment (which its workers inherit) is `inherited_env`.
fn new_state_in(cpus: f64, gpus: usize, inherited_env: WorkerStartEnv) -> TestState {
    let root = std::env::temp_dir().join(format!("oxray-state-test-{}", rand::random::<u64>()));
    let store = ObjectStore::new(root.join("shm"), root.join("spill"), 1 << 20).unwrap();
    let guard = RemovedOnDrop(root);
    let mut total = ResourceSet::new();
    total.set("CPU", cpus).unwrap();
    total.set("GPU", gpus as f64).unwrap();
    total.set("custom", 1.0).unwrap();
    let state = AgentState::new(
        AgentConfig {
            node_id: NodeId::from_array([1; 16]),
            total,
            num_gpus: gpus,
            max_starting_workers: 2,
            worker_env: vec![],
            inherited_env,
            dead_actors_kept: 1000,
            labels: HashMap::from([("zone".to_string(), "home".to_string())]),
        },
        store,
    );
    TestState { state, _root: guard }
}

fn task(n: u8, resources: &[(&str, f64)]) -> TaskSpec {
    TaskSpec {
        task_id: vec![n; 16],
        function_id: vec![0; 16],
        name: format!("t{n}"),
        kind: TaskKind::Normal as i32,
        return_ids: vec![vec![100 + n; 16]],
        resources: resources.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        owner_id: DRIVER.to_vec(),
        ..Default::default()
    }
}

fn spawned(st: &mut AgentState) -> Vec<WorkerId> {
    st.take_actions()
        .into_iter()
        .filter_map(|a| match a {
            Action::SpawnWorker { worker_id, .. } => Some(worker_id),
            _ => None,
        })
        .collect()
}

fn connect(st: &mut AgentState, worker: WorkerId, pid: u32) -> UnboundedReceiver<Result<Assignment, tonic::Status>> {
    let (tx, rx) = unbounded_channel();
    st.set_worker_pid(worker, pid);
    st.worker_connected(worker, tx, NOW).unwrap();
    rx
}

fn next(rx: &mut UnboundedReceiver<Result<Assignment, tonic::Status>>) -> Option<TaskSpec> {
    rx.try_recv().ok().map(|a| a.unwrap().task.unwrap())
}

fn done(st: &mut AgentState, worker: WorkerId, spec: &TaskSpec, value: &[u8]) {
    let returns = spec
        .return_ids
        .iter()
        .map(|r| ObjectLocation { object_id: r.clone(), place: Some(Place::InlineData(value.to_vec())), size: 1 })
        .collect();
    let req = TaskDoneRequest { task_id: spec.task_id.clone(), returns, ..Default::default() };
    st.task_done(worker, TaskId::from_bytes(&spec.task_id).unwrap(), req, &[], NOW).unwrap();
}

fn system_error_type(st: &mut AgentState, id: ObjectId) -> Option<String> {
    let loc = st.locate(id, DRIVER);
    let Some(Place::InlineData(data)) = loc.place else { return None };
    let parsed = oxray_object_store::parse(&data).ok()?;
    (parsed.flags == FLAG_SYSTEM_ERROR).then(|| {
        let v: serde_json::Value = serde_json::from_slice(&data[parsed.pickle]).unwrap();
        v["type"].as_str().unwrap().to_string()
    })
}

#[test]
fn tasks_wait_for_cpus_and_reuse_workers() {
    let mut st = new_state(1.0, 0);
    st.submit(DRIVER, task(1, &[("CPU", 1.0)]), NOW).unwrap();
    st.submit(DRIVER, task(2, &[("CPU", 1.0)]), NOW).unwrap();
    st.schedule(NOW);
    let workers = spawned(&mut st);
    assert_eq!(workers.len(), 1, "one CPU: one worker is enough");
    let mut rx = connect(&mut st, workers[0], 10);
    let first = next(&mut rx).expect("first task assigned on connect");
    assert_eq!(first.name, "t1");
    assert!(next(&mut rx).is_none(), "second task waits for the CPU");
    assert_eq!(st.available().get("CPU"), 0.0);
    done(&mut st, workers[0], &first, b"x");
    let second = next(&mut rx).expect("the same worker takes the next task");
    assert_eq!(second.name, "t2");
    assert!(spawned(&mut st).is_empty());
    assert!(st.is_ready(&oid(101)));
}

#[test]
fn a_task_is_listed_with_the_times_its_events_were_given() {
    let mut st = new_state(1.0, 0);
    let spec = task(1, &[("CPU", 1.0)]);
    st.submit(DRIVER, spec.clone(), 1_000).unwrap();
    st.schedule(1_500);
    let worker = spawned(&mut st)[0];
    let (tx, mut rx) = unbounded_channel();
    st.set_worker_pid(worker, 10);
    // The worker connecting is what starts the task.
    st.worker_connected(worker, tx, 2_000).unwrap();
    assert_eq!(next(&mut rx).expect("assigned on connect").name, "t1");
    let (rows, _) = st.list_tasks(10);
    assert_eq!((rows[0].creation_time_ms, rows[0].start_time_ms), (1_000, 2_000));
    let value = ObjectLocation {
        object_id: spec.return_ids[0].clone(),
        place: Some(Place::InlineData(b"x".to_vec())),
        size: 1,
    };
    let req = TaskDoneRequest { task_id: spec.task_id.clone(), returns: vec![value], ..Default::default() };
    st.task_done(worker, TaskId::from_bytes(&spec.task_id).unwrap(), req, &[], 3_000).unwrap();
    let (rows, _) = st.list_tasks(10);
    assert_eq!((rows[0].creation_time_ms, rows[0].start_time_ms, rows[0].end_time_ms), (1_000, 2_000, 3_000));
}

#[test]
fn a_dead_workers_unfinished_tasks_fail_with_owner_died() {
    let mut st = new_state(1.0, 0);
    st.submit(DRIVER, task(1, &[("CPU", 1.0)]), NOW).unwrap();
    st.schedule(NOW);
    let owner = spawned(&mut st)[0];
    let mut rx = connect(&mut st, owner, 10);
    assert_eq!(next(&mut rx).unwrap().name, "t1");
    // The running task submits a child, which waits for the only CPU.
    let mut child = task(2, &[("CPU", 1.0)]);
    child.owner_id = owner.to_vec();
    st.submit(owner.into(), child, NOW).unwrap();
    st.add_holders(DRIVER, &[oid(102)]); // its ref was handed to the driver
    st.schedule(NOW);
    st.worker_exited(owner, "exit code 1".into(), NOW);
    assert_eq!(system_error_type(&mut st, oid(102)).as_deref(), Some("OwnerDiedError"));
    assert_eq!(system_error_type(&mut st, oid(101)).as_deref(), Some("WorkerCrashedError"));
}

#[test]
fn fractional_cpus_run_side_by_side() {
    let mut st = new_state(1.0, 0);
    for n in 1..=4 {
        st.submit(DRIVER, task(n, &[("CPU", 0.25)]), NOW).unwrap();
    }
    st.schedule(NOW);
    let workers = spawned(&mut st);
    assert_eq!(workers.len(), 2, "bounded by max_starting_workers");
    let mut rxs: Vec<_> = workers.iter().enumerate().map(|(i, w)| connect(&mut st, *w, 20 + i as u32)).collect();
    let running: usize = rxs.iter_mut().map(|rx| usize::from(next(rx).is_some())).sum();
    assert_eq!(running, 2);
    assert!((st.available().get("CPU") - 0.5).abs() < 1e-9);
    // The scheduler asks for more workers for the two still waiting.
    st.schedule(NOW);
    assert_eq!(spawned(&mut st).len(), 2);
}

#[test]
fn infeasible_request_fails_at_once_with_a_clear_message() {
    let mut st = new_state(2.0, 0);
    let msg = st.submit(DRIVER, task(1, &[("CPU", 64.0)]), NOW).unwrap().expect("infeasible");
    assert!(msg.contains("CPU") && msg.contains("64"), "{msg}");
    assert!(msg.contains("cluster"), "{msg}");
    assert_eq!(system_error_type(&mut st, oid(101)).as_deref(), Some("TaskUnschedulableError"));
    let msg = st.submit(DRIVER, task(2, &[("nonexistent", 1.0)]), NOW).unwrap().expect("infeasible");
    assert!(msg.contains("nonexistent"), "{msg}");
}

#[test]
fn crashed_worker_retries_then_reports_worker_crashed() {
    let mut st = new_state(1.0, 0);
    let mut spec = task(1, &[("CPU", 1.0)]);
    spec.max_retries = 1;
    st.submit(DRIVER, spec, NOW).unwrap();
    st.schedule(NOW);
    let w1 = spawned(&mut st)[0];
    let mut rx = connect(&mut st, w1, 30);
    assert!(next(&mut rx).is_some());
    st.worker_exited(w1, "killed by SIGKILL".into(), NOW);
    assert_eq!(st.available().get("CPU"), 1.0, "resources come back");
    let w2 = spawned(&mut st)[0];
    let mut rx2 = connect(&mut st, w2, 31);
    assert!(next(&mut rx2).is_some(), "retried on a new worker");
    st.worker_exited(w2, "killed by SIGKILL".into(), NOW);
    assert_eq!(system_error_type(&mut st, oid(101)).as_deref(), Some("WorkerCrashedError"));
}

#[test]
fn arguments_gate_tasks_and_are_freed_when_unreferenced() {
    let mut st = new_state(1.0, 0);
    let mut consumer = task(2, &[("CPU", 1.0)]);
    consumer.args = vec![TaskArg { kind: Some(Kind::ObjectId(vec![101; 16])) }];
    st.submit(DRIVER, task(1, &[("CPU", 1.0)]), NOW).unwrap();
    st.submit(DRIVER, consumer, NOW).unwrap();
    st.schedule(NOW);
    let w = spawned(&mut st)[0];
    let mut rx = connect(&mut st, w, 40);
    let producer = next(&mut rx).unwrap();
    done(&mut st, w, &producer, b"arg");
    let consumer = next(&mut rx).expect("runs once its argument exists");
    // The driver drops its ref; the running task still pins the argument.
    st.remove_holders(DRIVER, &[oid(101)], NOW);
    assert!(st.is_ready(&oid(101)));
    done(&mut st, w, &consumer, b"out");
    assert!(!st.is_known(&oid(101)), "freed once nothing holds or pins it");
    assert!(st.is_ready(&oid(102)));
}

#[test]
fn gpus_are_assigned_by_index() {
    let mut st = new_state(4.0, 2);
    st.submit(DRIVER, task(1, &[("CPU", 1.0), ("GPU", 1.0)]), NOW).unwrap();
    st.submit(DRIVER, task(2, &[("CPU", 1.0), ("GPU", 1.0)]), NOW).unwrap();
    st.schedule(NOW);
    let workers = spawned(&mut st);
    let mut devices: Vec<String> = workers
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let mut rx = connect(&mut st, *w, 50 + i as u32);
            rx.try_recv().unwrap().unwrap().cuda_visible_devices
        })
        .collect();
    devices.sort();
    assert_eq!(devices, vec!["0".to_string(), "1".to_string()]);
}

#[test]
fn a_task_gets_its_gpus_by_the_nodes_names_and_its_cpus_as_omp_threads() {
    let node_env = WorkerStartEnv::default().with([(CUDA_VISIBLE_DEVICES, "uuid1,uuid2")]);
    let mut st = new_state_in(4.0, 2, node_env);
    st.submit(DRIVER, task(1, &[("CPU", 3.0), ("GPU", 2.0)]), NOW).unwrap();
    st.schedule(NOW);
    let worker = spawned(&mut st)[0];
    let mut rx = connect(&mut st, worker, 51);
    let assignment = rx.try_recv().unwrap().unwrap();
    assert_eq!(assignment.cuda_visible_devices, "uuid1,uuid2");
    let env = assignment.env.unwrap();
    assert_eq!(env.kept.get(CUDA_VISIBLE_DEVICES).map(String::as_str), Some("uuid1,uuid2"));
    assert_eq!(env.kept.get(OMP_NUM_THREADS).map(String::as_str), Some("3"));
}

#[test]
fn an_actors_calls_run_on_its_gpus_and_its_own_environment() {
    let mut st = new_state(2.0, 2);
    let mut spec = actor_spec(0);
    spec.resources = HashMap::from([("GPU".to_string(), 1.0)]);
    // The actor's worker starts with its runtime_env: its CUDA_VISIBLE_DEVICES names the GPUs.
    spec.env_vars = HashMap::from([(CUDA_VISIBLE_DEVICES.to_string(), "7".to_string())]);
    st.register_actor(&spec, false).unwrap();
    st.submit(DRIVER, spec, NOW).unwrap();
    st.schedule(NOW);
    let w = spawned(&mut st)[0];
    st.submit_actor_task(DRIVER, actor_call(20), NOW).unwrap();
    let mut rx = connect(&mut st, w, 61);
    let creation = rx.try_recv().unwrap().unwrap();
    assert_eq!(creation.cuda_visible_devices, "7");
    let env = creation.env.unwrap();
    assert_eq!(env.during_task.get(CUDA_VISIBLE_DEVICES).map(String::as_str), Some("7"));
    assert_eq!(env.kept.get(OMP_NUM_THREADS).map(String::as_str), Some("1"), "an actor holding no CPU");
    let req = TaskDoneRequest { task_id: vec![7; 16], ..Default::default() };
    st.task_done(w, TaskId::from_array([7; 16]), req, &[], NOW).unwrap();
    let call = rx.try_recv().unwrap().unwrap();
    assert_eq!(call.cuda_visible_devices, "7", "a call runs on its actor's GPU");
    let env = call.env.unwrap();
    assert_eq!(env.kept.get(CUDA_VISIBLE_DEVICES).map(String::as_str), Some("7"));
    assert!(!env.kept.contains_key(OMP_NUM_THREADS), "set once, at the actor's creation");
}

fn actor_spec(max_restarts: i32) -> TaskSpec {
    TaskSpec {
        task_id: vec![7; 16],
        function_id: vec![0; 16],
        name: "Counter".into(),
        kind: TaskKind::ActorCreation as i32,
        actor_id: vec![9; 16],
        max_restarts,
        placement_resources: HashMap::from([("CPU".to_string(), 1.0)]),
        owner_id: DRIVER.to_vec(),
        ..Default::default()
    }
}

fn actor_call(n: u8) -> TaskSpec {
    TaskSpec {
        task_id: vec![n; 16],
        name: "Counter.inc".into(),
        kind: TaskKind::ActorTask as i32,
        actor_id: vec![9; 16],
        return_ids: vec![vec![100 + n; 16]],
        owner_id: DRIVER.to_vec(),
        ..Default::default()
    }
}

/// Registers and places the test actor: returns its starting worker's id.
fn place_actor(st: &mut AgentState, max_restarts: i32) -> WorkerId {
    let spec = actor_spec(max_restarts);
    st.register_actor(&spec, false).unwrap();
    st.submit(DRIVER, spec, NOW).unwrap();
    st.schedule(NOW);
    spawned(st)[0]
}

#[test]
fn actor_calls_run_in_order_and_restart_after_a_crash() {
    let mut st = new_state(2.0, 0);
    let w = place_actor(&mut st, 1);
    for n in 20..25 {
        st.submit_actor_task(DRIVER, actor_call(n), NOW).unwrap();
    }
    let mut rx = connect(&mut st, w, 60);
    let creation = next(&mut rx).unwrap();
    assert_eq!(creation.kind, TaskKind::ActorCreation as i32);
    assert!(next(&mut rx).is_none(), "calls wait for the constructor");
    let req = TaskDoneRequest { task_id: creation.task_id.clone(), ..Default::default() };
    st.task_done(w, TaskId::from_array([7; 16]), req, &[], NOW).unwrap();
    let order: Vec<String> = std::iter::from_fn(|| next(&mut rx)).map(|t| hex::encode(&t.task_id[..1])).collect();
    assert_eq!(order, vec!["14", "15", "16", "17", "18"], "submission order");
    // The actor holds no CPU but needed one to be placed.
    assert_eq!(st.available().get("CPU"), 2.0);
    st.worker_exited(w, "killed by SIGKILL".into(), NOW);
    assert_eq!(
        system_error_type(&mut st, oid(120)).as_deref(),
        Some("ActorUnavailableError"),
        "in-flight call fails while the actor restarts"
    );
    st.schedule(NOW);
    let w2 = spawned(&mut st);
    assert_eq!(w2.len(), 1, "restarted on a new worker");
    st.worker_exited(w2[0], "killed by SIGKILL".into(), NOW);
    st.submit_actor_task(DRIVER, actor_call(30), NOW).unwrap();
    assert_eq!(system_error_type(&mut st, oid(130)).as_deref(), Some("ActorDiedError"), "past max_restarts");
}

#[test]
fn an_actor_is_reclaimed_once_its_handle_token_is_freed_after_the_creators_calls() {
    let mut st = new_state(2.0, 0);
    let actor = ActorId::from_array([9; 16]);
    st.reclaim_when_unreferenced(actor);
    let w = place_actor(&mut st, 0);
    let token = actors::handle_token_id(actor);
    st.add_holders(DRIVER, &[token]);
    st.submit_actor_task(DRIVER, actor_call(20), NOW).unwrap();
    // The last handle goes before the actor even started: its calls still run first.
    st.remove_holders(DRIVER, &[token], NOW);
    let mut rx = connect(&mut st, w, 60);
    let creation = next(&mut rx).unwrap();
    let req = TaskDoneRequest { task_id: creation.task_id.clone(), ..Default::default() };
    st.task_done(w, TaskId::from_array([7; 16]), req, &[], NOW).unwrap();
    let call = next(&mut rx).unwrap();
    assert_eq!(call.task_id, vec![20; 16]);
    let reclaim = next(&mut rx).unwrap();
    assert_eq!(reclaim.method_name, actors::RECLAIM_METHOD);
    assert_eq!(reclaim.name, "Counter.__ray_terminate__");
    // A token freed again (a later handle's) reclaims nothing twice.
    st.add_holders(DRIVER, &[token]);
    st.remove_holders(DRIVER, &[token], NOW);
    assert!(next(&mut rx).is_none());
}

#[test]
fn an_actor_that_ends_itself_outside_any_call_is_dead_for_good() {
    let mut st = new_state(2.0, 0);
    let w = place_actor(&mut st, 3);
    let mut rx = connect(&mut st, w, 62);
    let creation = next(&mut rx).unwrap();
    let req = TaskDoneRequest { task_id: creation.task_id.clone(), ..Default::default() };
    st.task_done(w, TaskId::from_array([7; 16]), req, &[], NOW).unwrap();
    // An async actor's background task called exit_actor(): no call is running, so the
    // worker names its (finished) creation task.
    let exit = TaskDoneRequest {
        task_id: creation.task_id.clone(),
        actor_exit: "The actor Counter exited on purpose: exit_actor() was called".into(),
        ..Default::default()
    };
    st.task_done(w, TaskId::from_array([7; 16]), exit, &[], NOW).unwrap();
    // The agent's kill ends the process: the actor is not started again.
    st.worker_exited(w, "killed by SIGKILL".into(), NOW);
    st.schedule(NOW);
    assert!(spawned(&mut st).is_empty(), "no new worker for it");
    st.submit_actor_task(DRIVER, actor_call(20), NOW).unwrap();
    assert_eq!(
        system_error_type(&mut st, oid(120)).as_deref(),
        Some("ActorDiedError"),
        "no restart, though max_restarts allows three"
    );
}

#[test]
fn a_name_is_free_again_once_its_actor_is_killed_for_good() {
    let mut st = new_state(2.0, 0);
    let mut spec = actor_spec(3);
    spec.actor_name = "counter".into();
    st.register_actor(&spec, false).unwrap();
    st.submit(DRIVER, spec.clone(), NOW).unwrap();
    st.schedule(NOW);
    let w = spawned(&mut st)[0];
    let mut rx = connect(&mut st, w, 61);
    let creation = next(&mut rx).unwrap();
    let req = TaskDoneRequest { task_id: creation.task_id.clone(), ..Default::default() };
    st.task_done(w, TaskId::from_array([7; 16]), req, &[], NOW).unwrap();
    st.kill_actor(ActorId::from_array([9; 16]), true, NOW).unwrap();
    // Its process has not exited yet, but the kill was for good: as in Ray, the name is free.
    assert!(st.named_actor("", "counter").is_none());
    let mut again = spec;
    again.actor_id = vec![10; 16];
    assert_eq!(st.register_actor(&again, false).unwrap(), (ActorId::from_array([10; 16]), false));
}

#[test]
fn named_actors_are_unique_per_namespace() {
    let mut st = new_state(2.0, 0);
    let mut spec = actor_spec(0);
    spec.actor_name = "counter".into();
    spec.namespace = "ns".into();
    st.register_actor(&spec, false).unwrap();
    let mut again = spec.clone();
    again.actor_id = vec![10; 16];
    assert!(st.register_actor(&again, false).unwrap_err().to_string().contains("is already taken"));
    assert_eq!(st.register_actor(&again, true).unwrap(), (ActorId::from_array([9; 16]), true));
    assert!(st.named_actor("ns", "counter").is_some());
    assert!(st.named_actor("other", "counter").is_none());
}

#[test]
fn cancelling_a_queued_task_fails_its_result() {
    let mut st = new_state(1.0, 0);
    st.submit(DRIVER, task(1, &[("CPU", 1.0)]), NOW).unwrap();
    st.submit(DRIVER, task(2, &[("CPU", 1.0)]), NOW).unwrap();
    st.cancel(oid(102), false, false, NOW);
    assert_eq!(system_error_type(&mut st, oid(102)).as_deref(), Some("TaskCancelledError"));
    st.schedule(NOW);
    let w = spawned(&mut st)[0];
    let mut rx = connect(&mut st, w, 70);
    assert_eq!(next(&mut rx).unwrap().name, "t1");
    assert!(next(&mut rx).is_none());
}

#[test]
fn a_call_waiting_for_arguments_only_holds_back_its_own_caller() {
    let mut st = new_state(2.0, 0);
    let w = place_actor(&mut st, 0);
    let mut rx = connect(&mut st, w, 80);
    let creation = next(&mut rx).unwrap();
    st.task_done(
        w,
        TaskId::from_array([7; 16]),
        TaskDoneRequest { task_id: creation.task_id.clone(), ..Default::default() },
        &[],
        NOW,
    )
    .unwrap();
    // The driver's call waits for an object nobody has produced yet.
    let mut blocked = actor_call(40);
    blocked.args = vec![TaskArg { kind: Some(Kind::ObjectId(vec![0xee; 16])) }];
    st.add_holders(DRIVER, &[oid(0xee)]);
    st.submit_actor_task(DRIVER, blocked, NOW).unwrap();
    let mut later_same_caller = actor_call(41);
    later_same_caller.return_ids = vec![vec![141; 16]];
    st.submit_actor_task(DRIVER, later_same_caller, NOW).unwrap();
    let mut other_caller = actor_call(42);
    other_caller.owner_id = vec![0xc; 16];
    st.submit_actor_task(ClientId::from_array([0xc; 16]), other_caller, NOW).unwrap();
    let sent: Vec<u8> = std::iter::from_fn(|| next(&mut rx)).map(|t| t.task_id[0]).collect();
    assert_eq!(sent, vec![42], "only the other caller's call may pass");
    st.seal_object(
        &ObjectLocation { object_id: vec![0xee; 16], place: Some(Place::InlineData(b"v".to_vec())), size: 1 },
        &[],
        NOW,
    )
    .unwrap();
    let sent: Vec<u8> = std::iter::from_fn(|| next(&mut rx)).map(|t| t.task_id[0]).collect();
    assert_eq!(sent, vec![40, 41], "the driver's calls follow in its order");
}

#[test]
fn a_call_waiting_for_arguments_holds_back_only_its_own_concurrency_group() {
    let mut st = new_state(2.0, 0);
    let w = place_actor(&mut st, 0);
    let mut rx = connect(&mut st, w, 81);
    let creation = next(&mut rx).unwrap();
    let req = TaskDoneRequest { task_id: creation.task_id.clone(), ..Default::default() };
    st.task_done(w, TaskId::from_array([7; 16]), req, &[], NOW).unwrap();
    let mut blocked = actor_call(40);
    blocked.concurrency_group = "group_a".into();
    blocked.args = vec![TaskArg { kind: Some(Kind::ObjectId(vec![0xee; 16])) }];
    st.add_holders(DRIVER, &[oid(0xee)]);
    st.submit_actor_task(DRIVER, blocked, NOW).unwrap();
    let mut same_group = actor_call(41);
    same_group.concurrency_group = "group_a".into();
    st.submit_actor_task(DRIVER, same_group, NOW).unwrap();
    for n in [42, 43] {
        let mut other_group = actor_call(n);
        other_group.concurrency_group = "group_b".into();
        st.submit_actor_task(DRIVER, other_group, NOW).unwrap();
    }
    let sent: Vec<u8> = std::iter::from_fn(|| next(&mut rx)).map(|t| t.task_id[0]).collect();
    assert_eq!(sent, vec![42, 43], "group_b's calls pass group_a's waiting one, in order");
}

#[test]
fn a_worker_dying_while_blocked_in_get_returns_its_cpu_once() {
    let mut st = new_state(2.0, 0);
    st.submit(DRIVER, task(1, &[("CPU", 1.0)]), NOW).unwrap();
    st.schedule(NOW);
    let w = spawned(&mut st)[0];
    let mut rx = connect(&mut st, w, 90);
    assert!(next(&mut rx).is_some());
    assert_eq!(st.available().get("CPU"), 1.0);
    st.set_worker_blocked(w, true, NOW);
    assert_eq!(st.available().get("CPU"), 2.0, "lent back while blocked");
    st.worker_exited(w, "killed by SIGKILL".into(), NOW);
    // Not 3.0: the lent CPU must not be returned a second time.
    assert_eq!(st.available().get("CPU"), 2.0);
    assert_eq!(system_error_type(&mut st, oid(101)).as_deref(), Some("WorkerCrashedError"));
}

#[test]
fn an_actor_blocked_in_get_lends_its_cpu_until_it_resumes_or_dies() {
    let mut st = new_state(1.0, 0);
    let mut spec = actor_spec(0);
    spec.resources = HashMap::from([("CPU".to_string(), 1.0)]);
    st.register_actor(&spec, false).unwrap();
    st.submit(DRIVER, spec, NOW).unwrap();
    st.schedule(NOW);
    let w = spawned(&mut st)[0];
    let mut rx = connect(&mut st, w, 62);
    let creation = next(&mut rx).unwrap();
    let req = TaskDoneRequest { task_id: creation.task_id.clone(), ..Default::default() };
    st.task_done(w, TaskId::from_array([7; 16]), req, &[], NOW).unwrap();
    assert_eq!(st.available().get("CPU"), 0.0, "the live actor holds the node's CPU");
    st.submit(DRIVER, task(1, &[("CPU", 1.0)]), NOW).unwrap();
    st.schedule(NOW);
    assert!(spawned(&mut st).is_empty(), "no CPU for the task yet");
    // The actor waits in get (a training rank waiting for its next batch).
    st.set_worker_blocked(w, true, NOW);
    let task_worker = spawned(&mut st);
    assert_eq!(task_worker.len(), 1, "the task starts on the CPU the blocked actor lent");
    let mut task_rx = connect(&mut st, task_worker[0], 63);
    assert!(next(&mut task_rx).is_some());
    assert_eq!(st.available().get("CPU"), 0.0);
    st.set_worker_blocked(w, false, NOW);
    assert_eq!(st.available().get("CPU"), -1.0, "taken back: oversubscribed until the task ends");
    st.set_worker_blocked(w, true, NOW);
    st.worker_exited(w, "killed by SIGKILL".into(), NOW);
    // Lent (+1) then the dead actor's hold (+1) minus the lent CPU taken back (-1), with the task's CPU in use.
    assert_eq!(st.available().get("CPU"), 0.0, "the lent CPU is not returned twice");
}

fn cpus(n: f64) -> ResourceSet {
    ResourceSet::from_map(&HashMap::from([("CPU".to_string(), n)])).unwrap()
}

/// Task `n` asking for `resources` from `pg`'s bundle `bundle_index` (-1: any).
fn in_bundle(n: u8, pg: PlacementGroupId, bundle_index: i32, resources: &[(&str, f64)]) -> TaskSpec {
    let placement_group = Some(PlacementGroupBundle { placement_group_id: pg.to_vec(), bundle_index });
    TaskSpec { placement_group, ..task(n, resources) }
}

/// A zero-CPU task in any bundle of `pg` (what `PlacementGroup.ready()` submits).
fn in_group(n: u8, pg: PlacementGroupId) -> TaskSpec {
    in_bundle(n, pg, -1, &[])
}

#[test]
fn a_task_in_a_bundle_takes_the_bundles_resources_under_the_groups_names() {
    let mut st = new_state(2.0, 0);
    let pg = PlacementGroupId::from_array([6; 16]);
    st.reserve_bundles(pg, &[(0, cpus(1.0)), (1, cpus(1.0))]).unwrap();
    st.commit_bundles(pg, NOW).unwrap();
    assert_eq!(st.available().get("CPU"), 0.0, "both CPUs are the group's");
    st.submit(DRIVER, task(1, &[("CPU", 1.0)]), NOW).unwrap();
    st.submit(DRIVER, in_bundle(2, pg, 1, &[("CPU", 1.0)]), NOW).unwrap();
    st.schedule(NOW);
    let worker = spawned(&mut st);
    assert_eq!(worker.len(), 1, "only the task in the group has a CPU");
    let mut rx = connect(&mut st, worker[0], 12);
    let started = next(&mut rx).unwrap();
    assert_eq!(started.name, "t2");
    assert_eq!(started.resources, HashMap::from([("CPU".to_string(), 1.0)]), "the worker sees what it asked for");
    let pg_hex = pg.hex();
    assert_eq!(st.available().get(&format!("CPU_group_1_{pg_hex}")), 0.0);
    assert_eq!(st.available().get(&format!("CPU_group_0_{pg_hex}")), 1.0);
    assert_eq!(st.available().get(&format!("CPU_group_{pg_hex}")), 1.0);
    // A bundle index the group lacks can never be met here.
    let bad = st.submit(DRIVER, in_bundle(3, pg, -2, &[]), NOW);
    assert!(matches!(bad, Err(AgentError::Malformed(_))), "{bad:?}");
}

#[test]
fn a_placement_group_actor_lends_its_bundle_cpus_as_plain_cpus() {
    let pg = PlacementGroupId::from_array([5; 16]);
    let holds = group_names::in_group(&cpus(2.0), &pg, Some(0));
    assert_eq!(group_names::cpus_to_lend(&holds).get("CPU"), 2.0);
}

#[test]
fn a_reserved_bundle_runs_nothing_until_the_head_commits_it() {
    let mut st = new_state(2.0, 0);
    let pg = PlacementGroupId::from_array([7; 16]);
    st.reserve_bundles(pg, &[(0, cpus(1.0))]).unwrap();
    assert_eq!(st.available().get("CPU"), 1.0, "a reservation takes its CPUs at once");
    st.submit(DRIVER, in_group(1, pg), NOW).unwrap();
    st.schedule(NOW);
    assert!(spawned(&mut st).is_empty(), "the head may still give the group up: nothing runs in it yet");
    st.commit_bundles(pg, NOW).unwrap();
    let worker = spawned(&mut st);
    assert_eq!(worker.len(), 1, "committed: the group's task starts");
    let mut rx = connect(&mut st, worker[0], 10);
    assert_eq!(next(&mut rx).unwrap().name, "t1");
    assert_eq!(st.available().get("CPU"), 1.0);
    st.commit_bundles(pg, NOW).expect("a second commit (a retried RPC) changes nothing");
    assert_eq!(st.available().get("CPU"), 1.0);

    // Returning a committed group kills what runs in it and gives its CPUs back.
    st.take_actions();
    st.return_bundles(pg, NOW);
    let killed: Vec<u32> = st
        .take_actions()
        .into_iter()
        .filter_map(|a| match a {
            Action::Signal { pid, signal } if signal == libc::SIGKILL => Some(pid),
            _ => None,
        })
        .collect();
    assert_eq!(killed, vec![10]);
    assert_eq!(st.available().get("CPU"), 2.0);
}

#[test]
fn a_returned_reservation_gives_its_resources_back_and_cannot_be_committed() {
    let mut st = new_state(2.0, 0);
    let pg = PlacementGroupId::from_array([8; 16]);
    st.reserve_bundles(pg, &[(0, cpus(1.0)), (1, cpus(1.0))]).unwrap();
    let other = PlacementGroupId::from_array([9; 16]);
    let refused = st.reserve_bundles(other, &[(0, cpus(1.0))]).unwrap_err();
    assert!(matches!(refused, AgentError::BundlesDoNotFit { .. }), "{refused}");
    st.return_bundles(pg, NOW);
    assert_eq!(st.available().get("CPU"), 2.0);
    assert_eq!(st.total().get("CPU"), 2.0);
    let late = st.commit_bundles(pg, NOW).unwrap_err();
    assert!(matches!(late, AgentError::BundlesNotReserved(id) if id == pg), "{late}");
    assert!(late.to_string().contains(&pg.hex()), "{late}");
}

#[test]
fn a_reservation_never_committed_lapses_and_a_committed_group_stays() {
    let mut st = new_state(2.0, 0);
    let (orphan, placed) = (PlacementGroupId::from_array([10; 16]), PlacementGroupId::from_array([11; 16]));
    st.reserve_bundles(orphan, &[(0, cpus(1.0))]).unwrap();
    st.reserve_bundles(placed, &[(0, cpus(1.0))]).unwrap();
    st.commit_bundles(placed, NOW).unwrap();
    for _ in 0..bundles::RESERVATION_BEATS {
        st.age_reservations(NOW);
    }
    assert_eq!(st.available().get("CPU"), 0.0, "a reservation lasts {} beats", bundles::RESERVATION_BEATS);
    st.take_actions();
    st.age_reservations(NOW);
    assert_eq!(st.available().get("CPU"), 1.0, "its head never committed it: the CPU is free again");
    assert!(log_lines(&mut st).iter().any(|l| l.contains(&orphan.hex()) && l.contains("never committed")));
    assert!(matches!(st.commit_bundles(orphan, NOW), Err(AgentError::BundlesNotReserved(_))));
    assert_eq!(st.total().get(&format!("CPU_group_{}", placed.hex())), 1.0, "the committed group is kept");
}

#[test]
fn killing_an_actor_before_it_starts_keeps_it_dead() {
    let mut st = new_state(2.0, 0);
    let w = place_actor(&mut st, 3);
    st.kill_actor(ActorId::from_array([9; 16]), true, NOW).unwrap();
    assert_eq!(st.actor(&ActorId::from_array([9; 16])).unwrap().state, ActorState::Dead);
    // The worker that was starting connects afterwards: it gets no constructor and is killed.
    let mut rx = connect(&mut st, w, 95);
    assert!(next(&mut rx).is_none());
    assert!(st.take_actions().iter().any(|a| matches!(a, Action::Signal { pid: 95, .. })));
    assert_eq!(st.available().get("CPU"), 2.0);
    st.submit_actor_task(DRIVER, actor_call(50), NOW).unwrap();
    assert_eq!(system_error_type(&mut st, oid(150)).as_deref(), Some("ActorDiedError"));
}

#[test]
fn killing_an_actor_before_it_starts_with_restarts_left_counts_a_restart() {
    let mut st = new_state(2.0, 0);
    let id = ActorId::from_array([9; 16]);
    let w = place_actor(&mut st, 1);
    st.kill_actor(id, false, NOW).unwrap();
    let actor = st.actor(&id).unwrap();
    assert_ne!(actor.state, ActorState::Dead, "a restart was allowed");
    assert_eq!(actor.num_restarts, 1);
    // Its creation goes on: the worker that was starting gets the constructor.
    let mut rx = connect(&mut st, w, 95);
    assert_eq!(next(&mut rx).unwrap().kind, TaskKind::ActorCreation as i32);
    // No restart is left: the next such kill is for good.
    st.kill_actor(id, false, NOW).unwrap();
    assert!(st.take_actions().iter().any(|a| matches!(a, Action::Signal { pid: 95, .. })));
}

// ------------------------------------------------------------ other nodes

const PEER: NodeId = NodeId::from_array([2; 16]);
const PEER_ADDRESS: &str = "127.0.0.1:7001";

/// Another node with `cpus` CPUs, alive or not, as the head would report it.
fn peer_info(cpus: f64, alive: bool) -> oxray_proto::NodeInfo {
    let resources = HashMap::from([("CPU".to_string(), cpus)]);
    oxray_proto::NodeInfo {
        node_id: PEER.to_vec(),
        address: PEER_ADDRESS.into(),
        alive,
        total: resources.clone(),
        available: resources,
        ..Default::default()
    }
}

#[test]
fn a_stale_report_does_not_undo_a_forward_until_the_peer_has_caught_up() {
    let mut st = new_state(1.0, 0);
    forward_big_task(&mut st, 0);
    let cpus = |st: &AgentState| st.peer_available(PEER).unwrap().get("CPU");
    assert_eq!(cpus(&st), 2.0, "the forward's 2 CPUs are taken from the view");
    // The head's next reports still show the peer's beat from before the task arrived.
    st.update_peers(&[peer_info(4.0, true)], NOW);
    st.update_peers(&[peer_info(4.0, true)], NOW);
    assert_eq!(cpus(&st), 2.0, "a stale 4 CPUs would send the next task to a busy node");
    st.update_peers(&[peer_info(4.0, true)], NOW);
    assert_eq!(cpus(&st), 4.0, "then the head's word is taken again");
}

/// Submits a 2-CPU task to a 1-CPU node that knows a 4-CPU peer: it is forwarded.
fn forward_big_task(st: &mut AgentState, retries: i32) -> TaskSpec {
    st.update_peers(&[peer_info(4.0, true)], NOW);
    let mut spec = task(1, &[("CPU", 2.0)]);
    spec.max_retries = retries;
    st.submit(DRIVER, spec.clone(), NOW).unwrap();
    st.schedule(NOW);
    let forwarded: Vec<NodeId> = st
        .take_actions()
        .into_iter()
        .filter_map(|a| match a {
            Action::Forward { node, .. } => Some(node),
            _ => None,
        })
        .collect();
    assert_eq!(forwarded, vec![PEER], "the task goes to the only node with room");
    spec
}

#[test]
fn a_forwarded_task_fails_when_its_node_dies_and_no_retries_are_left() {
    let mut st = new_state(1.0, 0);
    forward_big_task(&mut st, 0);
    assert!(!st.is_ready(&oid(101)));
    st.update_peers(&[peer_info(4.0, false)], NOW);
    assert_eq!(system_error_type(&mut st, oid(101)).as_deref(), Some("WorkerCrashedError"));
    // The head lists it alive again (its host's network came back): it takes work again, on a new link.
    st.update_peers(&[peer_info(4.0, true)], NOW);
    assert!(st.take_actions().iter().any(|a| matches!(a, Action::ResetPeerLink { node } if *node == PEER)));
    st.submit(DRIVER, task(2, &[("CPU", 2.0)]), NOW).unwrap();
    st.schedule(NOW);
    assert!(st.take_actions().iter().any(|a| matches!(a, Action::Forward { node, .. } if *node == PEER)));
}

#[test]
fn a_node_whose_link_broke_stays_dead_here_while_the_head_still_lists_it_alive() {
    let mut st = new_state(1.0, 0);
    forward_big_task(&mut st, 0);
    st.node_died(PEER, "its connection failed", NOW);
    st.take_actions();
    st.update_peers(&[peer_info(4.0, true)], NOW);
    st.submit(DRIVER, task(2, &[("CPU", 2.0)]), NOW).unwrap();
    st.schedule(NOW);
    let actions = st.take_actions();
    assert!(!actions.iter().any(|a| matches!(a, Action::Forward { .. })), "never sent to a node seen dead");
    assert!(!actions.iter().any(|a| matches!(a, Action::ResetPeerLink { .. })));
}

fn log_lines(st: &mut AgentState) -> Vec<String> {
    st.take_actions()
        .into_iter()
        .filter_map(|a| match a {
            Action::Log { message, .. } => Some(message),
            _ => None,
        })
        .collect()
}

#[test]
fn an_infeasible_task_waits_on_a_cluster_nodes_may_join_and_runs_when_one_does() {
    let mut st = new_state(1.0, 0);
    st.expect_joining_nodes();
    assert_eq!(st.submit(DRIVER, task(1, &[("CPU", 2.0)]), NOW).unwrap(), None, "pending, not failed");
    st.schedule(NOW);
    st.take_actions();
    assert!(!st.is_ready(&oid(101)));
    st.warn_infeasible();
    let warnings = log_lines(&mut st);
    assert!(warnings.len() == 1 && warnings[0].contains("t1") && warnings[0].contains("CPU: 2"), "{warnings:?}");
    st.update_peers(&[peer_info(4.0, true)], NOW);
    assert!(st.take_actions().iter().any(|a| matches!(a, Action::Forward { node, .. } if *node == PEER)));
    st.warn_infeasible();
    assert!(log_lines(&mut st).is_empty(), "nothing waits any more");
}

#[test]
fn a_forwarded_task_is_retried_when_its_node_dies() {
    let mut st = new_state(1.0, 0);
    forward_big_task(&mut st, 1);
    st.node_died(PEER, "its link broke", NOW);
    let logs: Vec<String> = st
        .take_actions()
        .into_iter()
        .filter_map(|a| match a {
            Action::Log { message, .. } => Some(message),
            _ => None,
        })
        .collect();
    assert!(logs.iter().any(|m| m.contains("retrying")), "{logs:?}");
    assert!(!st.is_ready(&oid(101)), "queued again, not failed");
    assert!(st.is_known(&oid(101)));
}

/// The peer's report that the forwarded `spec` finished, its return (`oid(101)`, `size` bytes)
/// kept on the peer.
fn kept_return_done(spec: &TaskSpec, size: u64) -> oxray_proto::RemoteTaskDone {
    let kept = oxray_proto::RemoteObject { object_id: oid(101).to_vec(), inline: false, inline_data: vec![], size };
    oxray_proto::RemoteTaskDone { task_id: spec.task_id.clone(), returns: vec![kept], nested: vec![] }
}

#[test]
fn remote_task_done_keeps_large_returns_on_the_executing_node() {
    let mut st = new_state(1.0, 0);
    let spec = forward_big_task(&mut st, 0);
    let done = kept_return_done(&spec, 0);
    st.remote_task_done(PEER, done.clone(), NOW).unwrap();
    assert!(st.is_ready(&oid(101)));
    assert!(!st.is_local(&oid(101)), "its bytes stay on the node that ran it");
    assert_eq!(st.fetch_remote(&[oid(101)]), 1);
    let pulls: Vec<(ObjectId, String)> = st
        .take_actions()
        .into_iter()
        .filter_map(|a| match a {
            Action::Pull { id, address } => Some((id, address)),
            _ => None,
        })
        .collect();
    assert_eq!(pulls, vec![(oid(101), PEER_ADDRESS.to_string())]);
    // A late duplicate report gives back what the node kept for it.
    st.remote_task_done(PEER, done, NOW).unwrap();
    assert!(
        st.take_actions()
            .iter()
            .any(|a| matches!(a, Action::ReleaseRemote { node, id } if *node == PEER && *id == oid(101))),
        "a stale completion releases its copy"
    );
    // Dropping the last reference releases the copy on the other node.
    st.remove_holders(DRIVER, &[oid(101)], NOW);
    assert!(st.take_actions().iter().any(|a| matches!(a, Action::ReleaseRemote { id, .. } if *id == oid(101))));
}

#[test]
fn a_task_runs_where_its_largest_argument_is_when_that_node_has_room() {
    let mut st = new_state(1.0, 0);
    let spec = forward_big_task(&mut st, 0);
    let done = kept_return_done(&spec, 50_000);
    st.remote_task_done(PEER, done, NOW).unwrap();
    st.take_actions();
    let with_arg = |n: u8, spread: bool| {
        let mut spec = task(n, &[("CPU", 1.0)]);
        spec.args = vec![TaskArg { kind: Some(Kind::ObjectId(oid(101).to_vec())) }];
        spec.spread = spread;
        spec
    };
    let forwarded = |st: &mut AgentState| -> Vec<NodeId> {
        st.take_actions()
            .into_iter()
            .filter_map(|a| match a {
                Action::Forward { node, .. } => Some(node),
                _ => None,
            })
            .collect()
    };
    // It fits here, but its argument's bytes are on the peer, which has room: it goes there.
    st.submit(DRIVER, with_arg(2, false), NOW).unwrap();
    st.schedule(NOW);
    assert_eq!(forwarded(&mut st), vec![PEER]);
    // The peer now has no room left for another (1 of its 4 CPUs went to the first forward,
    // 2 to the big task): that one runs here, pulling its argument.
    st.update_peers(&[peer_info(0.0, true)], NOW);
    st.submit(DRIVER, with_arg(3, false), NOW).unwrap();
    st.schedule(NOW);
    assert!(forwarded(&mut st).is_empty(), "no room there: it stays");
    // A task with no arguments is placed as before (here, where it fits).
    st.submit(DRIVER, task(4, &[("CPU", 0.0)]), NOW).unwrap();
    st.schedule(NOW);
    assert!(forwarded(&mut st).is_empty());
}

#[test]
fn remote_task_done_stores_small_returns_here() {
    let mut st = new_state(1.0, 0);
    let spec = forward_big_task(&mut st, 0);
    let done = oxray_proto::RemoteTaskDone {
        task_id: spec.task_id.clone(),
        returns: vec![oxray_proto::RemoteObject {
            object_id: oid(101).to_vec(),
            inline: true,
            inline_data: b"v".to_vec(),
            size: 1,
        }],
        nested: vec![],
    };
    st.remote_task_done(PEER, done, NOW).unwrap();
    assert!(st.is_local(&oid(101)));
    assert_eq!(st.locate(oid(101), DRIVER).place, Some(Place::InlineData(b"v".to_vec())));
}

#[test]
fn peer_gone_drops_its_holds_cancels_its_tasks_and_kills_its_actors() {
    let mut st = new_state(1.0, 0);
    let owner = PEER;
    st.peer_connected(owner);
    // A task that waits for a CPU (the only one is taken by a long task), and an actor.
    st.submit(DRIVER, task(1, &[("CPU", 1.0)]), NOW).unwrap();
    st.schedule(NOW);
    let w = spawned(&mut st)[0];
    let mut rx = connect(&mut st, w, 10);
    let first = next(&mut rx).expect("the driver's task runs");
    let mut queued = task(2, &[("CPU", 1.0)]);
    queued.owner_id = owner.to_vec();
    st.accept_forward(owner, oxray_proto::ForwardTask { spec: Some(queued), sources: vec![], function: vec![] }, NOW)
        .unwrap();
    let mut detached = actor_spec(0);
    detached.actor_id = vec![8; 16];
    detached.task_id = vec![6; 16];
    detached.detached = true;
    for spec in [actor_spec(0), detached] {
        st.accept_forward(owner, oxray_proto::ForwardTask { spec: Some(spec), sources: vec![], function: vec![] }, NOW)
            .unwrap();
    }
    st.add_holders(owner.into(), &[oid(0xee)]);
    st.seal_object(
        &ObjectLocation { object_id: oid(0xee).to_vec(), place: Some(Place::InlineData(b"x".to_vec())), size: 1 },
        &[],
        NOW,
    )
    .unwrap();
    st.peer_gone(owner, NOW);
    assert!(!st.is_known(&oid(102)), "the owner's queued task and its return are gone");
    done(&mut st, w, &first, b"x");
    assert!(next(&mut rx).is_none(), "the cancelled task never runs");
    assert!(!st.is_known(&oid(0xee)), "what was held only for the owner is freed");
    assert_eq!(st.actor(&ActorId::from_array([9; 16])).unwrap().state, ActorState::Dead);
    assert_ne!(st.actor(&ActorId::from_array([8; 16])).unwrap().state, ActorState::Dead, "detached actors live on");
}

const JOB: [u8; 4] = [0, 0, 0, 7];

fn job_actor(id: u8, detached: bool) -> TaskSpec {
    TaskSpec {
        task_id: vec![id; 16],
        name: format!("Actor{id}"),
        kind: TaskKind::ActorCreation as i32,
        actor_id: vec![id; 16],
        placement_resources: HashMap::from([("CPU".to_string(), 0.5)]),
        owner_id: DRIVER.to_vec(),
        job_id: JOB.to_vec(),
        detached,
        ..Default::default()
    }
}

#[test]
fn a_gone_driver_is_cleaned_up_once_and_detached_actors_stay() {
    let mut st = new_state(2.0, 0);
    let job = JobId::from_bytes(&JOB).unwrap();
    assert!(st.driver_connected(DRIVER, job));
    for detached in [true, false] {
        let spec = job_actor(if detached { 40 } else { 41 }, detached);
        st.register_actor(&spec, false).unwrap();
        st.submit(DRIVER, spec, NOW).unwrap();
    }
    let running = TaskSpec { job_id: JOB.to_vec(), ..task(1, &[("CPU", 1.0)]) };
    let queued = TaskSpec { job_id: JOB.to_vec(), ..task(2, &[("CPU", 2.0)]) };
    st.submit(DRIVER, running, NOW).unwrap();
    st.submit(DRIVER, queued, NOW).unwrap();
    st.schedule(NOW);
    let pool = spawned(&mut st).into_iter().find(|w| st.worker_label(w).is_some_and(|(l, _, _)| l == "worker"));
    let mut rx = connect(&mut st, pool.unwrap(), 4242);
    assert_eq!(next(&mut rx).unwrap().name, "t1");
    // Another process still holds the queued task's result: it must read as cancelled.
    let other = ClientId::from_array([0xe; 16]);
    st.add_holders(other, &[oid(102)]);
    let pg = PlacementGroupId::from_array([5; 16]);
    st.note_placement_group(job, pg);
    st.take_actions();

    assert!(st.driver_gone(DRIVER, "its connection broke", NOW));
    let actions = st.take_actions();
    assert!(actions.contains(&Action::Signal { pid: 4242, signal: libc::SIGKILL }), "{actions:?}");
    assert!(actions.contains(&Action::RemovePlacementGroup(pg)), "{actions:?}");
    assert_eq!(system_error_type(&mut st, oid(102)).as_deref(), Some("TaskCancelledError"));
    assert_eq!(st.actor(&ActorId::from_array([41; 16])).unwrap().state, ActorState::Dead);
    assert_ne!(st.actor(&ActorId::from_array([40; 16])).unwrap().state, ActorState::Dead);

    // Exactly once: a second end, or a late reference from the driver, changes nothing.
    assert!(!st.driver_gone(DRIVER, "again", NOW));
    st.add_holders(DRIVER, &[oid(103)]);
    assert!(!st.is_known(&oid(103)));
    assert!(!st.driver_connected(DRIVER, job));
    let again = st.take_actions();
    assert!(!again.iter().any(|a| matches!(a, Action::Signal { .. } | Action::RemovePlacementGroup(_))), "{again:?}");
}

#[test]
fn an_ended_jobs_functions_go_once_no_detached_actor_or_other_job_needs_them() {
    let mut st = new_state(2.0, 0);
    let job = JobId::from_bytes(&JOB).unwrap();
    let other_job = JobId::from_bytes(&[0, 0, 0, 8]).unwrap();
    let other_driver = ClientId::from_array([0xe; 16]);
    assert!(st.driver_connected(DRIVER, job));
    assert!(st.driver_connected(other_driver, other_job));
    let f = |n: u8| vec![n; 16];
    st.register_function(f(1), b"job 7 only".to_vec(), Some(job));
    st.register_function(f(2), b"both jobs".to_vec(), Some(job));
    st.register_function(f(2), b"both jobs".to_vec(), Some(other_job));
    st.register_function(f(3), b"the detached class".to_vec(), Some(job));
    st.register_function(f(4), b"run by job 8".to_vec(), Some(job));
    let detached = TaskSpec { function_id: f(3), ..job_actor(40, true) };
    st.register_actor(&detached, false).unwrap();
    st.submit(DRIVER, detached, NOW).unwrap();
    let queued = TaskSpec {
        job_id: vec![0, 0, 0, 8],
        function_id: f(4),
        owner_id: other_driver.to_vec(),
        ..task(2, &[("CPU", 2.0)])
    };
    st.submit(other_driver, queued, NOW).unwrap();
    assert_eq!(st.function_count(), 4);

    // The job's detached actor may still submit any of the job's functions: all stay.
    assert!(st.driver_gone(DRIVER, "it exited", NOW));
    assert_eq!(st.function_count(), 4);
    // Once it dies, only what job 8 registered or runs stays.
    st.kill_actor(ActorId::from_array([40; 16]), true, NOW).unwrap();
    assert!(st.function(&f(1)).is_none() && st.function(&f(3)).is_none());
    assert!(st.function(&f(2)).is_some() && st.function(&f(4)).is_some());
    // And when job 8 ends too, nothing is left.
    assert!(st.driver_gone(other_driver, "it exited", NOW));
    assert_eq!(st.function_count(), 0);
}

#[test]
fn dead_actors_lose_their_creation_spec_and_only_the_last_few_are_kept() {
    let mut st = new_state(2.0, 0);
    st.actors.set_dead_kept(3);
    let big_arg = TaskArg { kind: Some(Kind::Value(vec![7; 100_000])) };
    for id in 50..60 {
        let spec = TaskSpec { args: vec![big_arg.clone()], ..job_actor(id, false) };
        st.register_actor(&spec, false).unwrap();
        st.submit(DRIVER, spec, NOW).unwrap();
        st.kill_actor(ActorId::from_array([id; 16]), true, NOW).unwrap();
        // The service layer reports each death to the head before it may be forgotten.
        st.take_actions();
    }
    assert_eq!(st.actor_count(), 3, "only the last 3 dead actors are kept");
    assert!(st.actor(&ActorId::from_array([50; 16])).is_none());
    let last = st.actor(&ActorId::from_array([59; 16])).unwrap();
    assert_eq!(last.state, ActorState::Dead);
    assert!(last.creation.args.is_empty(), "a dead actor's constructor arguments are dropped");
    // A call to a forgotten actor still fails at once.
    let call = TaskSpec { actor_id: vec![50; 16], ..actor_call(70) };
    st.submit_actor_task(DRIVER, call, NOW).unwrap();
    assert_eq!(system_error_type(&mut st, oid(170)).as_deref(), Some("ActorDiedError"));
}

#[test]
fn an_ended_job_keeps_its_functions_while_its_work_runs_here_and_workers_learn_of_drops() {
    let mut st = new_state(1.0, 0);
    let job = JobId::from_bytes(&JOB).unwrap();
    let elsewhere = NodeId::from_array([2; 16]);
    let first = TaskSpec { job_id: JOB.to_vec(), function_id: vec![6; 16], ..task(1, &[("CPU", 1.0)]) };
    st.register_function(vec![6; 16], b"the task".to_vec(), Some(job));
    st.submit(DRIVER, first.clone(), NOW).unwrap();
    st.schedule(NOW);
    let worker = spawned(&mut st)[0];
    let mut rx = connect(&mut st, worker, 77);
    assert_eq!(rx.try_recv().unwrap().unwrap().functions_generation, 0);
    // The running task registers a function of its own, then its job ends (its
    // driver was elsewhere, and say a detached actor of it lives there).
    st.register_function(vec![5; 16], b"what it submits".to_vec(), Some(job));
    st.job_ended_elsewhere(job, elsewhere, NOW);
    assert_eq!(st.function_count(), 2, "the job still runs here: its worker may submit either again");
    done(&mut st, worker, &first, b"ok");
    st.job_ended_elsewhere(JobId::from_bytes(&[0, 0, 0, 9]).unwrap(), elsewhere, NOW);
    assert_eq!(st.function_count(), 0);
    // The job's next task here tells its worker that its registrations may be gone.
    st.register_function(vec![6; 16], b"the task".to_vec(), Some(job));
    let second = TaskSpec { job_id: JOB.to_vec(), function_id: vec![6; 16], ..task(2, &[("CPU", 1.0)]) };
    st.submit(DRIVER, second, NOW).unwrap();
    st.schedule(NOW);
    assert_eq!(rx.try_recv().unwrap().unwrap().functions_generation, 1);
}

fn forwarded_nodes(st: &mut AgentState) -> Vec<NodeId> {
    st.take_actions()
        .into_iter()
        .filter_map(|a| match a {
            Action::Forward { node, .. } => Some(node),
            _ => None,
        })
        .collect()
}

#[test]
fn spread_tasks_take_turns_over_the_nodes_with_room() {
    let mut st = new_state(4.0, 0);
    st.update_peers(&[peer_info(4.0, true)], NOW);
    for n in 1..=4 {
        st.submit(DRIVER, TaskSpec { spread: true, ..task(n, &[("CPU", 0.5)]) }, NOW).unwrap();
    }
    st.schedule(NOW);
    // Two go to the peer; the two kept here wait for workers to start.
    assert_eq!(forwarded_nodes(&mut st), vec![PEER, PEER]);
    // Without SPREAD they would all stay here, where they fit.
    st.submit(DRIVER, task(9, &[("CPU", 0.5)]), NOW).unwrap();
    st.schedule(NOW);
    assert!(forwarded_nodes(&mut st).is_empty());
}

#[test]
fn spread_tasks_beyond_every_nodes_room_still_take_turns_over_the_nodes() {
    let mut st = new_state(1.0, 0);
    st.update_peers(&[peer_info(1.0, true)], NOW);
    for n in 1..=6 {
        st.submit(DRIVER, TaskSpec { spread: true, ..task(n, &[("CPU", 1.0)]) }, NOW).unwrap();
    }
    st.schedule(NOW);
    // One CPU here and one there: the burst of six is dealt out, half to the peer
    // (where they queue), not kept here while the peer sits idle after its first.
    let sent = forwarded_nodes(&mut st);
    assert_eq!(sent.len(), 3, "{sent:?}");
    assert!(sent.iter().all(|n| *n == PEER));
}

fn pinned(n: u8, node: NodeId, soft: bool) -> TaskSpec {
    let affinity = oxray_proto::NodeAffinity { node_id: node.to_vec(), soft };
    TaskSpec { node_affinity: Some(affinity), ..task(n, &[("CPU", 1.0)]) }
}

#[test]
fn node_affinity_sends_work_to_its_node_or_fails_it_by_name() {
    let mut st = new_state(4.0, 0);
    st.update_peers(&[peer_info(4.0, true)], NOW);
    st.submit(DRIVER, pinned(1, PEER, false), NOW).unwrap();
    st.schedule(NOW);
    assert_eq!(forwarded_nodes(&mut st), vec![PEER], "sent to its node though it fits here");
    // A node never heard of: the head's next list may still bring it, then it fails.
    let unknown = NodeId::from_array([7; 16]);
    st.submit(DRIVER, pinned(2, unknown, false), NOW).unwrap();
    st.submit(DRIVER, pinned(3, unknown, true), NOW).unwrap();
    st.schedule(NOW);
    assert!(!st.is_ready(&oid(102)), "waits for the head's next node list");
    st.update_peers(&[peer_info(4.0, true)], NOW);
    assert_eq!(system_error_type(&mut st, oid(102)).as_deref(), Some("TaskUnschedulableError"));
    // Soft: it runs here instead.
    assert!(!st.is_ready(&oid(103)), "not failed: it waits for a worker here");
    // A dead node fails a hard request at once.
    st.update_peers(&[peer_info(4.0, false)], NOW);
    // (Another shape than t3's, which waits for a worker in its queue.)
    let shape = HashMap::from([("CPU".to_string(), 2.0)]);
    st.submit(DRIVER, TaskSpec { resources: shape, ..pinned(4, PEER, false) }, NOW).unwrap();
    st.schedule(NOW);
    assert_eq!(system_error_type(&mut st, oid(104)).as_deref(), Some("TaskUnschedulableError"));
}

#[test]
fn a_recursive_cancel_reaches_the_tasks_a_task_submitted() {
    let mut st = new_state(1.0, 0);
    st.submit(DRIVER, task(1, &[("CPU", 1.0)]), NOW).unwrap();
    st.schedule(NOW);
    let w = spawned(&mut st)[0];
    let mut rx = connect(&mut st, w, 71);
    assert_eq!(next(&mut rx).unwrap().name, "t1");
    // t1 submitted t2 and t3 (queued: no CPU left); t3 submitted t4.
    st.submit(DRIVER, TaskSpec { parent_task_id: vec![1; 16], ..task(2, &[("CPU", 1.0)]) }, NOW).unwrap();
    st.submit(DRIVER, TaskSpec { parent_task_id: vec![1; 16], ..task(3, &[("CPU", 1.0)]) }, NOW).unwrap();
    st.submit(DRIVER, TaskSpec { parent_task_id: vec![3; 16], ..task(4, &[("CPU", 1.0)]) }, NOW).unwrap();
    st.submit(DRIVER, task(5, &[("CPU", 1.0)]), NOW).unwrap();
    st.cancel(oid(101), false, true, NOW);
    for child in [102, 103, 104] {
        assert_eq!(system_error_type(&mut st, oid(child)).as_deref(), Some("TaskCancelledError"));
    }
    assert!(!st.is_ready(&oid(105)), "an unrelated task is left alone");
}

#[test]
fn a_retiring_worker_gets_no_other_task() {
    let mut st = new_state(1.0, 0);
    let first = task(1, &[("CPU", 1.0)]);
    st.submit(DRIVER, first.clone(), NOW).unwrap();
    st.submit(DRIVER, task(2, &[("CPU", 1.0)]), NOW).unwrap();
    st.schedule(NOW);
    let w = spawned(&mut st)[0];
    let mut rx = connect(&mut st, w, 72);
    assert_eq!(next(&mut rx).unwrap().name, "t1");
    let returns = vec![ObjectLocation {
        object_id: first.return_ids[0].clone(),
        place: Some(Place::InlineData(b"x".to_vec())),
        size: 1,
    }];
    let req = TaskDoneRequest { task_id: first.task_id.clone(), returns, retire: true, ..Default::default() };
    st.task_done(w, TaskId::from_array([1; 16]), req, &[], NOW).unwrap();
    let told = rx.try_recv().unwrap().unwrap();
    assert!(told.exit && told.task.is_none(), "told to exit, not given t2");
    assert_eq!(spawned(&mut st).len(), 1, "a new worker starts for t2");
}

#[test]
fn label_selectors_send_work_to_matching_nodes_or_fail_it() {
    let mut st = new_state(4.0, 0);
    let far = oxray_proto::NodeInfo { labels: HashMap::from([("zone".into(), "far".into())]), ..peer_info(4.0, true) };
    st.update_peers(&[far], NOW);
    let selecting = |n: u8, zone: &str| TaskSpec {
        label_selector: HashMap::from([("zone".to_string(), zone.to_string())]),
        ..task(n, &[("CPU", 1.0)])
    };
    st.submit(DRIVER, selecting(1, "far"), NOW).unwrap();
    st.schedule(NOW);
    assert_eq!(forwarded_nodes(&mut st), vec![PEER], "only the peer has zone=far");
    st.submit(DRIVER, selecting(2, "!far"), NOW).unwrap();
    st.schedule(NOW);
    assert!(forwarded_nodes(&mut st).is_empty(), "this node (zone=home) matches and has room");
    // A cluster another node has joined may get a matching one: it waits, with a warning naming the selector.
    let shape = HashMap::from([("CPU".to_string(), 2.0)]);
    st.submit(DRIVER, TaskSpec { resources: shape.clone(), ..selecting(4, "moon") }, NOW).unwrap();
    st.schedule(NOW);
    st.take_actions();
    assert!(!st.is_ready(&oid(104)));
    st.warn_infeasible();
    let warnings = log_lines(&mut st);
    assert!(warnings.iter().any(|w| w.contains("t4") && w.contains("zone=moon")), "{warnings:?}");
    // On a lone node nothing can ever match: it fails at once.
    let mut lone = new_state(4.0, 0);
    lone.submit(DRIVER, TaskSpec { resources: shape, ..selecting(3, "moon") }, NOW).unwrap();
    lone.schedule(NOW);
    assert_eq!(system_error_type(&mut lone, oid(103)).as_deref(), Some("TaskUnschedulableError"));
}

#[test]
fn a_gpu_task_never_runs_in_a_worker_that_ran_a_cpu_only_task() {
    let mut st = new_state(2.0, 1);
    let cpu_task = task(1, &[("CPU", 1.0)]);
    st.submit(DRIVER, cpu_task.clone(), NOW).unwrap();
    st.schedule(NOW);
    let cpu_worker = spawned(&mut st)[0];
    let mut rx = connect(&mut st, cpu_worker, 80);
    assert_eq!(next(&mut rx).unwrap().name, "t1");
    done(&mut st, cpu_worker, &cpu_task, b"x");
    st.submit(DRIVER, task(2, &[("CPU", 1.0), ("GPU", 1.0)]), NOW).unwrap();
    st.schedule(NOW);
    assert!(next(&mut rx).is_none(), "the idle CPU-only worker is passed over");
    let gpu_worker = spawned(&mut st);
    assert_eq!(gpu_worker.len(), 1, "a fresh worker starts for the GPU task");
    let mut gpu_rx = connect(&mut st, gpu_worker[0], 81);
    assert_eq!(gpu_rx.try_recv().unwrap().unwrap().cuda_visible_devices, "0");
    // A CPU task may still use the idle CPU-only worker.
    st.submit(DRIVER, task(3, &[("CPU", 1.0)]), NOW).unwrap();
    st.schedule(NOW);
    assert_eq!(next(&mut rx).unwrap().name, "t3");
}

#[test]
fn at_most_32_actor_workers_start_at_once_and_each_connection_or_exit_lets_the_next_start() {
    let mut st = new_state(2.0, 0);
    for n in 0..40u8 {
        let spec = TaskSpec {
            task_id: vec![n; 16],
            actor_id: vec![200 - n; 16],
            placement_resources: HashMap::new(),
            ..actor_spec(0)
        };
        st.register_actor(&spec, false).unwrap();
        st.submit(DRIVER, spec, NOW).unwrap();
    }
    st.schedule(NOW);
    let first = spawned(&mut st);
    assert_eq!(first.len(), 32, "the rest wait for a start to end");
    let _rx = connect(&mut st, first[0], 1000);
    assert_eq!(spawned(&mut st).len(), 1, "a connection lets one more start");
    st.worker_exited(first[1], "exit code 1".into(), NOW);
    assert_eq!(spawned(&mut st).len(), 1, "so does a worker that died starting");
    for (i, w) in first[2..8].iter().enumerate() {
        let _rx = connect(&mut st, *w, 1001 + i as u32);
    }
    assert_eq!(spawned(&mut st).len(), 6, "every actor's worker started in the end");
    let _rx = connect(&mut st, first[8], 2000);
    assert!(spawned(&mut st).is_empty(), "none is left waiting");
}
