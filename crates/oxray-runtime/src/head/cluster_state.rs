//! The State API's rows (`oxray_http::ClusterState`) from the head: nodes,
//! actors and placement groups from its tables, tasks from every live node
//! agent (`NodeStateService`), asked at once, each within a few seconds.

use super::Head;
use oxray_http::{
    ActorRow, BoxFuture, ClusterState, GpuSample, LogChunk, LogFileRow, LogSearch, NodeQueryError, NodeRow, NodeSample,
    NodeSeries, PlacementGroupRow, Profile, TaskListing, TaskRow,
};
use oxray_proto::{
    ActorInfo, ActorState, ListLogsRequest, ListTasksRequest, NodeInfo, NodeStats, PlacementGroupInfo,
    PlacementGroupState, PlacementStrategy, ProfileKind, ProfileRequest, ReadLogRequest, TaskKind, TaskRecord,
    TaskStatus,
};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

/// How long a node agent gets to list its tasks.
const NODE_ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub struct HeadClusterState(pub Head);

impl HeadClusterState {
    /// The state service of node `node_id` (hex).
    async fn node_state(&self, node_id: &str) -> Result<crate::client::NodeStateClient, NodeQueryError> {
        let id = hex::decode(node_id)
            .map_err(|_| NodeQueryError::UnknownNode(format!("node_id={node_id:?}: expected a node id in hex")))?;
        self.0.node_state(&id).await.map_err(NodeQueryError::UnknownNode)
    }
}

/// What an agent's refusal or failure means to the State API's caller.
fn query_error(status: tonic::Status) -> NodeQueryError {
    let message = status.message().to_string();
    match status.code() {
        tonic::Code::NotFound => NodeQueryError::NotFound(message),
        tonic::Code::InvalidArgument | tonic::Code::PermissionDenied | tonic::Code::FailedPrecondition => {
            NodeQueryError::Refused(message)
        }
        _ => NodeQueryError::Failed(message),
    }
}

impl std::fmt::Debug for HeadClusterState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HeadClusterState")
    }
}

fn hex_or_none(bytes: &[u8]) -> Option<String> {
    (!bytes.is_empty()).then(|| hex::encode(bytes))
}

/// The HTTP crate's copy of a node's sample.
pub fn sample_of(stats: &NodeStats) -> NodeSample {
    NodeSample {
        time_ms: stats.time_ms,
        cpu_percent: stats.cpu_percent,
        memory_used: stats.memory_used,
        memory_total: stats.memory_total,
        network_received: stats.network_received,
        network_sent: stats.network_sent,
        disk_used: stats.disk_used,
        disk_total: stats.disk_total,
        store_used: stats.store_used,
        store_capacity: stats.store_capacity,
        store_spilled: stats.store_spilled,
        store_objects: stats.store_objects,
        gpus: stats
            .gpus
            .iter()
            .map(|g| GpuSample {
                index: g.index,
                utilization_percent: g.utilization_percent,
                memory_used: g.memory_used,
                memory_total: g.memory_total,
            })
            .collect(),
        tasks_running: stats.tasks_running,
        tasks_pending: stats.tasks_pending,
        tasks_finished: stats.tasks_finished,
        tasks_failed: stats.tasks_failed,
        workers: stats.workers,
    }
}

fn node_row(node: NodeInfo, latest: Option<&NodeStats>) -> NodeRow {
    NodeRow {
        latest: latest.map(sample_of),
        metrics_address: node.metrics_address.clone(),
        node_id: hex::encode(&node.node_id),
        node_ip: node.ip.clone(),
        is_head_node: node.is_head,
        state: if node.alive { "ALIVE" } else { "DEAD" },
        state_message: (!node.alive)
            .then(|| "Unexpected termination: the node stopped sending heartbeats to the head.".to_string()),
        node_name: node.ip,
        resources_total: node.total.into_iter().collect(),
        resources_available: node.available.into_iter().collect(),
        labels: BTreeMap::from([("ray.io/node-id".to_string(), hex::encode(&node.node_id))]),
        start_time_ms: node.start_time_ms,
        end_time_ms: 0,
    }
}

