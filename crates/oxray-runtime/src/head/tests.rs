//! The head's tests: its gRPC handlers and parts driven directly, agents'
//! bundle services served on local ports, state directories in temp.

use super::*;
use crate::ids::PlacementGroupId;
use oxray_proto::head_service_server::HeadService;
use oxray_proto::{
    ActorInfo, ActorRequest, ActorState, DriverRecord, Empty, GetNamedActorRequest, HeartbeatRequest, NodeInfo,
    NodeStats, PlacementGroupRequest, PlacementGroupSpec, PlacementGroupState, RegisterActorRequest,
    RegisterNodeRequest, ReserveBundlesRequest, ResourceDemand, ServeCheckpoint,
};
use std::collections::HashMap;
use std::time::Duration;
use tonic::{Code, Request, Response, Status};

#[tokio::test]
async fn the_load_report_sums_demand_by_shape_and_tracks_idle_nodes() {
    let head = Head::default();
    let cpus = |n: f64| HashMap::from([("CPU".to_string(), n)]);
    for (id, ip) in [(1u8, "10.0.0.1"), (2, "10.0.0.2")] {
        let info = NodeInfo {
            node_id: vec![id; 16],
            ip: ip.into(),
            total: cpus(2.0),
            available: cpus(2.0),
            ..Default::default()
        };
        head.register_node(Request::new(RegisterNodeRequest { node: Some(info) })).await.unwrap();
    }
    let demand = |n| vec![ResourceDemand { shape: cpus(4.0), count: n }];
    // Node 1 is busy (1 of 2 CPUs in use) and queues 2 tasks; node 2 is idle and queues 3.
    let busy = HeartbeatRequest { node_id: vec![1; 16], available: cpus(1.0), stats: None, demand: demand(2) };
    let idle = HeartbeatRequest { node_id: vec![2; 16], available: cpus(2.0), stats: None, demand: demand(3) };
    head.heartbeat(Request::new(busy)).await.unwrap();
    head.heartbeat(Request::new(idle)).await.unwrap();
    let report = serde_json::to_value(head.load_metrics_report()).unwrap();
    assert_eq!(report["resourceDemand"], serde_json::json!([[{"CPU": 4.0}, 5]]));
    assert_eq!(report["usage"]["CPU"], serde_json::json!([1.0, 4.0]));
    let nodes = report["nodes"].as_array().unwrap();
    let by_ip = |ip: &str| nodes.iter().find(|n| n["nodeIp"] == ip).unwrap().clone();
    assert_eq!(by_ip("10.0.0.1")["idleDurationMs"], 0, "a node with resources in use is not idle");
    assert_eq!(by_ip("10.0.0.2")["resourcesAvailable"], serde_json::json!({"CPU": 2.0}));

    // An actor holding no resources still keeps its node from counting as idle.
    let actor = ActorInfo {
        actor_id: vec![7; 16],
        node_id: vec![2; 16],
        state: ActorState::Alive as i32,
        ..Default::default()
    };
    head.actors.lock().insert(ActorId::from_bytes(&[7; 16]).unwrap(), actor);
    let report = serde_json::to_value(head.load_metrics_report()).unwrap();
    let hosting = report["nodes"].as_array().unwrap().iter().find(|n| n["nodeIp"] == "10.0.0.2").unwrap().clone();
    assert_eq!(hosting["idleDurationMs"], 0);
    head.actors.lock().clear();

    // So does an object in its store (there is no lineage to make it again).
    let stats = NodeStats { store_objects: 1, ..Default::default() };
    let holding = HeartbeatRequest { node_id: vec![2; 16], available: cpus(2.0), stats: Some(stats), demand: vec![] };
    head.heartbeat(Request::new(holding)).await.unwrap();
    assert!(head.nodes.lock().idle_since(&NodeId::from_bytes(&[2; 16]).unwrap()).is_none());

    // A pending placement group is demand too.
    let bundle = oxray_proto::Bundle { resources: cpus(8.0), ..Default::default() };
    let spec = PlacementGroupSpec {
        pg_id: vec![5; 16],
        bundles: vec![bundle],
        strategy: oxray_proto::PlacementStrategy::StrictPack as i32,
        ..Default::default()
    };
    head.create_placement_group(Request::new(spec)).await.unwrap();
    let report = serde_json::to_value(head.load_metrics_report()).unwrap();
    assert_eq!(report["pgDemand"], serde_json::json!([{"strategy": "STRICT_PACK", "bundles": [{"CPU": 8.0}]}]));
}

