//! An embedded cluster over real sockets: token enforcement, loopback binding,
//! object round trips and cleanup.

use oxray_runtime::client::{CoreClient, Got};
use oxray_runtime::cluster::{ClusterConfig, RunningCluster, start_node};
use oxray_runtime::errors::{SystemErrorKind, system_error_object};
use oxray_runtime::ids::{ClientId, ObjectId};
use oxray_runtime::proto::driver_service_client::DriverServiceClient;
use oxray_runtime::proto::{Empty, ObjectLocation, object_location::Place};
use std::collections::HashMap;

async fn start() -> RunningCluster {
    let session_dir = std::env::temp_dir().join(format!("oxray-it-{}", rand::random::<u64>()));
    start_node(ClusterConfig {
        head: oxray_runtime::cluster::HeadRole::Local { port: 0, state_dir: None },
        agent_port: 0,
        num_cpus: Some(2.0),
        num_gpus: Some(0),
        resources: HashMap::from([("custom".to_string(), 3.0)]),
        memory: None,
        object_store_memory: Some(64 << 20),
        session_dir,
        python: "/bin/false".into(),
        cwd: std::env::temp_dir(),
        worker_env: vec![],
        host: "127.0.0.1".into(),
        token: None,
        forward_output: false,
        nodes_may_join: false,
        dashboard: None,
        metrics: None,
        labels: HashMap::new(),
    })
    .await
    .expect("cluster starts")
}

/// Shuts the node down and removes its session directory (a real node keeps its logs there).
async fn stop(cluster: RunningCluster) {
    let session_dir = cluster.session_dir.clone();
    cluster.shutdown().await;
    let _ = std::fs::remove_dir_all(session_dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rpcs_without_the_right_token_are_refused() {
    let cluster = start().await;
    assert!(cluster.agent_address.starts_with("127.0.0.1:"), "binds to loopback by default");
    assert!(cluster.head_address.starts_with("127.0.0.1:"));

    let mut anonymous = DriverServiceClient::connect(format!("http://{}", cluster.agent_address)).await.unwrap();
    let err = anonymous.cluster_info(Empty {}).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated);

    let wrong =
        CoreClient::connect(&cluster.agent_address, "not-the-token", ClientId::from_array([1; 16])).await.unwrap();
    let err = wrong.driver().cluster_info(Empty {}).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::PermissionDenied);

    let right =
        CoreClient::connect(&cluster.agent_address, &cluster.token, ClientId::from_array([2; 16])).await.unwrap();
    let nodes = right.driver().cluster_info(Empty {}).await.unwrap().into_inner().nodes;
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0].total["CPU"], 2.0);
    assert_eq!(nodes[0].total["custom"], 3.0);
    stop(cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_with_fail_fast_stops_at_an_error_without_waiting_for_the_rest() {
    let cluster = start().await;
    let client =
        CoreClient::connect(&cluster.agent_address, &cluster.token, ClientId::from_array([4; 16])).await.unwrap();
    // Object 10 is reserved and never sealed: a get of all of it never completes.
    let pending = ObjectId::from_array([10; 16]);
    client.create_object(pending, 1 << 20).await.unwrap();
    let error = system_error_object(SystemErrorKind::WorkerCrashed, "the worker died");
    let failed =
        ObjectLocation { object_id: vec![9; 16], size: error.len() as u64, place: Some(Place::InlineData(error)) };
    client.seal_object(failed.clone(), &[]).await.unwrap();
    let both = [pending, ObjectId::from_array([9; 16])];

    // Without fail_fast the get waits for the pending object and times out.
    assert!(client.get_objects_or_error(&both, 200, false).await.unwrap().is_none());
    // With it, the error ends the wait at once (well within a timeout the other never meets).
    match client.get_objects_or_error(&both, 60_000, true).await.unwrap() {
        Some(Got::Failed(object)) => assert_eq!(object.object_id, failed.object_id),
        other => panic!("expected the failed object alone, got {other:?}"),
    }
    // A value is not an error: with every object ready, all come back.
    let value = ObjectLocation { object_id: vec![11; 16], place: Some(Place::InlineData(b"ok".to_vec())), size: 2 };
    client.seal_object(value, &[]).await.unwrap();
    match client.get_objects_or_error(&[ObjectId::from_array([11; 16])], 1000, true).await.unwrap() {
        Some(Got::All(objects)) => assert_eq!(objects.len(), 1),
        other => panic!("expected every object, got {other:?}"),
    }
    stop(cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_round_trip_and_the_store_is_removed_on_shutdown() {
    let cluster = start().await;
    let client =
        CoreClient::connect(&cluster.agent_address, &cluster.token, ClientId::from_array([3; 16])).await.unwrap();

    let small = ObjectLocation { object_id: vec![5; 16], place: Some(Place::InlineData(b"tiny".to_vec())), size: 4 };
    client.seal_object(small, &[]).await.unwrap();

    let size = 1 << 20;
    let reserved = client.create_object(ObjectId::from_array([6; 16]), size).await.unwrap();
    let Some(Place::Arena(range)) = reserved.place.clone() else { panic!("expected an arena range: {reserved:?}") };
    assert!(range.path.starts_with(cluster.shm_dir.to_str().unwrap()), "{} is in shared memory", range.path);
    let arena = oxray_object_store::map_arena(std::path::Path::new(&range.path)).unwrap();
    // SAFETY: the agent reserved this range for object 6.
    unsafe { std::ptr::copy_nonoverlapping(b"big".as_ptr(), arena.as_mut_ptr().add(range.offset as usize), 3) };
    client.seal_object(reserved.clone(), &[]).await.unwrap();

    let got = client
        .get_objects(&[ObjectId::from_array([5; 16]), ObjectId::from_array([6; 16])], 1000)
        .await
        .unwrap()
        .expect("ready");
    assert_eq!(got[0].place, Some(Place::InlineData(b"tiny".to_vec())));
    assert_eq!(got[1].place, reserved.place);
    // SAFETY: the agent reserved this range for the object, which is sealed and
    // held by this client, and the arena stays mapped for the rest of the test.
    let view = unsafe { std::slice::from_raw_parts(arena.as_ptr().add(range.offset as usize), 3) };
    assert_eq!(view, b"big");

    // Unknown ids never hang: they come back at once (as object-lost errors).
    let lost = client.get_objects(&[ObjectId::from_array([42; 16])], -1).await.unwrap().expect("answered");
    assert!(matches!(lost[0].place, Some(Place::InlineData(_))));
    // A get on an object that is pending times out as asked.
    client.create_object(ObjectId::from_array([8; 16]), 1 << 20).await.unwrap();
    assert!(client.get_objects(&[ObjectId::from_array([8; 16])], 100).await.unwrap().is_none());

    let shm_dir = cluster.shm_dir.clone();
    assert!(shm_dir.exists());
    stop(cluster).await;
    assert!(!shm_dir.exists(), "shutdown removes the shared-memory directory");
}