fn actor_state(state: ActorState) -> &'static str {
    match state {
        ActorState::Unspecified | ActorState::PendingCreation => "PENDING_CREATION",
        ActorState::Alive => "ALIVE",
        ActorState::Restarting => "RESTARTING",
        ActorState::Dead => "DEAD",
    }
}

fn actor_row(actor: ActorInfo) -> ActorRow {
    let state = actor.state();
    let death_cause = (state == ActorState::Dead && !actor.death_cause.is_empty())
        .then(|| json!({"actor_died_error_context": {"error_message": actor.death_cause}}));
    ActorRow {
        actor_id: hex::encode(&actor.actor_id),
        state: actor_state(state),
        job_id: hex::encode(&actor.job_id),
        name: actor.name,
        node_id: hex_or_none(&actor.node_id),
        pid: (actor.pid != 0).then_some(actor.pid),
        ray_namespace: actor.namespace,
        required_resources: actor.resources.into_iter().collect(),
        death_cause,
        is_detached: actor.detached,
        placement_group_id: hex_or_none(&actor.placement_group_id),
        repr_name: String::new(),
        num_restarts: actor.num_restarts,
        num_restarts_due_to_lineage_reconstruction: 0,
        num_restarts_due_to_node_preemption: 0,
        class_name: actor.class_name,
    }
}

fn group_row(group: PlacementGroupInfo) -> PlacementGroupRow {
    let state = group.state();
    let spec = group.spec.unwrap_or_default();
    let bundles = spec
        .bundles
        .iter()
        .enumerate()
        .map(|(i, bundle)| {
            json!({
                "bundle_id": format!("{}_{i}", hex::encode(&spec.pg_id)),
                "node_id": group.bundle_nodes.get(i).and_then(|n| hex_or_none(n)),
                "unit_resources": bundle.resources.iter().collect::<BTreeMap<_, _>>(),
            })
        })
        .collect();
    let (state, scheduling) = match state {
        PlacementGroupState::Created => ("CREATED", "FINISHED"),
        PlacementGroupState::Removed => ("REMOVED", "REMOVED"),
        PlacementGroupState::Unspecified | PlacementGroupState::Pending => ("PENDING", "QUEUED"),
    };
    PlacementGroupRow {
        placement_group_id: hex::encode(&spec.pg_id),
        name: spec.name.clone(),
        creator_job_id: hex::encode(&spec.job_id),
        state,
        bundles,
        is_detached: spec.detached,
        stats: json!({"scheduling_state": scheduling}),
        strategy: match spec.strategy() {
            PlacementStrategy::Unspecified | PlacementStrategy::Pack => "PACK",
            PlacementStrategy::Spread => "SPREAD",
            PlacementStrategy::StrictPack => "STRICT_PACK",
            PlacementStrategy::StrictSpread => "STRICT_SPREAD",
        },
    }
}

fn task_row(task: TaskRecord, node_id: &str) -> TaskRow {
    let kind = task.kind();
    let func_or_class_name = match kind {
        TaskKind::ActorCreation => task.name.strip_suffix(".__init__").unwrap_or(&task.name).to_string(),
        _ => task.name.clone(),
    };
    let state = match task.status() {
        TaskStatus::Unspecified => "NIL",
        TaskStatus::PendingArgsAvail => "PENDING_ARGS_AVAIL",
        TaskStatus::PendingNodeAssignment => "PENDING_NODE_ASSIGNMENT",
        TaskStatus::Running => "RUNNING",
        TaskStatus::Finished => "FINISHED",
        TaskStatus::Failed => "FAILED",
    };
    let nonzero = |ms: u64| (ms != 0).then_some(ms);
    TaskRow {
        task_id: hex::encode(&task.task_id),
        attempt_number: task.attempt,
        name: task.name,
        state,
        job_id: hex::encode(&task.job_id),
        actor_id: hex_or_none(&task.actor_id),
        kind: match kind {
            TaskKind::Normal => "NORMAL_TASK",
            TaskKind::ActorCreation => "ACTOR_CREATION_TASK",
            TaskKind::ActorTask => "ACTOR_TASK",
        },
        func_or_class_name,
        parent_task_id: hex::encode(&task.parent_task_id),
        node_id: Some(node_id.to_string()),
        worker_id: hex_or_none(&task.worker_id),
        worker_pid: (task.worker_pid != 0).then_some(task.worker_pid),
        error_type: (!task.error_type.is_empty()).then_some(task.error_type),
        language: "PYTHON",
        required_resources: task.resources.into_iter().collect(),
        placement_group_id: hex_or_none(&task.placement_group_id),
        creation_time_ms: nonzero(task.creation_time_ms),
        start_time_ms: nonzero(task.start_time_ms),
        end_time_ms: nonzero(task.end_time_ms),
        error_message: (!task.error_message.is_empty()).then_some(task.error_message),
    }
}

