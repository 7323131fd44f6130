//! The rows of Ray's State API (`ray.util.state.common`'s `NodeState`,
//! `ActorState`, `PlacementGroupState`, `TaskState`), which the runtime fills
//! from the head's tables and the node agents' task tables, and the source
//! they come from ([`ClusterState`]).

use crate::BoxFuture;
use crate::metrics::{NodeSample, NodeSeries};
use serde::Serialize;
use std::collections::BTreeMap;

/// One node, as `list_nodes` shows it.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct NodeRow {
    /// Hex.
    pub node_id: String,
    pub node_ip: String,
    pub is_head_node: bool,
    /// `ALIVE` or `DEAD`.
    pub state: &'static str,
    pub state_message: Option<String>,
    pub node_name: String,
    pub resources_total: BTreeMap<String, f64>,
    /// What is free now (the dashboard shows it; Ray's `NodeState` has no such column).
    pub resources_available: BTreeMap<String, f64>,
    pub labels: BTreeMap<String, String>,
    pub start_time_ms: u64,
    /// 0 while it is alive.
    pub end_time_ms: u64,
    /// Its latest sample (the dashboard and `/metrics` show it; not a State API column).
    #[serde(skip)]
    pub latest: Option<NodeSample>,
    /// `host:port` of its Prometheus endpoint, empty when it serves none.
    #[serde(skip)]
    pub metrics_address: String,
}

/// One actor, as `list_actors` shows it.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ActorRow {
    pub actor_id: String,
    pub class_name: String,
    /// `DEPENDENCIES_UNREADY`, `PENDING_CREATION`, `ALIVE`, `RESTARTING` or `DEAD`.
    pub state: &'static str,
    pub job_id: String,
    pub name: String,
    pub node_id: Option<String>,
    pub pid: Option<u32>,
    pub ray_namespace: String,
    pub required_resources: BTreeMap<String, f64>,
    /// Ray's `{"actor_died_error_context": {"error_message": ...}}` for a dead actor.
    pub death_cause: Option<serde_json::Value>,
    pub is_detached: bool,
    pub placement_group_id: Option<String>,
    pub repr_name: String,
    pub num_restarts: i32,
    pub num_restarts_due_to_lineage_reconstruction: i32,
    pub num_restarts_due_to_node_preemption: i32,
}

/// One placement group, as `list_placement_groups` shows it.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PlacementGroupRow {
    pub placement_group_id: String,
    pub name: String,
    pub creator_job_id: String,
    /// `PENDING`, `CREATED` or `REMOVED`.
    pub state: &'static str,
    /// `[{"bundle_id", "node_id", "unit_resources"}]`.
    pub bundles: Vec<serde_json::Value>,
    pub is_detached: bool,
    /// `{"scheduling_state", ...}`.
    pub stats: serde_json::Value,
    pub strategy: &'static str,
}

/// One task attempt, as `list_tasks` shows it.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TaskRow {
    pub task_id: String,
    pub attempt_number: i32,
    pub name: String,
    /// Ray's `TaskStatus`: `PENDING_ARGS_AVAIL`, `PENDING_NODE_ASSIGNMENT`,
    /// `RUNNING`, `FINISHED`, `FAILED`, ...
    pub state: &'static str,
    pub job_id: String,
    pub actor_id: Option<String>,
    /// `NORMAL_TASK`, `ACTOR_CREATION_TASK` or `ACTOR_TASK`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub func_or_class_name: String,
    /// The task (or driver) that submitted it, hex.
    pub parent_task_id: String,
    pub node_id: Option<String>,
    pub worker_id: Option<String>,
    pub worker_pid: Option<u32>,
    pub error_type: Option<String>,
    pub language: &'static str,
    pub required_resources: BTreeMap<String, f64>,
    pub placement_group_id: Option<String>,
    pub creation_time_ms: Option<u64>,
    pub start_time_ms: Option<u64>,
    pub end_time_ms: Option<u64>,
    pub error_message: Option<String>,
}

/// The tasks the node agents know (running, queued and the recent finished
/// ones each keeps), and which nodes could not be asked.
#[derive(Clone, Debug, Default)]
pub struct TaskListing {
    pub tasks: Vec<TaskRow>,
    /// How many the agents had before they cut their answers to the limit.
    pub total: usize,
    /// One line per node that did not answer (Ray's `partial_failure_warning`).
    pub unreachable: Vec<String>,
}

/// One log file of a node's session (`logs/worker-*.log`, `jobs/*`).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LogFileRow {
    pub name: String,
    pub size: u64,
    pub modified_ms: u64,
}

/// Bytes of a log file: `data` starts at `offset` of a file `size` bytes long now.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogChunk {
    pub data: Vec<u8>,
    pub offset: u64,
    pub size: u64,
}

/// The lines of a log file holding a text: (line number, line); `truncated` when cut at the maximum.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogSearch {
    pub matches: Vec<(u64, String)>,
    pub truncated: bool,
}

