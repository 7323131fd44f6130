//! The node agent's state machine. It does no I/O: methods change state and
//! queue `Action`s (spawn a worker, signal a process, message another node) that
//! the service layer carries out after releasing the lock, so every test can
//! drive it without a runtime. Nor does it read the clock: the methods that may
//! start or end a task (which is most of them, through scheduling) take the
//! caller's `now_ms` (`crate::clock::now_ms()` in the service layer, fixed times
//! in the tests), which it records as the task's times.
//!
//! `AgentState` composes one part per concern, each a struct with private fields
//! and a small API, and each file also holds the `AgentState` methods of its concern:
//! - `objects`: `ObjectTable` (the store, holders and pins, views, copies in flight);
//! - `tasks`: `TaskTable` and its `ReadyQueues` (tasks waiting for arguments or
//!   resources, who produces which object), `FunctionTable`, and scheduling;
//! - `workers`: `WorkerPool` (worker processes, idle workers, starts) and worker deaths;
//! - `actors`: `ActorTable` (actors, names, calls queued and in flight) and restarts;
//! - `bundles`: `BundleTable` (placement-group bundles held on this node);
//! - `drivers`: `DriverTable` (joined drivers' sessions) and cleaning up after a driver that is gone;
//! - `remote`: `PeerTable` (other nodes) and everything that involves them;
//! - `task_history`: `TaskHistory` (the tasks that ended here, bounded) and listing tasks.

use super::error::AgentError;
use crate::ids::{ActorId, JobId, NodeId, ObjectId, PlacementGroupId, WorkerId};
use crate::resources::{GpuSlots, ResourceSet, group_names};
use crate::task_env::WorkerStartEnv;
use oxray_object_store::{ObjectStore, StoreStats};
use oxray_proto::{Assignment, TaskSpec};
use std::collections::HashMap;
use tokio::sync::mpsc::UnboundedSender;

mod actors;
mod bundles;
mod drivers;
mod objects;
mod remote;
mod task_history;
mod tasks;
#[cfg(test)]
mod tests;
mod workers;

pub use actors::{ActorEntry, ActorState};
pub use objects::Reservation;
pub use remote::PeerView;

use actors::ActorTable;
use bundles::BundleTable;
use drivers::DriverTable;
use objects::ObjectTable;
use remote::PeerTable;
use task_history::TaskHistory;
use tasks::{FunctionTable, TaskState, TaskTable};
use workers::{WorkerPool, WorkerRole};

/// A worker's assignment stream. Unbounded because it is sent to with the state
/// lock held, where waiting for room is impossible. What bounds it: every message
/// is a task of `TaskTable` now `Running` on that worker. A pool worker gets one
/// only when idle (one in flight); an actor's worker gets each ready call, which
/// stays in the actor's `inflight` until its `Done`. The channel goes with the worker.
pub type AssignmentSender = UnboundedSender<Result<Assignment, tonic::Status>>;

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    SpawnWorker {
        worker_id: WorkerId,
        env: Vec<(String, String)>,
    },
    /// An actor's state, pid or restart count changed: tell the head.
    ActorChanged(ActorId),
    Signal {
        pid: u32,
        signal: i32,
    },
    /// A line for the node's log (`tracing`), at `level`.
    Log {
        level: LogLevel,
        message: String,
    },
    /// Send a task to another node over this node's link to it.
    Forward {
        node: NodeId,
        task: Box<oxray_proto::ForwardTask>,
    },
    /// Copy an object's bytes from another node into this node's store.
    Pull {
        id: ObjectId,
        address: String,
    },
    /// Tell `node` it may drop the copy of `id` it holds for this node.
    ReleaseRemote {
        node: NodeId,
        id: ObjectId,
    },
    PeerCancel {
        node: NodeId,
        object_id: ObjectId,
        force: bool,
        recursive: bool,
    },
    /// `node` came back (the head saw it dead, then beating again): the next message to it opens
    /// a new link instead of the one that broke.
    ResetPeerLink {
        node: NodeId,
    },
    PeerKillActor {
        node: NodeId,
        actor_id: ActorId,
        no_restart: bool,
    },
    /// Ask the head to remove a placement group (its job's driver is gone).
    RemovePlacementGroup(PlacementGroupId),
    /// Tell `node` that a job's driver is gone, so it stops the job's work too.
    PeerJobEnded {
        node: NodeId,
        job: JobId,
    },
}

/// How much an operator needs to see a log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    /// Per-object detail (each spill): off unless `RUST_LOG` asks for it.
    Debug,
    Info,
    Warn,
}

impl Action {
    fn debug(message: String) -> Self {
        Action::Log { level: LogLevel::Debug, message }
    }

    fn info(message: String) -> Self {
        Action::Log { level: LogLevel::Info, message }
    }

    fn warn(message: String) -> Self {
        Action::Log { level: LogLevel::Warn, message }
    }
}

pub struct AgentConfig {
    pub node_id: NodeId,
    pub total: ResourceSet,
    pub num_gpus: usize,
    pub max_starting_workers: usize,
    pub worker_env: Vec<(String, String)>,
    /// The agent's own environment, which its workers inherit (`worker_env` over it),
    /// as the rules for a task's `CUDA_VISIBLE_DEVICES` and `OMP_NUM_THREADS` read it.
    pub inherited_env: WorkerStartEnv,
    /// How many dead actors this node remembers (`OXRAY_HEAD_HISTORY`, as the head).
    pub dead_actors_kept: usize,
    /// Ray's node labels, matched by label selectors.
    pub labels: HashMap<String, String>,
}