impl ClusterState for HeadClusterState {
    fn load_metrics_report(&self) -> oxray_rest::LoadMetricsReport {
        self.0.load_metrics_report()
    }

    fn nodes(&self) -> Vec<NodeRow> {
        let latest = self.0.latest_samples();
        self.0
            .nodes()
            .into_iter()
            .map(|n| {
                let s = latest.get(&n.node_id);
                node_row(n, s)
            })
            .collect()
    }

    fn is_group_resource(&self, name: &str) -> bool {
        crate::resources::group_names::is_group_name(name)
    }

    fn list_logs<'a>(&'a self, node_id: &'a str) -> BoxFuture<'a, Result<Vec<LogFileRow>, NodeQueryError>> {
        Box::pin(async move {
            let mut client = self.node_state(node_id).await?;
            let reply = client.list_logs(ListLogsRequest {}).await.map_err(query_error)?.into_inner();
            Ok(reply
                .files
                .into_iter()
                .map(|f| LogFileRow { name: f.name, size: f.size, modified_ms: f.modified_ms })
                .collect())
        })
    }

    fn read_log<'a>(
        &'a self,
        node_id: &'a str,
        name: &'a str,
        offset: i64,
        length: u64,
    ) -> BoxFuture<'a, Result<LogChunk, NodeQueryError>> {
        Box::pin(async move {
            let mut client = self.node_state(node_id).await?;
            let request = ReadLogRequest { name: name.to_string(), offset, length, ..Default::default() };
            let reply = client.read_log(request).await.map_err(query_error)?.into_inner();
            Ok(LogChunk { data: reply.data, offset: reply.offset, size: reply.size })
        })
    }

    fn search_log<'a>(
        &'a self,
        node_id: &'a str,
        name: &'a str,
        text: &'a str,
        max: u32,
    ) -> BoxFuture<'a, Result<LogSearch, NodeQueryError>> {
        Box::pin(async move {
            let mut client = self.node_state(node_id).await?;
            let request = ReadLogRequest {
                name: name.to_string(),
                search: text.to_string(),
                max_matches: max,
                ..Default::default()
            };
            let reply = client.read_log(request).await.map_err(query_error)?.into_inner();
            Ok(LogSearch {
                matches: reply.matches.into_iter().map(|m| (m.line, m.text)).collect(),
                truncated: reply.truncated,
            })
        })
    }

    fn profile<'a>(
        &'a self,
        node_id: &'a str,
        pid: u32,
        what: Profile,
    ) -> BoxFuture<'a, Result<Vec<u8>, NodeQueryError>> {
        Box::pin(async move {
            let mut client = self.node_state(node_id).await?;
            let request = match what {
                Profile::Dump => ProfileRequest { pid, kind: ProfileKind::Dump as i32, duration_s: 0 },
                Profile::FlameGraph { seconds } => {
                    ProfileRequest { pid, kind: ProfileKind::Flamegraph as i32, duration_s: seconds }
                }
            };
            let reply = client.profile_worker(request).await.map_err(query_error)?;
            Ok(reply.into_inner().output)
        })
    }

    fn datasets(&self) -> Vec<serde_json::Value> {
        self.0.datasets().list()
    }

    fn train_runs(&self) -> Vec<serde_json::Value> {
        self.0.train_runs().runs().into_iter().map(|run| run.state).collect()
    }

    fn train_run(&self, id: &str) -> Option<(serde_json::Value, Vec<serde_json::Value>)> {
        self.0.train_runs().run(id)
    }

    fn serve_details(&self) -> Option<serde_json::Value> {
        self.0.serve().details()
    }

    fn serve_checkpoint_kept(&self) -> bool {
        self.0.serve().checkpoint().is_some()
    }

    fn experiments(&self) -> Vec<serde_json::Value> {
        self.0.experiments().runs().into_iter().map(|run| run.state).collect()
    }

    fn experiment(&self, id: &str) -> Option<(serde_json::Value, Vec<serde_json::Value>)> {
        self.0.experiments().run(id)
    }

    fn node_series(&self, since_ms: u64) -> Vec<NodeSeries> {
        self.0
            .node_samples(since_ms)
            .into_iter()
            .map(|(info, samples)| NodeSeries {
                node_id: hex::encode(&info.node_id),
                node_ip: info.ip,
                samples: samples.iter().map(sample_of).collect(),
            })
            .collect()
    }

    fn actors(&self) -> Vec<ActorRow> {
        self.0.actors().into_iter().map(actor_row).collect()
    }

    fn placement_groups(&self) -> Vec<PlacementGroupRow> {
        self.0.placement_groups().into_iter().map(group_row).collect()
    }

    fn serve_counters(&self) -> BoxFuture<'_, serde_json::Value> {
        Box::pin(async move {
            let mut asks = tokio::task::JoinSet::new();
            for node in self.0.nodes().into_iter().filter(|n| n.alive) {
                let head = self.0.clone();
                asks.spawn(async move {
                    let answer = async {
                        let mut client = head.node_state(&node.node_id).await.ok()?;
                        let reply = client.serve_counters(oxray_proto::Empty {}).await.ok()?.into_inner();
                        serde_json::from_str::<serde_json::Value>(&reply.counters_json).ok()
                    };
                    tokio::time::timeout(NODE_ANSWER_TIMEOUT, answer).await.ok().flatten()
                });
            }
            let mut sum = serde_json::Map::new();
            while let Some(joined) = asks.join_next().await {
                let Ok(Some(serde_json::Value::Object(apps))) = joined else { continue };
                for (app, counters) in apps {
                    let entry = sum.entry(app).or_insert_with(|| serde_json::json!({}));
                    for key in ["requests", "errors", "latency_sum_ms"] {
                        let total = entry[key].as_f64().unwrap_or(0.0) + counters[key].as_f64().unwrap_or(0.0);
                        entry[key] = total.into();
                    }
                }
            }
            serde_json::Value::Object(sum)
        })
    }

    fn tasks(&self, limit: usize) -> BoxFuture<'_, TaskListing> {
        Box::pin(async move {
            let mut asks = tokio::task::JoinSet::new();
            for node in self.0.nodes().into_iter().filter(|n| n.alive) {
                let head = self.0.clone();
                asks.spawn(async move {
                    let answer = async {
                        let mut client = head.node_state(&node.node_id).await?;
                        let request = ListTasksRequest { limit: u32::try_from(limit).unwrap_or(u32::MAX) };
                        client
                            .list_tasks(request)
                            .await
                            .map(tonic::Response::into_inner)
                            .map_err(|e| e.message().to_string())
                    };
                    let answer = tokio::time::timeout(NODE_ANSWER_TIMEOUT, answer)
                        .await
                        .unwrap_or_else(|_| Err(format!("no answer within {NODE_ANSWER_TIMEOUT:?}")));
                    (hex::encode(&node.node_id), node.ip, answer)
                });
            }
            let mut listing = TaskListing::default();
            while let Some(joined) = asks.join_next().await {
                let Ok((node_hex, ip, answer)) = joined else { continue };
                match answer {
                    Ok(reply) => {
                        listing.total += reply.total as usize;
                        listing.tasks.extend(reply.tasks.into_iter().map(|t| task_row(t, &node_hex)));
                    }
                    Err(e) => listing.unreachable.push(format!("node {node_hex} ({ip}): {e}")),
                }
            }
            listing
        })
    }
}
