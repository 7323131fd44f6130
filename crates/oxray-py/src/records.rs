//! The typed values the native module hands to Python instead of dicts:
//! frozen records of actors, nodes, placement groups, assignments, created
//! actors and object-store figures, and the `TaskKind` enum that
//! `Client.submit` takes and `Assignment.kind` holds. Each is built from its
//! protocol (or store) value here; the field names and value types are the ones
//! Python read from the dicts these replace.

use crate::buffers::ObjectBuffer;
use oxray_runtime::head::placement::Strategy;
use oxray_runtime::proto;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::collections::HashMap;

/// What a task is: a plain task, the creation of an actor, or a call on one.
#[pyclass(eq, eq_int, frozen, from_py_object, module = "oxray._native")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskKind {
    #[pyo3(name = "NORMAL")]
    Normal,
    #[pyo3(name = "ACTOR_CREATION")]
    ActorCreation,
    #[pyo3(name = "ACTOR_TASK")]
    ActorTask,
}

#[pymethods]
impl TaskKind {
    /// Hashes as its integer value, which it also compares equal to.
    fn __hash__(&self) -> u64 {
        *self as u64
    }
}

impl From<TaskKind> for proto::TaskKind {
    fn from(kind: TaskKind) -> Self {
        match kind {
            TaskKind::Normal => proto::TaskKind::Normal,
            TaskKind::ActorCreation => proto::TaskKind::ActorCreation,
            TaskKind::ActorTask => proto::TaskKind::ActorTask,
        }
    }
}

impl From<proto::TaskKind> for TaskKind {
    fn from(kind: proto::TaskKind) -> Self {
        match kind {
            proto::TaskKind::Normal => TaskKind::Normal,
            proto::TaskKind::ActorCreation => TaskKind::ActorCreation,
            proto::TaskKind::ActorTask => TaskKind::ActorTask,
        }
    }
}

/// `Name(field=repr, ...)` from the object's own attributes, with bytes (ids)
/// shown as hex.
fn repr_fields(obj: &Bound<'_, PyAny>, fields: &[&str]) -> PyResult<String> {
    let parts = fields
        .iter()
        .map(|field| {
            let value = obj.getattr(*field)?;
            let shown = match value.cast::<PyBytes>() {
                Ok(bytes) => hex::encode(bytes.as_bytes()),
                Err(_) => value.repr()?.to_string(),
            };
            Ok(format!("{field}={shown}"))
        })
        .collect::<PyResult<Vec<_>>>()?;
    Ok(format!("{}({})", obj.get_type().name()?, parts.join(", ")))
}

/// Ray's name of an actor state.
fn actor_state_name(state: proto::ActorState) -> &'static str {
    use proto::ActorState as S;
    match state {
        S::PendingCreation | S::Unspecified => "PENDING_CREATION",
        S::Alive => "ALIVE",
        S::Restarting => "RESTARTING",
        S::Dead => "DEAD",
    }
}

/// Ray's name of a placement group state.
fn placement_group_state_name(state: proto::PlacementGroupState) -> &'static str {
    use proto::PlacementGroupState as S;
    match state {
        S::Pending | S::Unspecified => "PENDING",
        S::Created => "CREATED",
        S::Removed => "REMOVED",
    }
}

/// An actor as the cluster knows it; `state` is Ray's name ("ALIVE", ...).
#[pyclass(frozen, get_all, module = "oxray._native")]
pub(crate) struct ActorInfo {
    actor_id: Vec<u8>,
    class_name: String,
    state: String,
    name: String,
    namespace: String,
    pid: u32,
    num_restarts: i32,
    death_cause: String,
    method_names: Vec<String>,
    max_task_retries: i32,
}

impl From<proto::ActorInfo> for ActorInfo {
    fn from(a: proto::ActorInfo) -> Self {
        ActorInfo {
            state: actor_state_name(a.state()).to_string(),
            actor_id: a.actor_id,
            class_name: a.class_name,
            name: a.name,
            namespace: a.namespace,
            pid: a.pid,
            num_restarts: a.num_restarts,
            death_cause: a.death_cause,
            method_names: a.method_names,
            max_task_retries: a.max_task_retries,
        }
    }
}

#[pymethods]
impl ActorInfo {
    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        repr_fields(
            slf.as_any(),
            &["actor_id", "class_name", "state", "name", "namespace", "pid", "num_restarts", "death_cause"],
        )
    }
}

/// A node of the cluster; `node_id` is hex, `total` and `available` map
/// resource names to amounts.
#[pyclass(frozen, get_all, module = "oxray._native")]
pub(crate) struct NodeInfo {
    node_id: String,
    address: String,
    ip: String,
    alive: bool,
    total: HashMap<String, f64>,
    available: HashMap<String, f64>,
    is_head: bool,
    session_dir: String,
    start_time_ms: u64,
    labels: HashMap<String, String>,
}

impl From<proto::NodeInfo> for NodeInfo {
    fn from(n: proto::NodeInfo) -> Self {
        NodeInfo {
            node_id: hex::encode(&n.node_id),
            address: n.address,
            ip: n.ip,
            alive: n.alive,
            total: n.total,
            available: n.available,
            is_head: n.is_head,
            session_dir: n.session_dir,
            start_time_ms: n.start_time_ms,
            labels: n.labels,
        }
    }
}

#[pymethods]
impl NodeInfo {
    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        repr_fields(slf.as_any(), &["node_id", "address", "alive", "is_head", "total", "available"])
    }
}

/// A placement group: its hex id, Ray's strategy and state names, its bundles
/// and (once created) the hex id of each bundle's node.
#[pyclass(frozen, get_all, module = "oxray._native")]
pub(crate) struct PlacementGroupInfo {
    placement_group_id: String,
    name: String,
    namespace: String,
    strategy: String,
    state: String,
    bundles: Vec<HashMap<String, f64>>,
    bundle_nodes: Vec<String>,
}