/// A node agent's bundle service that logs the calls it gets, as (node, call).
#[derive(Clone)]
struct LoggingBundles {
    node: u8,
    log: Arc<Mutex<Vec<(u8, &'static str)>>>,
}

#[tonic::async_trait]
impl oxray_proto::bundle_service_server::BundleService for LoggingBundles {
    async fn reserve_bundles(&self, _: Request<ReserveBundlesRequest>) -> Result<Response<Empty>, Status> {
        self.log.lock().push((self.node, "reserve"));
        Ok(Response::new(Empty {}))
    }
    async fn commit_bundles(&self, _: Request<PlacementGroupRequest>) -> Result<Response<Empty>, Status> {
        self.log.lock().push((self.node, "commit"));
        Ok(Response::new(Empty {}))
    }
    async fn return_bundles(&self, _: Request<PlacementGroupRequest>) -> Result<Response<Empty>, Status> {
        self.log.lock().push((self.node, "return"));
        Ok(Response::new(Empty {}))
    }
}

/// Serves `bundles` on a free local port; returns its address.
async fn serve_bundles(bundles: LoggingBundles) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let service = oxray_proto::bundle_service_server::BundleServiceServer::new(bundles);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    address
}

async fn register(head: &Head, id: u8, address: &str, is_head: bool) {
    let cpus = HashMap::from([("CPU".to_string(), 1.0)]);
    let info = NodeInfo {
        node_id: vec![id; 16],
        address: address.into(),
        is_head,
        total: cpus.clone(),
        available: cpus,
        start_time_ms: u64::from(id),
        ..Default::default()
    };
    head.register_node(Request::new(RegisterNodeRequest { node: Some(info) })).await.unwrap();
}

#[tokio::test]
async fn a_group_is_committed_only_once_every_node_has_reserved_and_a_gone_node_is_skipped() {
    let head = Head::default();
    head.set_token("token");
    let log = Arc::new(Mutex::new(Vec::new()));
    let first = serve_bundles(LoggingBundles { node: 1, log: log.clone() }).await;
    register(&head, 1, &first, true).await;
    // Node 2 was just killed: nothing listens at its address, yet it is not silent for long enough
    // to count as dead (a lent CPU even shows as free in its last beat).
    let gone = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gone_address = gone.local_addr().unwrap().to_string();
    drop(gone);
    register(&head, 2, &gone_address, false).await;
    let bundle = oxray_proto::Bundle { resources: HashMap::from([("CPU".to_string(), 1.0)]), ..Default::default() };
    let pg = PlacementGroupId::from_bytes(&[5; 16]).unwrap();
    let spec = PlacementGroupSpec {
        pg_id: pg.to_vec(),
        bundles: vec![bundle.clone(), bundle],
        strategy: oxray_proto::PlacementStrategy::Spread as i32,
        ..Default::default()
    };
    head.create_placement_group(Request::new(spec)).await.unwrap();
    // Node 1 reserved its bundle, node 2 could not be reached: node 1 gives it back, never
    // having made it usable (a task in it would have run, then been killed).
    assert_eq!(*log.lock(), vec![(1, "reserve"), (1, "return")]);
    assert_eq!(head.group_state(pg), Some(PlacementGroupState::Pending));

    // Node 2 is skipped from now on (until it beats again): with node 3 the group goes on 1 and 3.
    log.lock().clear();
    let third = serve_bundles(LoggingBundles { node: 3, log: log.clone() }).await;
    register(&head, 3, &third, false).await;
    head.place_group(pg).await;
    assert_eq!(*log.lock(), vec![(1, "reserve"), (3, "reserve"), (1, "commit"), (3, "commit")]);
    assert_eq!(head.group_state(pg), Some(PlacementGroupState::Created));
    assert_eq!(head.group_nodes(pg), vec![vec![1; 16], vec![3; 16]]);

    // A beat makes node 2 a candidate again.
    assert!(!head.placeable_nodes().iter().any(|n| n.node_id == [2; 16]));
    let beat = HeartbeatRequest { node_id: vec![2; 16], available: HashMap::new(), stats: None, demand: vec![] };
    head.heartbeat(Request::new(beat)).await.unwrap();
    assert!(head.placeable_nodes().iter().any(|n| n.node_id == [2; 16]));
}