pub struct AgentState {
    /// This node.
    pub node_id: NodeId,
    /// This agent's address, given to other nodes as a source of objects.
    pub address: String,
    /// Everything this node has, placement-group bundle names included.
    total: ResourceSet,
    /// Ray's node labels.
    pub labels: HashMap<String, String>,
    /// What is free now: lowered while tasks and actors hold resources.
    available: ResourceSet,
    /// Which GPU indices (and fractions of them) are handed out.
    gpus: GpuSlots,
    objects: ObjectTable,
    tasks: TaskTable,
    task_history: TaskHistory,
    functions: FunctionTable,
    workers: WorkerPool,
    actors: ActorTable,
    bundles: BundleTable,
    peers: PeerTable,
    drivers: DriverTable,
    /// Handle tokens of the non-detached actors created here: when a token object is
    /// freed (no handle to its actor is left anywhere), the actor is reclaimed.
    handle_tokens: HashMap<ObjectId, ActorId>,
    /// Side effects for the service layer, taken after each call.
    actions: Vec<Action>,
    /// Set once the node is stopping: nothing new is scheduled or restarted.
    shutting_down: bool,
    /// Error objects that became ready here (see `errors_ready`).
    errors_ready: u64,
}

fn resources_of(map: &HashMap<String, f64>) -> Result<ResourceSet, AgentError> {
    Ok(ResourceSet::from_map(map)?)
}

/// What a task or actor creation holds while it runs, and what it needs to be placed
/// (an actor may need a CPU to start that it does not hold): its spec's resources,
/// asked of its placement group's bundle under the group's names when it has one.
pub fn requests_of(spec: &TaskSpec) -> Result<(ResourceSet, ResourceSet), AgentError> {
    let holds = resources_of(&spec.resources)?;
    let placement =
        if spec.placement_resources.is_empty() { holds.clone() } else { resources_of(&spec.placement_resources)? };
    let Some(bundle) = &spec.placement_group else { return Ok((holds, placement)) };
    let group = PlacementGroupId::from_bytes(&bundle.placement_group_id)?;
    let index = match bundle.bundle_index {
        -1 => None,
        i => Some(u32::try_from(i).map_err(|_| AgentError::Malformed("a bundle index below -1"))?),
    };
    Ok((group_names::in_group(&holds, &group, index), group_names::in_group(&placement, &group, index)))
}

impl AgentState {
    pub fn new(config: AgentConfig, store: ObjectStore) -> Self {
        let mut actors = ActorTable::default();
        actors.set_dead_kept(config.dead_actors_kept);
        AgentState {
            node_id: config.node_id,
            address: String::new(),
            available: config.total.clone(),
            total: config.total,
            labels: config.labels,
            gpus: GpuSlots::new(config.num_gpus),
            objects: ObjectTable::new(store),
            tasks: TaskTable::default(),
            task_history: TaskHistory::default(),
            functions: FunctionTable::default(),
            workers: WorkerPool::new(config.max_starting_workers, config.worker_env, config.inherited_env),
            actors,
            bundles: BundleTable::default(),
            peers: PeerTable::default(),
            drivers: DriverTable::default(),
            errors_ready: 0,
            handle_tokens: HashMap::new(),
            actions: Vec::new(),
            shutting_down: false,
        }
    }

    pub fn take_actions(&mut self) -> Vec<Action> {
        std::mem::take(&mut self.actions)
    }

    pub fn total(&self) -> &ResourceSet {
        &self.total
    }

    pub fn available(&self) -> &ResourceSet {
        &self.available
    }

    /// The object store's capacity and use.
    /// What this node reports free to the head: its resources, with
    /// `object_store_memory` lowered by the bytes the store's arena holds (as
    /// Ray's raylet reports it), so `oxray status` shows the store in use, on top
    /// of what tasks and actors hold with the `object_store_memory` option.
    pub fn reported_available(&self) -> ResourceSet {
        let mut available = self.available.clone();
        let store = self.total.get("object_store_memory");
        if store > 0.0 {
            let used = self.objects.store().shm_used() as f64;
            let unheld = self.available.get("object_store_memory");
            // Within [0, store]: a valid quantity whatever the arena reports.
            let _ = available.set("object_store_memory", (unheld - used).clamp(0.0, store));
        }
        available
    }

    pub fn store_stats(&self) -> StoreStats {
        self.objects.store().stats()
    }

    /// The node's object store, for copying bytes in and out of it (`peers.rs`)
    /// and for removing its files when the node stops.
    pub fn store_mut(&mut self) -> &mut ObjectStore {
        self.objects.store_mut()
    }

    /// Stops scheduling and returns every worker pid, for the caller to kill.
    pub fn begin_shutdown(&mut self) -> Vec<u32> {
        self.shutting_down = true;
        self.workers.values().map(|w| w.pid).filter(|p| *p != 0).collect()
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down
    }

    /// How many actors this node keeps, dead ones included.
    pub fn actor_count(&self) -> usize {
        self.actors.len()
    }

    pub fn worker_pids(&self) -> Vec<u32> {
        self.workers.values().map(|w| w.pid).filter(|p| *p != 0).collect()
    }
}