impl From<proto::PlacementGroupInfo> for PlacementGroupInfo {
    fn from(info: proto::PlacementGroupInfo) -> Self {
        let state = placement_group_state_name(info.state()).to_string();
        let spec = info.spec.unwrap_or_default();
        let strategy = Strategy::from_proto(spec.strategy()).map(Strategy::as_str).unwrap_or("").to_string();
        PlacementGroupInfo {
            placement_group_id: hex::encode(&spec.pg_id),
            name: spec.name,
            namespace: spec.namespace,
            strategy,
            state,
            bundles: spec.bundles.into_iter().map(|b| b.resources).collect(),
            bundle_nodes: info.bundle_nodes.iter().map(hex::encode).collect(),
        }
    }
}

#[pymethods]
impl PlacementGroupInfo {
    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        repr_fields(
            slf.as_any(),
            &["placement_group_id", "name", "namespace", "strategy", "state", "bundles", "bundle_nodes"],
        )
    }
}

/// The actor a creation submit made, or found already there (`existing`,
/// with `get_if_exists`).
#[pyclass(frozen, get_all, module = "oxray._native")]
pub(crate) struct CreatedActor {
    pub actor_id: Vec<u8>,
    pub existing: bool,
}

#[pymethods]
impl CreatedActor {
    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        repr_fields(slf.as_any(), &["actor_id", "existing"])
    }
}

/// A task given to this worker: its spec, its arguments in order (values and
/// resolved references alike, as object buffers), and its visible GPUs.
#[pyclass(frozen, get_all, module = "oxray._native")]
pub(crate) struct Assignment {
    pub kind: TaskKind,
    pub task_id: Vec<u8>,
    pub function_id: Vec<u8>,
    pub name: String,
    pub args: Vec<Py<ObjectBuffer>>,
    pub kwarg_names: Vec<String>,
    pub return_ids: Vec<Vec<u8>>,
    pub actor_id: Vec<u8>,
    pub method_name: String,
    pub env_vars: HashMap<String, String>,
    pub job_id: Vec<u8>,
    pub max_concurrency: i32,
    /// An actor creation's namespace: where the actor is registered.
    pub namespace: String,
    /// The submitting job's namespace: where `get_actor(name)` looks.
    pub job_namespace: String,
    /// The GPUs given (an actor call: its actor's) as CUDA names them.
    pub cuda_visible_devices: String,
    /// The variables set for the task's run and restored after it (an actor's creation
    /// keeps them): its runtime_env's `env_vars` with the agent's overrides.
    pub task_env: HashMap<String, String>,
    /// The variables the agent sets in the worker and leaves set after the task
    /// (`CUDA_VISIBLE_DEVICES`, `OMP_NUM_THREADS`); None removes one.
    pub kept_env: HashMap<String, Option<String>>,
    /// What the task (or the actor, at its creation) holds while it runs, as it asked
    /// for it (`CPU`, also when drawn from a placement group's bundle).
    pub resources: HashMap<String, f64>,
    /// The placement group it was placed in, if any.
    pub placement_group_id: Option<Vec<u8>>,
    /// Child tasks with no scheduling strategy go into this task's placement group.
    pub capture_child_tasks: bool,
    /// A normal task: its worker exits after running the function this many times (0: never).
    pub max_calls: i32,
    /// Pickled exception types that `retry_exceptions` retries (empty: all).
    pub retry_exception_types: Vec<u8>,
    /// An actor call's concurrency group ("": the default one).
    pub concurrency_group: String,
    /// An actor creation's concurrency groups: name -> how many of its calls run at once.
    pub concurrency_groups: HashMap<String, i32>,
    /// The agent retired this worker (its function's `max_calls` reached): it exits.
    pub exit: bool,
    /// Not a task: this worker's actor call with that id was cancelled (stop it if async, skip it if not started).
    pub cancel_task_id: Vec<u8>,
    /// An actor call cancelled before it started: it must not run.
    pub cancelled_before_start: bool,
    /// Bumped whenever the agent drops functions: registrations made under an older one may be gone.
    pub functions_generation: u64,
}

#[pymethods]
impl Assignment {
    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let a = slf.get();
        let head = repr_fields(slf.as_any(), &["kind", "name", "task_id", "actor_id", "method_name"])?;
        // Arguments and returns are counted: their bytes say little in a repr.
        let head = head.strip_suffix(')').unwrap_or(&head);
        Ok(format!("{head}, args={}, return_ids={})", a.args.len(), a.return_ids.len()))
    }
}

/// The embedded node's object store: capacity and use of its shared memory
/// in bytes, bytes spilled to disk and held inline, live objects, and how many
/// objects were ever spilled.
#[pyclass(frozen, get_all, module = "oxray._native")]
pub(crate) struct StoreStats {
    capacity: u64,
    shm_used: u64,
    spilled_bytes: u64,
    inline_bytes: u64,
    num_objects: u64,
    num_spilled_total: u64,
}

impl From<oxray_object_store::StoreStats> for StoreStats {
    fn from(s: oxray_object_store::StoreStats) -> Self {
        StoreStats {
            capacity: s.capacity as u64,
            shm_used: s.shm_used as u64,
            spilled_bytes: s.spilled_bytes as u64,
            inline_bytes: s.inline_bytes as u64,
            num_objects: s.num_objects as u64,
            num_spilled_total: s.num_spilled_total,
        }
    }
}

#[pymethods]
impl StoreStats {
    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        repr_fields(
            slf.as_any(),
            &["capacity", "shm_used", "spilled_bytes", "inline_bytes", "num_objects", "num_spilled_total"],
        )
    }
}