#[tokio::test]
async fn heartbeats_update_and_unknown_nodes_are_refused() {
    let head = Head::default();
    let beat = HeartbeatRequest { node_id: vec![1; 16], available: HashMap::new(), stats: None, demand: vec![] };
    assert_eq!(head.heartbeat(Request::new(beat.clone())).await.unwrap_err().code(), Code::NotFound);
    let info = NodeInfo { node_id: vec![1; 16], is_head: true, ..Default::default() };
    head.register_node(Request::new(RegisterNodeRequest { node: Some(info) })).await.unwrap();
    let mut beat = beat;
    beat.available.insert("CPU".into(), 1.5);
    head.heartbeat(Request::new(beat)).await.unwrap();
    let nodes = head.nodes();
    assert_eq!(nodes.len(), 1);
    assert!(nodes[0].alive);
    assert_eq!(nodes[0].available["CPU"], 1.5);
}

#[tokio::test]
async fn a_restarted_head_keeps_the_serve_checkpoint_until_serve_drops_it() {
    async fn checkpoint(head: &Head) -> Vec<u8> {
        head.get_serve_checkpoint(Request::new(Empty {})).await.unwrap().into_inner().checkpoint
    }
    let dir = std::env::temp_dir().join(format!("oxray-serve-checkpoint-{}", rand::random::<u64>()));
    // Larger than tonic's default 4 MiB message: a checkpoint carries pickled code and arguments.
    let saved: Vec<u8> = (0..5 << 20).map(|i| (i % 251) as u8).collect();
    {
        let head = Head::persistent(&dir).unwrap();
        assert!(checkpoint(&head).await.is_empty(), "a new head keeps none");
        let save = ServeCheckpoint { checkpoint: saved.clone() };
        head.save_serve_checkpoint(Request::new(save)).await.unwrap();
        assert_eq!(checkpoint(&head).await, saved);
    }
    {
        let head = Head::persistent(&dir).unwrap();
        assert_eq!(checkpoint(&head).await, saved, "it outlives the head");
        assert!(head.serve().checkpoint().is_some());
        head.save_serve_checkpoint(Request::new(ServeCheckpoint { checkpoint: Vec::new() })).await.unwrap();
        assert!(checkpoint(&head).await.is_empty());
    }
    let head = Head::persistent(&dir).unwrap();
    assert!(head.serve().checkpoint().is_none(), "a dropped checkpoint stays dropped");
    drop(head);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_restarted_head_fails_the_actors_of_its_previous_head_node() {
    let dir = std::env::temp_dir().join(format!("oxray-head-restart-{}", rand::random::<u64>()));
    {
        let head = Head::persistent(&dir).unwrap();
        for (id, is_head) in [(7u8, true), (8, false)] {
            let info = NodeInfo { node_id: vec![id; 16], is_head, ..Default::default() };
            head.register_node(Request::new(RegisterNodeRequest { node: Some(info) })).await.unwrap();
        }
        for (id, name, node) in [(1u8, "on_head", 7u8), (2, "elsewhere", 8)] {
            let register = RegisterActorRequest { actor: Some(named(id, name)), get_if_exists: false };
            head.register_actor(Request::new(register)).await.unwrap();
            let mut alive = ActorInfo { node_id: vec![node; 16], ..named(id, name) };
            alive.set_state(ActorState::Alive);
            head.update_actor(Request::new(alive)).await.unwrap();
        }
    }
    let head = Head::persistent(&dir).unwrap();
    let lookup = |name: &str| GetNamedActorRequest { name: name.into(), namespace: "ns".into() };
    let gone = head.get_named_actor(Request::new(lookup("on_head"))).await.unwrap().into_inner();
    assert!(!gone.found, "its name is free");
    let dead = head.get_actor(Request::new(ActorRequest { actor_id: vec![1; 16], ..Default::default() }));
    let dead = dead.await.unwrap().into_inner().actor.unwrap();
    assert_eq!(dead.state(), ActorState::Dead);
    assert!(dead.death_cause.contains("07070707") && dead.death_cause.contains("head"), "{}", dead.death_cause);
    let kept = head.get_named_actor(Request::new(lookup("elsewhere"))).await.unwrap().into_inner();
    assert_eq!(kept.actor.unwrap().state(), ActorState::Alive, "its node may still beat again");
    // Its owner may restart it elsewhere: then the name is its again.
    let mut restarted = ActorInfo { node_id: vec![8; 16], ..named(1, "on_head") };
    restarted.set_state(ActorState::Alive);
    head.update_actor(Request::new(restarted)).await.unwrap();
    assert!(head.get_named_actor(Request::new(lookup("on_head"))).await.unwrap().into_inner().found);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_restarted_head_fails_the_actors_of_nodes_that_do_not_come_back() {
    let dir = std::env::temp_dir().join(format!("oxray-head-restart-{}", rand::random::<u64>()));
    {
        let head = Head::persistent(&dir).unwrap();
        for node in [8u8, 9] {
            let info = NodeInfo { node_id: vec![node; 16], ..Default::default() };
            head.register_node(Request::new(RegisterNodeRequest { node: Some(info) })).await.unwrap();
            let name = format!("on{node}");
            let register = RegisterActorRequest { actor: Some(named(node, &name)), get_if_exists: false };
            head.register_actor(Request::new(register)).await.unwrap();
            let mut alive = ActorInfo { node_id: vec![node; 16], ..named(node, &name) };
            alive.set_state(ActorState::Alive);
            head.update_actor(Request::new(alive)).await.unwrap();
        }
    }
    let head = Head::persistent(&dir).unwrap();
    let beat = HeadHeartbeat { node_id: vec![9; 16], available: HashMap::new(), stats: None, demand: vec![] };
    head.heartbeat(Request::new(beat)).await.unwrap();
    head.fail_actors_of_silent_nodes().await.unwrap();
    let lookup = |name: &str| GetNamedActorRequest { name: name.into(), namespace: "ns".into() };
    assert!(!head.get_named_actor(Request::new(lookup("on8"))).await.unwrap().into_inner().found);
    let kept = head.get_named_actor(Request::new(lookup("on9"))).await.unwrap().into_inner();
    assert_eq!(kept.actor.unwrap().state(), ActorState::Alive, "its node beat again");
    drop(head);
    let again = Head::persistent(&dir).unwrap();
    let dead = again.get_actor(Request::new(ActorRequest { actor_id: vec![8; 16], ..Default::default() }));
    let dead = dead.await.unwrap().into_inner().actor.unwrap();
    assert_eq!(dead.state(), ActorState::Dead, "recorded");
    assert!(dead.death_cause.contains("08080808"), "{}", dead.death_cause);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_restarted_head_keeps_its_actors_and_nodes() {
    let dir = std::env::temp_dir().join(format!("oxray-head-restart-{}", rand::random::<u64>()));
    {
        let head = Head::persistent(&dir).unwrap();
        let info = NodeInfo { node_id: vec![7; 16], address: "127.0.0.1:9".into(), ..Default::default() };
        head.register_node(Request::new(RegisterNodeRequest { node: Some(info) })).await.unwrap();
        let register = RegisterActorRequest { actor: Some(named(1, "kept")), get_if_exists: false };
        head.register_actor(Request::new(register)).await.unwrap();
        let mut alive = named(1, "kept");
        alive.set_state(ActorState::Alive);
        head.update_actor(Request::new(alive)).await.unwrap();
    }
    let head = Head::persistent(&dir).unwrap();
    let lookup = GetNamedActorRequest { name: "kept".into(), namespace: "ns".into() };
    let found = head.get_named_actor(Request::new(lookup)).await.unwrap().into_inner();
    assert_eq!(found.actor.unwrap().state(), ActorState::Alive);
    let nodes = head.nodes();
    assert_eq!(nodes.len(), 1);
    assert!(!nodes[0].alive, "a node is dead until it beats again");
    let beat = HeadHeartbeat { node_id: vec![7; 16], available: HashMap::new(), stats: None, demand: vec![] };
    head.heartbeat(Request::new(beat)).await.unwrap();
    assert!(head.nodes()[0].alive);
    let dup = RegisterActorRequest { actor: Some(named(2, "kept")), get_if_exists: false };
    assert_eq!(head.register_actor(Request::new(dup)).await.unwrap_err().code(), Code::AlreadyExists);
    let _ = std::fs::remove_dir_all(dir);
}

use oxray_proto::HeartbeatRequest as HeadHeartbeat;

#[tokio::test]
async fn the_live_head_is_listed_before_the_nodes_of_an_earlier_run() {
    let dir = std::env::temp_dir().join(format!("oxray-head-restart-{}", rand::random::<u64>()));
    let head_node = |id: u8, start_time_ms: u64| NodeInfo {
        node_id: vec![id; 16],
        address: format!("127.0.0.1:{id}"),
        is_head: true,
        start_time_ms,
        ..Default::default()
    };
    {
        let head = Head::persistent(&dir).unwrap();
        head.register_node(Request::new(RegisterNodeRequest { node: Some(head_node(1, 100)) })).await.unwrap();
    }
    let head = Head::persistent(&dir).unwrap();
    head.register_node(Request::new(RegisterNodeRequest { node: Some(head_node(2, 200)) })).await.unwrap();
    let nodes = head.nodes();
    assert_eq!(nodes.len(), 2, "the earlier run's head is still listed, as dead");
    assert_eq!((nodes[0].node_id.clone(), nodes[0].alive), (vec![2; 16], true));
    assert_eq!((nodes[1].node_id.clone(), nodes[1].alive), (vec![1; 16], false));
    let _ = std::fs::remove_dir_all(dir);
}

fn named(id: u8, name: &str) -> ActorInfo {
    ActorInfo {
        actor_id: vec![id; 16],
        name: name.into(),
        namespace: "ns".into(),
        state: ActorState::PendingCreation as i32,
        ..Default::default()
    }
}

#[tokio::test]
async fn actor_names_are_unique_until_the_actor_dies() {
    let head = Head::default();
    let register = |info, get_if_exists| RegisterActorRequest { actor: Some(info), get_if_exists };
    head.register_actor(Request::new(register(named(1, "a"), false))).await.unwrap();
    let dup = head.register_actor(Request::new(register(named(2, "a"), false))).await.unwrap_err();
    assert_eq!(dup.code(), Code::AlreadyExists);
    assert!(dup.message().contains("\"a\""), "{}", dup.message());
    let reuse = head.register_actor(Request::new(register(named(3, "a"), true))).await.unwrap().into_inner();
    assert_eq!((reuse.actor_id, reuse.existing), (vec![1; 16], true));
    let lookup = GetNamedActorRequest { name: "a".into(), namespace: "ns".into() };
    assert!(head.get_named_actor(Request::new(lookup.clone())).await.unwrap().into_inner().found);
    let mut dead = named(1, "a");
    dead.set_state(ActorState::Dead);
    head.update_actor(Request::new(dead)).await.unwrap();
    assert!(!head.get_named_actor(Request::new(lookup)).await.unwrap().into_inner().found);
    head.register_actor(Request::new(register(named(4, "a"), false))).await.unwrap();
    assert_eq!(head.list_actors(Request::new(Empty {})).await.unwrap().into_inner().actors.len(), 2);
}

fn dead(id: u8) -> ActorInfo {
    let mut info = named(id, &format!("a{id}"));
    info.set_state(ActorState::Dead);
    info
}

#[tokio::test]
async fn only_the_last_dead_actors_are_kept_in_memory_and_in_redb() {
    let dir = std::env::temp_dir().join(format!("oxray-head-history-{}", rand::random::<u64>()));
    {
        let head = Head { dead_actors: History(3), ..Head::persistent(&dir).unwrap() };
        let alive = RegisterActorRequest { actor: Some(named(100, "alive")), get_if_exists: false };
        head.register_actor(Request::new(alive)).await.unwrap();
        for id in 1..=10 {
            let register = RegisterActorRequest { actor: Some(named(id, &format!("a{id}"))), get_if_exists: false };
            head.register_actor(Request::new(register)).await.unwrap();
            head.update_actor(Request::new(dead(id))).await.unwrap();
        }
        let mut ids: Vec<u8> = head
            .list_actors(Request::new(Empty {}))
            .await
            .unwrap()
            .into_inner()
            .actors
            .iter()
            .map(|a| a.actor_id[0])
            .collect();
        ids.sort();
        assert_eq!(ids, [8, 9, 10, 100], "the live actor and the three latest dead ones");
    }
    let reloaded = Head::persistent(&dir).unwrap();
    assert_eq!(reloaded.actors.lock().len(), 4, "forgotten rows are gone from redb too");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn only_the_last_dead_nodes_are_kept() {
    let dir = std::env::temp_dir().join(format!("oxray-head-nodes-{}", rand::random::<u64>()));
    {
        let head = Head { history: History(3), ..Head::persistent(&dir).unwrap() };
        for id in 1..=10u8 {
            let info = NodeInfo { node_id: vec![id; 16], ..Default::default() };
            head.register_node(Request::new(RegisterNodeRequest { node: Some(info) })).await.unwrap();
        }
        // Nodes 1..=9 went silent long ago, node 9 last.
        for id in 1..=9u8 {
            let last_seen = Instant::now() - NODE_TIMEOUT - Duration::from_secs(100 - id as u64);
            head.nodes.lock().set_last_seen(&NodeId::from_bytes(&[id; 16]).unwrap(), last_seen);
        }
        let beat = HeartbeatRequest { node_id: vec![10; 16], available: HashMap::new(), stats: None, demand: vec![] };
        head.heartbeat(Request::new(beat)).await.unwrap();
        head.forget_old_dead_nodes();
        let mut ids: Vec<u8> = head.nodes().iter().map(|n| n.node_id[0]).collect();
        ids.sort();
        assert_eq!(ids, [7, 8, 9, 10], "the live node and the three most recently dead");
    }
    let reloaded = Head::persistent(&dir).unwrap();
    assert_eq!(reloaded.nodes().len(), 4, "forgotten rows are gone from redb too");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn an_actor_alive_again_is_not_forgotten_with_the_dead() {
    let head = Head { dead_actors: History(1), ..Head::default() };
    let update = |id: u8, state: ActorState| {
        let mut info = named(id, &format!("a{id}"));
        info.set_state(state);
        head.update_actor(Request::new(info))
    };
    update(1, ActorState::Dead).await.unwrap();
    // Given up for dead (its node went with an earlier head), then restarted by its owner.
    update(1, ActorState::Alive).await.unwrap();
    update(2, ActorState::Dead).await.unwrap();
    update(3, ActorState::Dead).await.unwrap();
    let kept = head.get_actor(Request::new(ActorRequest { actor_id: vec![1; 16], ..Default::default() }));
    let kept = kept.await.unwrap().into_inner();
    assert!(kept.found, "the live actor was forgotten with the dead ones");
    assert_eq!(kept.actor.unwrap().state(), ActorState::Alive);
}

#[tokio::test]
async fn only_the_last_removed_placement_groups_are_kept() {
    let head = Head { history: History(3), ..Head::default() };
    for id in 1..=10u8 {
        let bundle = oxray_proto::Bundle { resources: HashMap::from([("CPU".to_string(), 1.0)]), ..Default::default() };
        let spec = PlacementGroupSpec {
            pg_id: vec![id; 16],
            bundles: vec![bundle],
            strategy: oxray_proto::PlacementStrategy::Pack as i32,
            ..Default::default()
        };
        head.create_placement_group(Request::new(spec)).await.unwrap();
        let remove = PlacementGroupRequest { pg_id: vec![id; 16], ..Default::default() };
        head.remove_placement_group(Request::new(remove)).await.unwrap();
    }
    let groups = head.list_placement_groups(Request::new(Empty {})).await.unwrap().into_inner().groups;
    let mut ids: Vec<u8> = groups.iter().map(|g| g.spec.as_ref().unwrap().pg_id[0]).collect();
    ids.sort();
    assert_eq!(ids, [8, 9, 10]);
}

#[tokio::test]
async fn drivers_are_listed_ended_ones_bounded_and_those_of_dead_nodes_ended() {
    let head = Head { history: History(2), ..Head::default() };
    let node = NodeInfo { node_id: vec![1; 16], ..Default::default() };
    head.register_node(Request::new(RegisterNodeRequest { node: Some(node) })).await.unwrap();
    let driver = |job: u8, node: u8, end: u64| DriverRecord {
        job_id: vec![0, 0, 0, job],
        node_id: vec![node; 16],
        start_time_ms: u64::from(job),
        end_time_ms: end,
        ..Default::default()
    };
    for job in 1..=4 {
        head.update_driver(Request::new(driver(job, 1, 0))).await.unwrap();
        head.update_driver(Request::new(driver(job, 1, 100))).await.unwrap();
    }
    head.update_driver(Request::new(driver(5, 1, 0))).await.unwrap();
    head.update_driver(Request::new(driver(6, 9, 0))).await.unwrap();
    let listed: Vec<(u8, bool)> = head.drivers().iter().map(|d| (d.job_id[3], d.end_time_ms == 0)).collect();
    // Two ended drivers kept; the one on an unknown (dead) node counts as ended.
    assert_eq!(listed, [(3, false), (4, false), (5, true), (6, false)]);
    let bad = DriverRecord { job_id: vec![1], ..Default::default() };
    assert!(head.update_driver(Request::new(bad)).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_commit_does_not_hold_up_reads_of_the_actor_table() {
    let dir = std::env::temp_dir().join(format!("oxray-head-slow-{}", rand::random::<u64>()));
    let head = Head::persistent(&dir).unwrap();
    let register = RegisterActorRequest { actor: Some(named(1, "early")), get_if_exists: false };
    head.register_actor(Request::new(register)).await.unwrap();
    let held = head.store.as_ref().unwrap().hold_writes();
    let writer = tokio::spawn({
        let head = head.clone();
        async move {
            let register = RegisterActorRequest { actor: Some(named(2, "late")), get_if_exists: false };
            head.register_actor(Request::new(register)).await.map(|_| ())
        }
    });
    // Wait until the registration is inside its commit (blocked on the held transaction).
    while !writer.is_finished() && head.actors.try_lock().is_some_and(|t| !t.has_name("ns", "late")) {
        tokio::task::yield_now().await;
    }
    let lookup = GetNamedActorRequest { name: "early".into(), namespace: "ns".into() };
    let read = tokio::time::timeout(
        Duration::from_secs(2),
        tokio::task::spawn_blocking({
            let head = head.clone();
            move || {
                let table = head.actors.lock();
                table.has_name(&lookup.namespace, &lookup.name)
            }
        }),
    )
    .await
    .expect("a read of the actor table waited for another actor's commit");
    assert!(read.unwrap());
    drop(held);
    writer.await.unwrap().unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_removed_groups_resources_are_free_at_once_for_the_next_group_without_a_beat() {
    let head = Head::default();
    head.set_token("token");
    let log = Arc::new(Mutex::new(Vec::new()));
    let address = serve_bundles(LoggingBundles { node: 1, log: log.clone() }).await;
    register(&head, 1, &address, true).await;
    let group = |id: u8| PlacementGroupSpec {
        pg_id: vec![id; 16],
        bundles: vec![oxray_proto::Bundle {
            resources: HashMap::from([("CPU".to_string(), 1.0)]),
            ..Default::default()
        }],
        strategy: oxray_proto::PlacementStrategy::Pack as i32,
        ..Default::default()
    };
    let (first, second) =
        (PlacementGroupId::from_bytes(&[5; 16]).unwrap(), PlacementGroupId::from_bytes(&[6; 16]).unwrap());
    head.create_placement_group(Request::new(group(5))).await.unwrap();
    assert_eq!(head.group_state(first), Some(PlacementGroupState::Created));
    // The node's one CPU is held: the second group waits.
    head.create_placement_group(Request::new(group(6))).await.unwrap();
    assert_eq!(head.group_state(second), Some(PlacementGroupState::Pending));

    // Removing the first gives its CPU back on the agent; the head counts it free now (no beat
    // since), so the second group is placed on the next attempt.
    let remove = PlacementGroupRequest { pg_id: first.to_vec(), ..Default::default() };
    head.remove_placement_group(Request::new(remove)).await.unwrap();
    let node = head.placeable_nodes().into_iter().find(|n| n.node_id == [1; 16]).unwrap();
    assert_eq!(node.available.get("CPU"), Some(&1.0));
    assert!(node.total.keys().all(|name| !name.ends_with(&first.hex())), "{:?}", node.total);
    head.place_group(second).await;
    assert_eq!(head.group_state(second), Some(PlacementGroupState::Created));
}