/// What to take of a worker with py-spy.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Profile {
    /// Every thread's Python stack now (text).
    Dump,
    /// A CPU flame graph over this many seconds (SVG).
    FlameGraph { seconds: u32 },
}

/// Why a question to a node's agent (its log files, a profile of a worker) failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NodeQueryError {
    /// The node id is not hex, or no node of the cluster has it.
    #[error("{0}")]
    UnknownNode(String),
    /// What was asked for is not there (a log file that does not exist).
    #[error("{0}")]
    NotFound(String),
    /// The agent refused what was asked (a file outside its logs, a pid that is not its worker).
    #[error("{0}")]
    Refused(String),
    /// The agent could not be reached, or failed.
    #[error("{0}")]
    Failed(String),
}

impl NodeQueryError {
    /// The HTTP status every route answers this error with.
    pub fn status(&self) -> axum::http::StatusCode {
        use axum::http::StatusCode;
        match self {
            NodeQueryError::UnknownNode(_) | NodeQueryError::NotFound(_) => StatusCode::NOT_FOUND,
            NodeQueryError::Refused(_) => StatusCode::BAD_REQUEST,
            NodeQueryError::Failed(_) => StatusCode::BAD_GATEWAY,
        }
    }
}

/// Where the State API's rows come from: the head's tables and its node agents.
pub trait ClusterState: Send + Sync + std::fmt::Debug {
    fn nodes(&self) -> Vec<NodeRow>;
    /// Whether resource `name` is one a placement group's bundle adds to its node
    /// (`CPU_group_<pg>`): the engine's naming rule, which `/metrics` leaves out of a
    /// node's logical resources.
    fn is_group_resource(&self, name: &str) -> bool;
    fn actors(&self) -> Vec<ActorRow>;
    fn placement_groups(&self) -> Vec<PlacementGroupRow>;
    /// What an autoscaler reads: demand waiting for resources and each node's use
    /// (Ray's `loadMetricsReport` in `/api/cluster_status`).
    fn load_metrics_report(&self) -> oxray_rest::LoadMetricsReport;
    /// Asks every live node agent for at most `limit` of its tasks.
    fn tasks(&self, limit: usize) -> BoxFuture<'_, TaskListing>;
    /// Each node's samples taken after `since_ms`.
    fn node_series(&self, since_ms: u64) -> Vec<NodeSeries>;
    /// Every Train run's state (Ray's `TrainRun` JSON), oldest first.
    fn train_runs(&self) -> Vec<serde_json::Value>;
    /// One run's state and its kept reports, oldest first.
    fn train_run(&self, id: &str) -> Option<(serde_json::Value, Vec<serde_json::Value>)>;
    /// Serve's applications as its controller last reported them (Ray's `ServeInstanceDetails`);
    /// None when Serve is not running.
    fn serve_details(&self) -> Option<serde_json::Value>;
    /// Whether the head keeps a Serve controller checkpoint: Serve ran when the head last
    /// stopped, and its applications are to be taken back.
    fn serve_checkpoint_kept(&self) -> bool {
        false
    }
    /// Every live node's Serve proxy counters summed per application:
    /// `{application: {"requests", "errors", "latency_sum_ms"}}`.
    fn serve_counters(&self) -> BoxFuture<'_, serde_json::Value> {
        Box::pin(async { serde_json::json!({}) })
    }
    /// Every Tune experiment's state, oldest first.
    fn experiments(&self) -> Vec<serde_json::Value>;
    /// One experiment's state and its kept trial results, oldest first.
    fn experiment(&self, id: &str) -> Option<(serde_json::Value, Vec<serde_json::Value>)>;
    /// Every Data execution's figures, oldest first.
    fn datasets(&self) -> Vec<serde_json::Value>;
    /// Node `node_id`'s (hex) log files; `Err` says why they could not be listed.
    fn list_logs<'a>(&'a self, node_id: &'a str) -> BoxFuture<'a, Result<Vec<LogFileRow>, NodeQueryError>>;
    /// Up to `length` bytes of a node's log file from `offset` (negative: back from the end).
    fn read_log<'a>(
        &'a self,
        node_id: &'a str,
        name: &'a str,
        offset: i64,
        length: u64,
    ) -> BoxFuture<'a, Result<LogChunk, NodeQueryError>>;
    /// A py-spy profile of worker `pid` on node `node_id` (hex).
    fn profile<'a>(
        &'a self,
        node_id: &'a str,
        pid: u32,
        what: Profile,
    ) -> BoxFuture<'a, Result<Vec<u8>, NodeQueryError>>;
    /// The lines of a node's log file holding `text` (at most `max`).
    fn search_log<'a>(
        &'a self,
        node_id: &'a str,
        name: &'a str,
        text: &'a str,
        max: u32,
    ) -> BoxFuture<'a, Result<LogSearch, NodeQueryError>>;
}
