//! The node agent's state machine: objects and their references, tasks waiting
//! for arguments or resources, the worker pool, and actors. It does no I/O:
//! methods change state and queue `Action`s (spawn a worker, signal a process)
//! that the service layer carries out after releasing the lock.

use super::error::{AgentError, CopyError};
use crate::errors::{SystemErrorKind, system_error_object};
use crate::ids::{ActorId, ClientId, JobId, NodeId, ObjectId, PlacementGroupId, TaskId, WorkerId};
use crate::resources::{GpuSlots, ResourceSet};
use oxray_object_store::{ObjectPlace, ObjectStore};
use oxray_proto::{Assignment, ObjectLocation, TaskKind, TaskSpec, object_location::Place, task_arg::Kind};
use std::collections::{HashMap, HashSet, VecDeque};
use tokio::sync::mpsc::UnboundedSender;

mod remote;
pub use remote::PeerView;

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
    },
    PeerKillActor {
        node: NodeId,
        actor_id: ActorId,
        no_restart: bool,
    },
}

/// How much an operator needs to see a log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    Info,
    Warn,
}

impl Action {
    fn info(message: String) -> Self {
        Action::Log { level: LogLevel::Info, message }
    }

    fn warn(message: String) -> Self {
        Action::Log { level: LogLevel::Warn, message }
    }
}

#[derive(Debug, Default)]
struct ObjectMeta {
    holders: HashSet<ClientId>,
    pins: u32,
    nested: Vec<ObjectId>,
    ready: bool,
    /// A copy on another node: where to pull it from.
    remote: Option<RemoteCopy>,
}

#[derive(Debug, Clone)]
struct RemoteCopy {
    node: NodeId,
    address: String,
    /// That node holds the copy for this one: release it when freed here.
    held: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TaskState {
    WaitingArgs,
    Ready,
    Running(WorkerId),
    /// Sent to another node, which runs it and reports back.
    Forwarded(NodeId),
}

#[derive(Debug)]
struct TaskEntry {
    spec: TaskSpec,
    holds: ResourceSet,
    placement: ResourceSet,
    missing_args: HashSet<ObjectId>,
    pinned: Vec<ObjectId>,
    retries_left: i32,
    state: TaskState,
    cancelled: bool,
    gpus: Vec<(usize, i64)>,
    /// The owner node that forwarded it here (it is never forwarded again).
    from_peer: Option<NodeId>,
}

#[derive(Debug)]
struct ShapeQueue {
    holds: ResourceSet,
    placement: ResourceSet,
    creation: bool,
    tasks: VecDeque<TaskId>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActorState {
    PendingCreation,
    Alive,
    Restarting,
    Dead,
}

impl ActorState {
    pub fn to_proto(self) -> oxray_proto::ActorState {
        match self {
            ActorState::PendingCreation => oxray_proto::ActorState::PendingCreation,
            ActorState::Alive => oxray_proto::ActorState::Alive,
            ActorState::Restarting => oxray_proto::ActorState::Restarting,
            ActorState::Dead => oxray_proto::ActorState::Dead,
        }
    }

    /// The state another node reported; `Unspecified` reads as pending.
    pub fn from_proto(state: oxray_proto::ActorState) -> Self {
        match state {
            oxray_proto::ActorState::Alive => ActorState::Alive,
            oxray_proto::ActorState::Restarting => ActorState::Restarting,
            oxray_proto::ActorState::Dead => ActorState::Dead,
            oxray_proto::ActorState::PendingCreation | oxray_proto::ActorState::Unspecified => {
                ActorState::PendingCreation
            }
        }
    }
}

#[derive(Debug)]
pub struct ActorEntry {
    pub id: ActorId,
    pub class_name: String,
    pub name: String,
    pub namespace: String,
    pub state: ActorState,
    pub worker: Option<WorkerId>,
    pub pid: u32,
    creation: TaskSpec,
    queue: VecDeque<TaskId>,
    inflight: Vec<TaskId>,
    pub num_restarts: i32,
    pub max_restarts: i32,
    pub max_task_retries: i32,
    pub death_cause: String,
    death_kind: SystemErrorKind,
    pub method_names: Vec<String>,
    no_restart: bool,
    /// GPUs and resources the live actor holds, returned when it dies.
    held: Option<(Vec<(usize, i64)>, ResourceSet)>,
    /// Constructor arguments, pinned until the actor is dead for good.
    arg_pins: Vec<ObjectId>,
    /// The node it lives on, when that is not this one.
    pub remote: Option<NodeId>,
    /// Known here only to route calls: created and restarted by another node.
    proxy: bool,
    /// The owner node this actor was created for, when it forwarded the creation here.
    pub hosted_for: Option<NodeId>,
}

#[derive(Debug, Clone, PartialEq)]
enum WorkerRole {
    Pool,
    Actor(ActorId),
}

#[derive(Debug)]
struct WorkerEntry {
    pid: u32,
    role: WorkerRole,
    tx: Option<AssignmentSender>,
    running: Option<TaskId>,
    /// An assignment made before the worker connected (actor creation).
    pending: Option<Assignment>,
    held_refs: HashSet<ObjectId>,
    label: String,
    /// The job whose task or actor runs there: its output goes to that driver.
    job_id: Option<JobId>,
    blocked: bool,
}

pub struct AgentConfig {
    pub node_id: NodeId,
    pub total: ResourceSet,
    pub num_gpus: usize,
    pub max_starting_workers: usize,
    pub worker_env: Vec<(String, String)>,
}

pub struct AgentState {
    pub node_id: NodeId,
    total: ResourceSet,
    available: ResourceSet,
    gpus: GpuSlots,
    pub store: ObjectStore,
    objects: HashMap<ObjectId, ObjectMeta>,
    tasks: HashMap<TaskId, TaskEntry>,
    /// Tasks ready to place, one FIFO per resource shape, so a shape that
    /// does not fit is skipped in O(1) however many tasks it has.
    ready: Vec<ShapeQueue>,
    arg_waiters: HashMap<ObjectId, Vec<TaskId>>,
    producer: HashMap<ObjectId, TaskId>,
    workers: HashMap<WorkerId, WorkerEntry>,
    idle: VecDeque<WorkerId>,
    starting_pool_workers: usize,
    max_starting: usize,
    pub actors: HashMap<ActorId, ActorEntry>,
    named_actors: HashMap<(String, String), ActorId>,
    functions: HashMap<Vec<u8>, Vec<u8>>,
    worker_env: Vec<(String, String)>,
    failed_worker_starts: u32,
    /// Arena views handed to each client and not yet released.
    views: HashMap<ClientId, HashMap<ObjectId, u32>>,
    actions: Vec<Action>,
    shutting_down: bool,
    /// This agent's address, given to other nodes as a source of objects.
    pub address: String,
    /// The other nodes, as the head last reported them.
    peers: HashMap<NodeId, PeerView>,
    /// Owner nodes with a link to this one (their tasks are never forwarded again).
    peer_clients: HashSet<NodeId>,
    /// Objects being copied in from another node.
    pulling: HashSet<ObjectId>,
    /// Functions already sent to each node.
    sent_functions: HashSet<(NodeId, Vec<u8>)>,
    /// Placement-group bundles held here: what each group took from `available`.
    bundles: HashMap<PlacementGroupId, ResourceSet>,
}

fn resources_of(map: &HashMap<String, f64>) -> Result<ResourceSet, AgentError> {
    Ok(ResourceSet::from_map(map)?)
}

/// The job a task belongs to (checked when the task was accepted).
fn job_of(spec: &TaskSpec) -> Option<JobId> {
    JobId::from_optional_bytes(&spec.job_id).ok().flatten()
}

fn location(id: ObjectId, place: ObjectPlace, size: usize, arena: &std::path::Path) -> ObjectLocation {
    let place = match place {
        ObjectPlace::Inline(data) => Place::InlineData((*data).clone()),
        ObjectPlace::Spilled(p) => Place::Path(p.to_string_lossy().into_owned()),
        ObjectPlace::Arena { offset, .. } => {
            Place::Arena(oxray_proto::ArenaRange { path: arena.to_string_lossy().into_owned(), offset: offset as u64 })
        }
    };
    ObjectLocation { object_id: id.to_vec(), place: Some(place), size: size as u64 }
}

impl AgentState {
    pub fn new(config: AgentConfig, store: ObjectStore) -> Self {
        AgentState {
            node_id: config.node_id,
            available: config.total.clone(),
            total: config.total,
            gpus: GpuSlots::new(config.num_gpus),
            store,
            objects: HashMap::new(),
            tasks: HashMap::new(),
            ready: Vec::new(),
            arg_waiters: HashMap::new(),
            producer: HashMap::new(),
            workers: HashMap::new(),
            idle: VecDeque::new(),
            starting_pool_workers: 0,
            max_starting: config.max_starting_workers.max(1),
            actors: HashMap::new(),
            named_actors: HashMap::new(),
            functions: HashMap::new(),
            worker_env: config.worker_env,
            failed_worker_starts: 0,
            views: HashMap::new(),
            actions: Vec::new(),
            shutting_down: false,
            address: String::new(),
            peers: HashMap::new(),
            peer_clients: HashSet::new(),
            pulling: HashSet::new(),
            sent_functions: HashSet::new(),
            bundles: HashMap::new(),
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

    // ---------------------------------------------------------------- objects

    /// Applies one client's reference changes: increfs now, decrefs after the
    /// caller has pinned whatever the same request needs.
    pub fn add_holders(&mut self, client: ClientId, ids: &[ObjectId]) {
        for id in ids {
            self.objects.entry(*id).or_default().holders.insert(client);
            if let Some(w) = self.workers.get_mut(&client.as_worker()) {
                w.held_refs.insert(*id);
            }
        }
    }

    pub fn remove_holders(&mut self, client: ClientId, ids: &[ObjectId]) {
        for id in ids {
            if let Some(meta) = self.objects.get_mut(id) {
                meta.holders.remove(&client);
            }
            if let Some(w) = self.workers.get_mut(&client.as_worker()) {
                w.held_refs.remove(id);
            }
            self.maybe_free(*id);
        }
    }

    fn pin(&mut self, id: ObjectId) {
        self.objects.entry(id).or_default().pins += 1;
    }

    fn unpin(&mut self, id: ObjectId) {
        if let Some(meta) = self.objects.get_mut(&id) {
            meta.pins = meta.pins.saturating_sub(1);
        }
        self.maybe_free(id);
    }

    fn maybe_free(&mut self, id: ObjectId) {
        let Some(meta) = self.objects.get(&id) else { return };
        if !meta.holders.is_empty() || meta.pins > 0 {
            return;
        }
        // A return object whose task is still queued or running stays until the
        // task ends, so its result is not written into a freed id.
        if !meta.ready && self.producer.get(&id).is_some_and(|t| self.tasks.contains_key(t)) {
            return;
        }
        let meta = self.objects.remove(&id).expect("checked above");
        self.store.free(&id);
        if let Some(copy) = meta.remote.filter(|c| c.held) {
            self.actions.push(Action::ReleaseRemote { node: copy.node, id });
        }
        self.producer.remove(&id);
        for nested in meta.nested {
            self.unpin(nested);
        }
    }

    /// Records a sealed object (inline bytes or a file already reserved) and
    /// wakes whatever was waiting for it.
    pub fn seal_object(&mut self, loc: &ObjectLocation, nested: &[ObjectId]) -> Result<(), AgentError> {
        let id = ObjectId::from_bytes(&loc.object_id)?;
        match &loc.place {
            Some(Place::InlineData(data)) => self.store.insert_inline(id, data.clone()),
            Some(Place::Path(_)) | Some(Place::Arena(_)) => {
                if !self.store.seal(&id) {
                    return Err(AgentError::NotReserved(id));
                }
            }
            None => {
                return Err(AgentError::Malformed("an object location needs inline data, a path or an arena range"));
            }
        }
        for n in nested {
            self.pin(*n);
        }
        let meta = self.objects.entry(id).or_default();
        meta.nested.extend_from_slice(nested);
        meta.ready = true;
        self.on_object_ready(id);
        Ok(())
    }

    fn store_error(&mut self, id: ObjectId, kind: SystemErrorKind, message: &str) {
        self.store.insert_inline(id, system_error_object(kind, message));
        let meta = self.objects.entry(id).or_default();
        meta.ready = true;
        self.on_object_ready(id);
    }

    fn on_object_ready(&mut self, id: ObjectId) {
        let Some(waiting) = self.arg_waiters.remove(&id) else { return };
        let mut touched_actors = Vec::new();
        for task_id in waiting {
            let Some(task) = self.tasks.get_mut(&task_id) else { continue };
            task.missing_args.remove(&id);
            if !task.missing_args.is_empty() {
                continue;
            }
            if task.spec.kind == TaskKind::ActorTask as i32 {
                touched_actors.push(ActorId::from_bytes(&task.spec.actor_id).unwrap_or_default());
            } else if task.state == TaskState::WaitingArgs {
                task.state = TaskState::Ready;
                self.push_ready(task_id);
            }
        }
        for actor in touched_actors {
            self.dispatch_actor(actor);
        }
        // Freed while nobody held it? (e.g. a return whose ref was dropped early)
        self.maybe_free(id);
    }

    /// Ready here or on another node.
    pub fn is_ready(&self, id: &ObjectId) -> bool {
        self.objects.get(id).is_some_and(|m| m.ready && (m.remote.is_some() || self.store.contains_sealed(id)))
    }

    /// Ready, with its bytes in this node's store.
    pub fn is_local(&self, id: &ObjectId) -> bool {
        self.objects.get(id).is_some_and(|m| m.ready) && self.store.contains_sealed(id)
    }

    /// Arena views a client dropped: their ranges may be reused once freed.
    pub fn release_views(&mut self, client: ClientId, ids: &[ObjectId]) {
        for id in ids {
            if let Some(views) = self.views.get_mut(&client)
                && let Some(n) = views.get_mut(id)
            {
                *n -= 1;
                if *n == 0 {
                    views.remove(id);
                }
                self.store.remove_reader(id);
            }
        }
    }

    /// The object's location for `reader`, or an object-lost error object when
    /// it is gone. An arena location counts as a view until `reader` releases it.
    pub fn locate(&mut self, id: ObjectId, reader: ClientId) -> ObjectLocation {
        let arena = self.store.arena_path().to_path_buf();
        match self.store.lookup(&id) {
            Some((place, size)) => {
                if matches!(place, ObjectPlace::Arena { .. }) {
                    self.store.add_reader(&id);
                    *self.views.entry(reader).or_default().entry(id).or_insert(0) += 1;
                }
                location(id, place, size, &arena)
            }
            None => {
                let blob = system_error_object(
                    SystemErrorKind::ObjectLost,
                    &format!(
                        "Object {} is lost: no reference kept it alive on node {}, or it was freed",
                        id.hex(),
                        self.node_id.hex()
                    ),
                );
                let size = blob.len();
                location(id, ObjectPlace::Inline(std::sync::Arc::new(blob)), size, &arena)
            }
        }
    }

    /// Whether a get/wait on `id` returns now: it is ready, or unknown (and so
    /// comes back as an object-lost error rather than waiting forever).
    pub fn is_settled(&self, id: &ObjectId) -> bool {
        self.is_ready(id) || !self.is_known(id)
    }

    /// Whether `id` will ever become ready: known to the store, or produced by a live task.
    pub fn is_known(&self, id: &ObjectId) -> bool {
        self.objects.contains_key(id)
    }

    /// Where a writer should put a new `size`-byte object.
    pub fn reserve_object(&mut self, id: ObjectId, size: usize) -> Result<ObjectLocation, AgentError> {
        let (place, spills) = self.store.reserve(id, size).map_err(|source| AgentError::StoreFull { size, source })?;
        for s in spills {
            self.actions.push(Action::info(format!(
                "spilled object {} ({} MiB) to {}",
                s.object_id.hex(),
                s.size >> 20,
                s.to.display()
            )));
        }
        self.objects.entry(id).or_default();
        let arena = self.store.arena_path().to_path_buf();
        Ok(location(id, place, size, &arena))
    }

    // ------------------------------------------------------------------ tasks

    pub fn register_function(&mut self, id: Vec<u8>, data: Vec<u8>) {
        self.functions.entry(id).or_insert(data);
    }

    pub fn function(&self, id: &[u8]) -> Option<Vec<u8>> {
        self.functions.get(id).cloned()
    }

    fn infeasible_message(&self, what: &str, request: &ResourceSet) -> Option<String> {
        // Placement-group resources appear once the group is created: wait for them.
        if self.feasible_anywhere(request) || request.names().any(|n| n.contains("_group_")) {
            return None;
        }
        let missing = self.total.shortfall(request);
        let detail: Vec<String> =
            missing.iter().map(|(name, want, have)| format!("{name}: wants {want}, cluster has {have}")).collect();
        Some(format!(
            "{what} requires {request} but no node in the cluster can ever provide it ({}). The cluster's total resources are {}.",
            detail.join("; "),
            self.total
        ))
    }

    /// Accepts a normal task or an actor creation. An impossible request fails
    /// its returns at once (never waits forever) and the message is returned.
    pub fn submit(&mut self, client: ClientId, spec: TaskSpec) -> Result<Option<String>, AgentError> {
        let task_id = TaskId::from_bytes(&spec.task_id)?;
        let holds = resources_of(&spec.resources)?;
        let placement =
            if spec.placement_resources.is_empty() { holds.clone() } else { resources_of(&spec.placement_resources)? };
        let return_ids = spec.return_ids.iter().map(|r| ObjectId::from_bytes(r)).collect::<Result<Vec<_>, _>>()?;
        self.add_holders(client, &return_ids);
        for r in &return_ids {
            self.producer.insert(*r, task_id);
        }
        let what = if spec.kind == TaskKind::ActorCreation as i32 {
            format!("Actor {}", spec.name)
        } else {
            format!("Task {}", spec.name)
        };
        if let Some(message) = self.infeasible_message(&what, &placement) {
            let kind = if spec.kind == TaskKind::ActorCreation as i32 {
                SystemErrorKind::ActorUnschedulable
            } else {
                SystemErrorKind::TaskUnschedulable
            };
            if let Some(actor) = ActorId::from_bytes(&spec.actor_id).ok().and_then(|a| self.actors.get_mut(&a)) {
                actor.state = ActorState::Dead;
                actor.death_cause = message.clone();
                actor.death_kind = kind;
                let id = actor.id;
                self.actions.push(Action::ActorChanged(id));
            }
            for r in return_ids {
                self.store_error(r, kind, &message);
            }
            self.actions.push(Action::warn(message.clone()));
            return Ok(Some(message));
        }
        let retries = spec.max_retries;
        self.insert_task(task_id, spec, holds, placement, retries)?;
        Ok(None)
    }

    fn insert_task(
        &mut self,
        task_id: TaskId,
        spec: TaskSpec,
        holds: ResourceSet,
        placement: ResourceSet,
        retries_left: i32,
    ) -> Result<(), AgentError> {
        JobId::from_optional_bytes(&spec.job_id)?;
        let mut pinned = Vec::new();
        let mut missing = HashSet::new();
        for arg in &spec.args {
            if let Some(Kind::ObjectId(raw)) = &arg.kind {
                let id = ObjectId::from_bytes(raw)?;
                pinned.push(id);
                if !self.is_ready(&id) {
                    missing.insert(id);
                }
            }
        }
        for raw in &spec.nested_refs {
            pinned.push(ObjectId::from_bytes(raw)?);
        }
        for id in &pinned {
            self.pin(*id);
        }
        for id in &missing {
            self.arg_waiters.entry(*id).or_default().push(task_id);
        }
        let is_actor_task = spec.kind == TaskKind::ActorTask as i32;
        let state = if missing.is_empty() && !is_actor_task { TaskState::Ready } else { TaskState::WaitingArgs };
        let entry = TaskEntry {
            spec,
            holds,
            placement,
            missing_args: missing,
            pinned,
            retries_left,
            state,
            cancelled: false,
            gpus: Vec::new(),
            from_peer: None,
        };
        self.tasks.insert(task_id, entry);
        if state == TaskState::Ready {
            self.push_ready(task_id);
        }
        Ok(())
    }

    /// Ends a task for good: stores errors in returns that have no value, and unpins its arguments.
    fn finish_task(&mut self, task_id: TaskId, error: Option<(SystemErrorKind, String)>) {
        let Some(task) = self.tasks.remove(&task_id) else { return };
        if let Some((kind, message)) = error {
            for raw in &task.spec.return_ids {
                if let Ok(r) = ObjectId::from_bytes(raw) {
                    self.store_error(r, kind, &message);
                }
            }
        }
        for r in task.spec.return_ids.iter().filter_map(|r| ObjectId::from_bytes(r).ok()) {
            self.producer.remove(&r);
            self.maybe_free(r);
        }
        for id in task.pinned {
            self.unpin(id);
        }
    }

    fn assignment_for(&mut self, task_id: TaskId, worker: WorkerId) -> Assignment {
        let task = &self.tasks[&task_id];
        let ref_args: Vec<ObjectId> = task
            .spec
            .args
            .iter()
            .filter_map(|a| match &a.kind {
                Some(Kind::ObjectId(raw)) => ObjectId::from_bytes(raw).ok(),
                _ => None,
            })
            .collect();
        let cuda = task.gpus.iter().map(|(i, _)| i.to_string()).collect::<Vec<_>>().join(",");
        let spec = task.spec.clone();
        let resolved_args = ref_args.into_iter().map(|id| self.locate(id, worker.into())).collect();
        Assignment { task: Some(spec), resolved_args, cuda_visible_devices: cuda, exit: false }
    }

    fn push_ready(&mut self, task_id: TaskId) {
        let Some(task) = self.tasks.get(&task_id) else { return };
        let creation = task.spec.kind == TaskKind::ActorCreation as i32;
        match self
            .ready
            .iter_mut()
            .find(|q| q.creation == creation && q.holds == task.holds && q.placement == task.placement)
        {
            Some(q) => q.tasks.push_back(task_id),
            None => self.ready.push(ShapeQueue {
                holds: task.holds.clone(),
                placement: task.placement.clone(),
                creation,
                tasks: VecDeque::from([task_id]),
            }),
        }
    }

    /// Places ready tasks on idle workers while resources allow, and asks for
    /// new workers when tasks fit but no worker is free.
    pub fn schedule(&mut self) {
        if self.shutting_down {
            return;
        }
        let mut scratch = self.available.clone();
        let mut wanted_workers = 0usize;
        for qi in 0..self.ready.len() {
            while let Some(&task_id) = self.ready[qi].tasks.front() {
                if self.tasks.get(&task_id).is_none_or(|t| t.state != TaskState::Ready) {
                    self.ready[qi].tasks.pop_front();
                    continue;
                }
                let q = &self.ready[qi];
                if !self.available.fits(&q.placement) || !self.available.fits(&q.holds) {
                    // Not here now: another node with room, or one that can run it at all.
                    let placement = q.placement.clone();
                    match self.pick_peer(task_id, &placement) {
                        Some(node) => {
                            self.ready[qi].tasks.pop_front();
                            self.forward_task(task_id, node);
                            continue;
                        }
                        None => break,
                    }
                }
                let remote_args = self.nonlocal_args(task_id);
                if !remote_args.is_empty() {
                    self.ready[qi].tasks.pop_front();
                    self.wait_for_copies(task_id, remote_args);
                    continue;
                }
                let q = &self.ready[qi];
                let holds = q.holds.clone();
                if q.creation {
                    let Some(gpus) = self.gpus.acquire(crate::resources::gpu_amount(&holds)) else { break };
                    self.ready[qi].tasks.pop_front();
                    self.start_actor_worker(task_id, gpus);
                    scratch.subtract(&holds);
                    continue;
                }
                if self.idle.is_empty() {
                    // Count how many more of this shape could run, to start that many workers.
                    let queued = q.tasks.len();
                    let mut n = 0;
                    while n < queued && scratch.fits(&holds) {
                        scratch.subtract(&holds);
                        n += 1;
                        if holds.is_empty() {
                            n = queued;
                        }
                    }
                    wanted_workers += n;
                    break;
                }
                let Some(gpus) = self.gpus.acquire(crate::resources::gpu_amount(&holds)) else { break };
                let worker_id = self.idle.pop_front().expect("checked non-empty");
                self.ready[qi].tasks.pop_front();
                self.run_on(worker_id, task_id, gpus);
                scratch.subtract(&holds);
            }
        }
        self.ready.retain(|q| !q.tasks.is_empty());
        self.available.retain_in(&self.total);
        let to_start = wanted_workers.min(self.max_starting).saturating_sub(self.starting_pool_workers);
        for _ in 0..to_start {
            self.spawn_worker(WorkerRole::Pool, "worker".into(), None, Vec::new());
        }
    }

    fn spawn_worker(
        &mut self,
        role: WorkerRole,
        label: String,
        job_id: Option<JobId>,
        extra_env: Vec<(String, String)>,
    ) -> WorkerId {
        let worker_id = WorkerId::random();
        if role == WorkerRole::Pool {
            self.starting_pool_workers += 1;
        }
        let mut env = self.worker_env.clone();
        env.extend(extra_env);
        self.workers.insert(
            worker_id,
            WorkerEntry {
                pid: 0,
                role,
                tx: None,
                running: None,
                pending: None,
                held_refs: HashSet::new(),
                label,
                job_id,
                blocked: false,
            },
        );
        self.actions.push(Action::SpawnWorker { worker_id, env });
        worker_id
    }

    fn run_on(&mut self, worker_id: WorkerId, task_id: TaskId, gpus: Vec<(usize, i64)>) {
        let task = self.tasks.get_mut(&task_id).expect("task exists");
        self.available.subtract(&task.holds);
        task.gpus = gpus;
        task.state = TaskState::Running(worker_id);
        let label = task.spec.name.clone();
        let job_id = job_of(&task.spec);
        let assignment = self.assignment_for(task_id, worker_id);
        let worker = self.workers.get_mut(&worker_id).expect("idle worker exists");
        worker.running = Some(task_id);
        worker.label = label;
        worker.job_id = job_id;
        if let Some(tx) = &worker.tx {
            let _ = tx.send(Ok(assignment));
        }
    }

    pub fn set_worker_pid(&mut self, worker_id: WorkerId, pid: u32) {
        if let Some(w) = self.workers.get_mut(&worker_id) {
            w.pid = pid;
        }
    }

    /// The name, pid and job of what runs on a worker, for its output's prefix.
    pub fn worker_label(&self, worker_id: &WorkerId) -> Option<(String, u32, Option<JobId>)> {
        self.workers.get(worker_id).map(|w| (w.label.clone(), w.pid, w.job_id))
    }

    /// A worker process opened its assignment stream.
    pub fn worker_connected(&mut self, worker_id: WorkerId, tx: AssignmentSender) -> Result<(), AgentError> {
        let worker = self.workers.get_mut(&worker_id).ok_or(AgentError::UnknownWorker(worker_id))?;
        self.failed_worker_starts = 0;
        if let WorkerRole::Actor(actor_id) = worker.role
            && self.actors.get(&actor_id).is_none_or(|a| a.state == ActorState::Dead || a.worker != Some(worker_id))
        {
            // The actor was killed while this worker was starting.
            worker.pending = None;
            self.actions.push(Action::Signal { pid: worker.pid, signal: libc::SIGKILL });
            return Ok(());
        }
        if let Some(pending) = worker.pending.take() {
            let _ = tx.send(Ok(pending));
        }
        let is_pool = worker.role == WorkerRole::Pool;
        worker.tx = Some(tx);
        if is_pool {
            self.starting_pool_workers = self.starting_pool_workers.saturating_sub(1);
            self.idle.push_back(worker_id);
            self.schedule();
        }
        Ok(())
    }

    /// Release a blocked worker's resources while it waits in `get`, so nested
    /// tasks can use them (as Ray does); `false` takes them back.
    pub fn set_worker_blocked(&mut self, worker_id: WorkerId, blocked: bool) {
        let Some(worker) = self.workers.get_mut(&worker_id) else { return };
        if worker.blocked == blocked {
            return;
        }
        let Some(task_id) = worker.running else { return };
        let Some(task) = self.tasks.get(&task_id) else { return };
        worker.blocked = blocked;
        if blocked {
            self.available.add(&task.holds);
            self.schedule();
        } else {
            self.available.subtract(&task.holds);
        }
    }

    /// A worker finished a task: record its results and free the worker.
    pub fn task_done(
        &mut self,
        worker_id: WorkerId,
        task_id: TaskId,
        done: oxray_proto::TaskDoneRequest,
        nested: &[ObjectId],
    ) -> Result<(), AgentError> {
        let oxray_proto::TaskDoneRequest { returns, application_error, method_names, error_text, .. } = done;
        let returns = &returns[..];
        let current = self.tasks.get(&task_id).is_some_and(|t| match t.state {
            TaskState::Running(w) => w == worker_id,
            _ => false,
        });
        let Some(task) = self.tasks.get(&task_id).filter(|_| current) else {
            // Stale: the task already finished (cancelled) or was retried elsewhere
            // after this worker was given up for dead. Drop its unsealed results.
            for loc in returns {
                if let Ok(id) = ObjectId::from_bytes(&loc.object_id) {
                    self.store.discard_unsealed(&id);
                }
            }
            return Ok(());
        };
        let kind = task.spec.kind;
        let cancelled = task.cancelled;
        let retry_app_error = application_error && task.spec.retry_exceptions && task.retries_left != 0 && !cancelled;
        if kind == TaskKind::ActorCreation as i32 {
            self.creation_done(worker_id, task_id, application_error, method_names, error_text);
            return Ok(());
        }
        if kind == TaskKind::Normal as i32 {
            self.release_task_resources(task_id);
            if let Some(worker) = self.workers.get_mut(&worker_id) {
                // The label stays: output read after the task ended still names it.
                worker.running = None;
                if worker.blocked {
                    worker.blocked = false;
                }
                self.idle.push_back(worker_id);
            }
        } else if let Some(actor) = self.actor_of_task(task_id) {
            actor.inflight.retain(|t| *t != task_id);
        }
        if retry_app_error {
            for loc in returns {
                if let Ok(id) = ObjectId::from_bytes(&loc.object_id) {
                    self.store.free(&id);
                }
            }
            self.retry(task_id);
        } else if cancelled {
            self.finish_task(task_id, Some((SystemErrorKind::TaskCancelled, "This task was cancelled".into())));
        } else {
            for loc in returns {
                // Each return pins every nested ref: which return holds which is not
                // reported, and dropping one return must not free refs inside another.
                self.seal_object(loc, nested)?;
            }
            self.finish_task(task_id, None);
        }
        self.schedule();
        Ok(())
    }

    fn release_task_resources(&mut self, task_id: TaskId) {
        let blocked = match self.tasks.get(&task_id).map(|t| t.state) {
            Some(TaskState::Running(worker)) => self.workers.get(&worker).is_some_and(|w| w.blocked),
            _ => false,
        };
        self.release_task_resources_as(task_id, blocked);
    }

    /// `blocked`: the worker was waiting in get(), so its CPUs are already lent back.
    fn release_task_resources_as(&mut self, task_id: TaskId, blocked: bool) {
        let Some(task) = self.tasks.get_mut(&task_id) else { return };
        if let TaskState::Running(_) = task.state {
            if !blocked {
                self.available.add(&task.holds);
            }
            let gpus = std::mem::take(&mut task.gpus);
            self.gpus.release(&gpus);
        }
    }

    fn actor_of_task(&mut self, task_id: TaskId) -> Option<&mut ActorEntry> {
        let actor_id = ActorId::from_bytes(&self.tasks.get(&task_id)?.spec.actor_id).ok()?;
        self.actors.get_mut(&actor_id)
    }

    fn retry(&mut self, task_id: TaskId) {
        let Some(task) = self.tasks.get_mut(&task_id) else { return };
        if task.retries_left > 0 {
            task.retries_left -= 1;
        }
        task.state = TaskState::Ready;
        if task.spec.kind == TaskKind::ActorTask as i32 {
            task.state = TaskState::WaitingArgs;
            let actor_id = ActorId::from_bytes(&task.spec.actor_id).unwrap_or_default();
            if let Some(actor) = self.actors.get_mut(&actor_id) {
                actor.queue.push_front(task_id);
            }
        } else {
            self.push_ready(task_id);
        }
    }

    // ---------------------------------------------------------------- actors

    pub fn register_actor(&mut self, spec: &TaskSpec, get_if_exists: bool) -> Result<(ActorId, bool), AgentError> {
        let actor_id = ActorId::from_bytes(&spec.actor_id)?;
        if !spec.actor_name.is_empty() {
            let key = (spec.namespace.clone(), spec.actor_name.clone());
            if let Some(existing) = self.named_actors.get(&key) {
                let alive = self.actors.get(existing).is_some_and(|a| a.state != ActorState::Dead);
                if alive {
                    if get_if_exists {
                        return Ok((*existing, true));
                    }
                    return Err(AgentError::NameTaken {
                        name: spec.actor_name.clone(),
                        namespace: spec.namespace.clone(),
                    });
                }
            }
            self.named_actors.insert(key, actor_id);
        }
        self.actors.insert(actor_id, ActorEntry::new(actor_id, spec));
        Ok((actor_id, false))
    }

    pub fn named_actor(&self, namespace: &str, name: &str) -> Option<&ActorEntry> {
        let id = self.named_actors.get(&(namespace.to_string(), name.to_string()))?;
        self.actors.get(id).filter(|a| a.state != ActorState::Dead)
    }

    fn start_actor_worker(&mut self, task_id: TaskId, gpus: Vec<(usize, i64)>) {
        let task = self.tasks.get_mut(&task_id).expect("creation task exists");
        self.available.subtract(&task.holds);
        task.gpus = gpus;
        let label = task.spec.name.clone();
        let job_id = job_of(&task.spec);
        let actor_id = ActorId::from_bytes(&task.spec.actor_id).unwrap_or_default();
        let env: Vec<(String, String)> = task.spec.env_vars.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        let worker_id = self.spawn_worker(WorkerRole::Actor(actor_id), label, job_id, env);
        self.tasks.get_mut(&task_id).expect("exists").state = TaskState::Running(worker_id);
        let assignment = self.assignment_for(task_id, worker_id);
        let worker = self.workers.get_mut(&worker_id).expect("just spawned");
        worker.running = Some(task_id);
        worker.pending = Some(assignment);
        if let Some(actor) = self.actors.get_mut(&actor_id) {
            actor.worker = Some(worker_id);
        }
    }

    fn creation_done(
        &mut self,
        worker_id: WorkerId,
        task_id: TaskId,
        failed: bool,
        method_names: Vec<String>,
        error_text: String,
    ) {
        let Some(task) = self.tasks.get(&task_id) else { return };
        let actor_id = ActorId::from_bytes(&task.spec.actor_id).unwrap_or_default();
        let pid = self.workers.get(&worker_id).map(|w| w.pid).unwrap_or(0);
        if let Some(w) = self.workers.get_mut(&worker_id) {
            w.running = None;
        }
        // The actor keeps its resources (and GPUs) until it dies: move them off the task.
        let gpus = self.tasks.get_mut(&task_id).map(|t| std::mem::take(&mut t.gpus)).unwrap_or_default();
        let holds = self.tasks.get(&task_id).map(|t| t.holds.clone()).unwrap_or_default();
        // Constructor arguments stay pinned for the actor's life: a restart re-runs it with them.
        let pinned = self.tasks.get_mut(&task_id).map(|t| std::mem::take(&mut t.pinned)).unwrap_or_default();
        self.finish_task(task_id, None);
        let Some(actor) = self.actors.get_mut(&actor_id) else { return };
        let duplicate_pins = if actor.arg_pins.is_empty() {
            actor.arg_pins = pinned;
            Vec::new()
        } else {
            pinned
        };
        actor.held_gpus_and_resources(gpus, holds);
        let killed_meanwhile = actor.state == ActorState::Dead;
        for id in duplicate_pins {
            self.unpin(id);
        }
        if killed_meanwhile {
            // Killed before its constructor finished: don't bring it back.
            self.release_actor(actor_id);
            if let Some(w) = self.workers.get(&worker_id) {
                self.actions.push(Action::Signal { pid: w.pid, signal: libc::SIGKILL });
            }
            return;
        }
        let Some(actor) = self.actors.get_mut(&actor_id) else { return };
        if failed {
            actor.death_cause =
                format!("The actor {} died because its constructor raised:\n{error_text}", actor.class_name);
            actor.death_kind = SystemErrorKind::ActorDied;
            actor.no_restart = true;
            actor.state = ActorState::Dead;
            self.actions.push(Action::ActorChanged(actor_id));
            self.fail_actor_queue(actor_id);
            self.release_actor(actor_id);
            if let Some(w) = self.workers.get(&worker_id) {
                self.actions.push(Action::Signal { pid: w.pid, signal: libc::SIGKILL });
            }
            return;
        }
        actor.state = ActorState::Alive;
        actor.pid = pid;
        actor.method_names = method_names;
        self.actions.push(Action::ActorChanged(actor_id));
        self.dispatch_actor(actor_id);
    }

    pub fn submit_actor_task(&mut self, client: ClientId, spec: TaskSpec) -> Result<(), AgentError> {
        let actor_id = ActorId::from_bytes(&spec.actor_id)?;
        let task_id = TaskId::from_bytes(&spec.task_id)?;
        let return_ids = spec.return_ids.iter().map(|r| ObjectId::from_bytes(r)).collect::<Result<Vec<_>, _>>()?;
        self.add_holders(client, &return_ids);
        for r in &return_ids {
            self.producer.insert(*r, task_id);
        }
        let Some(actor) = self.actors.get(&actor_id) else {
            for r in return_ids {
                self.store_error(r, SystemErrorKind::ActorDied, "The actor is unknown to this cluster");
            }
            return Ok(());
        };
        if actor.state == ActorState::Dead {
            let (kind, cause) = (actor.death_kind, actor.death_cause.clone());
            for r in return_ids {
                self.store_error(r, kind, &cause);
            }
            return Ok(());
        }
        let retries = actor.max_task_retries;
        self.insert_task(task_id, spec, ResourceSet::new(), ResourceSet::new(), retries)?;
        self.actors.get_mut(&actor_id).expect("checked").queue.push_back(task_id);
        self.dispatch_actor(actor_id);
        Ok(())
    }

    /// Sends queued calls to a live actor: each caller's calls in the order it
    /// made them, so a call waiting for its arguments holds back only later calls
    /// from the same caller (as in Ray), never other callers'.
    fn dispatch_actor(&mut self, actor_id: ActorId) {
        let Some(actor) = self.actors.get(&actor_id) else { return };
        // Calls to an actor on another node go there as soon as their arguments
        // are ready anywhere; that node queues them until the actor is alive.
        let remote = actor.remote.filter(|_| actor.state != ActorState::Dead);
        if actor.state != ActorState::Alive && remote.is_none() {
            return;
        }
        let worker_id = match (remote, actor.worker) {
            (Some(_), _) => None,
            (None, Some(w)) => Some(w),
            (None, None) => return,
        };
        let mut waiting_callers: HashSet<Vec<u8>> = HashSet::new();
        let mut ready = Vec::new();
        let mut gone = Vec::new();
        let mut to_copy = Vec::new();
        for &task_id in &actor.queue {
            let Some(task) = self.tasks.get(&task_id) else {
                gone.push(task_id);
                continue;
            };
            if waiting_callers.contains(&task.spec.owner_id) {
                continue;
            }
            let copies =
                if remote.is_none() && task.missing_args.is_empty() { self.nonlocal_args(task_id) } else { Vec::new() };
            if task.missing_args.is_empty() && copies.is_empty() {
                ready.push(task_id);
            } else {
                waiting_callers.insert(task.spec.owner_id.clone());
                if !copies.is_empty() {
                    to_copy.push((task_id, copies));
                }
            }
        }
        for (task_id, copies) in to_copy {
            self.wait_for_copies(task_id, copies);
        }
        if ready.is_empty() && gone.is_empty() {
            return;
        }
        let actor = self.actors.get_mut(&actor_id).expect("exists");
        let taken: HashSet<TaskId> = ready.iter().chain(&gone).copied().collect();
        actor.queue.retain(|t| !taken.contains(t));
        if let Some(node) = remote {
            for task_id in ready {
                self.actors.get_mut(&actor_id).expect("exists").inflight.push(task_id);
                self.forward_task(task_id, node);
            }
            return;
        }
        let worker_id = worker_id.expect("a local actor has a worker");
        for task_id in ready {
            let assignment = self.assignment_for(task_id, worker_id);
            self.tasks.get_mut(&task_id).expect("exists").state = TaskState::Running(worker_id);
            self.actors.get_mut(&actor_id).expect("exists").inflight.push(task_id);
            if let Some(tx) = self.workers.get(&worker_id).and_then(|w| w.tx.as_ref()) {
                let _ = tx.send(Ok(assignment));
            }
        }
    }

    fn fail_actor_queue(&mut self, actor_id: ActorId) {
        let Some(actor) = self.actors.get_mut(&actor_id) else { return };
        let pending: Vec<TaskId> = actor.queue.drain(..).chain(actor.inflight.drain(..)).collect();
        let (kind, cause) = (actor.death_kind, actor.death_cause.clone());
        for task_id in pending {
            self.finish_task(task_id, Some((kind, cause.clone())));
        }
    }

    fn release_actor(&mut self, actor_id: ActorId) {
        let Some(actor) = self.actors.get_mut(&actor_id) else { return };
        let pins = if actor.state == ActorState::Dead { std::mem::take(&mut actor.arg_pins) } else { Vec::new() };
        let (gpus, holds) = actor.take_held();
        for id in pins {
            self.unpin(id);
        }
        let Some(actor) = self.actors.get_mut(&actor_id) else { return };
        self.gpus.release(&gpus);
        self.available.add(&holds);
        if !actor.name.is_empty() && actor.state == ActorState::Dead {
            let key = (actor.namespace.clone(), actor.name.clone());
            if self.named_actors.get(&key) == Some(&actor_id) {
                self.named_actors.remove(&key);
            }
        }
        self.schedule();
    }

    pub fn kill_actor(&mut self, actor_id: ActorId, no_restart: bool) -> Result<(), AgentError> {
        let actor = self.actors.get_mut(&actor_id).ok_or(AgentError::UnknownActor(actor_id))?;
        if no_restart {
            actor.no_restart = true;
            actor.death_cause = format!("The actor {} was killed by ray.kill()", actor.class_name);
        }
        if let Some(node) = actor.remote.filter(|_| actor.state != ActorState::Dead) {
            self.actions.push(Action::PeerKillActor { node, actor_id, no_restart });
            return Ok(());
        }
        match actor.worker.and_then(|w| self.workers.get(&w)) {
            Some(w) if w.pid != 0 => self.actions.push(Action::Signal { pid: w.pid, signal: libc::SIGKILL }),
            _ => {
                if actor.state != ActorState::Dead {
                    actor.state = ActorState::Dead;
                    if actor.death_cause.is_empty() {
                        actor.death_cause = format!("The actor {} was killed before it started", actor.class_name);
                    }
                    let creation = TaskId::from_bytes(&actor.creation.task_id).unwrap_or_default();
                    self.actions.push(Action::ActorChanged(actor_id));
                    // Its constructor must never run now: drop the creation task and
                    // whatever it held (a worker still starting is killed on connect).
                    self.release_task_resources(creation);
                    self.finish_task(creation, None);
                    self.fail_actor_queue(actor_id);
                    self.release_actor(actor_id);
                }
            }
        }
        Ok(())
    }

    // --------------------------------------------------------------- failures

    /// A worker process exited. Retries or fails what it was running, and
    /// restarts or buries its actor.
    pub fn worker_exited(&mut self, worker_id: WorkerId, status: String) {
        let Some(worker) = self.workers.remove(&worker_id) else { return };
        self.idle.retain(|w| *w != worker_id);
        if let Some(views) = self.views.remove(&worker_id.into()) {
            for (id, n) in views {
                for _ in 0..n {
                    self.store.remove_reader(&id);
                }
            }
        }
        let held: Vec<ObjectId> = worker.held_refs.iter().copied().collect();
        for id in held {
            if let Some(meta) = self.objects.get_mut(&id) {
                meta.holders.remove(&worker_id.into());
            }
            self.maybe_free(id);
        }
        if worker.tx.is_none() && !self.shutting_down {
            if worker.role == WorkerRole::Pool {
                self.starting_pool_workers = self.starting_pool_workers.saturating_sub(1);
            }
            self.failed_worker_starts += 1;
            if self.failed_worker_starts >= 3 {
                self.failed_worker_starts = 0;
                self.fail_all_ready(&format!(
                    "Worker processes keep exiting before they start ({status}); see the worker logs in the session directory"
                ));
            }
        }
        match worker.role {
            WorkerRole::Pool => {
                if let Some(task_id) = worker.running {
                    // The worker entry is gone: pass on whether it had lent its CPUs back.
                    self.release_task_resources_as(task_id, worker.blocked);
                    self.after_crash(task_id, worker.pid, &status);
                }
            }
            WorkerRole::Actor(actor_id) => {
                self.actor_worker_exited(actor_id, worker_id, worker.pid, worker.blocked, &status)
            }
        }
        self.schedule();
    }

    fn after_crash(&mut self, task_id: TaskId, pid: u32, status: &str) {
        let Some(task) = self.tasks.get(&task_id) else { return };
        if task.cancelled {
            self.finish_task(task_id, Some((SystemErrorKind::TaskCancelled, "This task was cancelled".into())));
        } else if task.retries_left != 0 && !self.shutting_down {
            let name = task.spec.name.clone();
            self.actions.push(Action::warn(format!("task {name} lost its worker (pid={pid}, {status}); retrying")));
            self.retry(task_id);
        } else {
            let message = format!(
                "The worker running task {} (pid={pid}) died unexpectedly ({status}), and the task has no retries left",
                task.spec.name
            );
            self.finish_task(task_id, Some((SystemErrorKind::WorkerCrashed, message)));
        }
    }

    fn actor_worker_exited(
        &mut self,
        actor_id: ActorId,
        worker_id: WorkerId,
        pid: u32,
        was_blocked: bool,
        status: &str,
    ) {
        let Some(actor) = self.actors.get_mut(&actor_id) else { return };
        if actor.worker != Some(worker_id) {
            return;
        }
        actor.worker = None;
        if actor.state == ActorState::Dead {
            return;
        }
        let can_restart = !actor.no_restart
            && !self.shutting_down
            && (actor.max_restarts < 0 || actor.num_restarts < actor.max_restarts);
        if actor.death_cause.is_empty() || !actor.no_restart {
            actor.death_cause = format!(
                "The actor {} (pid={pid}) died unexpectedly ({status}) and was restarted {} of {} allowed times",
                actor.class_name, actor.num_restarts, actor.max_restarts
            );
        }
        actor.death_kind = SystemErrorKind::ActorDied;
        // Calls that were running: retried if max_task_retries allows, else failed.
        let inflight: Vec<TaskId> = actor.inflight.drain(..).collect();
        let cause = actor.death_cause.clone();
        let mut retry_ids = Vec::new();
        for task_id in inflight {
            let retry = can_restart && self.tasks.get(&task_id).is_some_and(|t| t.retries_left != 0);
            if retry {
                retry_ids.push(task_id);
            } else {
                self.finish_task(task_id, Some((SystemErrorKind::ActorDied, cause.clone())));
            }
        }
        for task_id in retry_ids.into_iter().rev() {
            self.retry(task_id);
        }
        // A creation task still running on the dead worker is finished here too.
        let creation_id = TaskId::from_bytes(&self.actors[&actor_id].creation.task_id).unwrap_or_default();
        self.release_task_resources_as(creation_id, was_blocked);
        // Its constructor's arguments stay pinned (by the actor) for a restart.
        self.settle_creation(actor_id);
        let actor = self.actors.get_mut(&actor_id).expect("exists");
        if can_restart {
            actor.num_restarts += 1;
            actor.state = ActorState::Restarting;
            self.actions.push(Action::ActorChanged(actor_id));
            let (gpus, holds) = actor.take_held();
            let spec = actor.creation.clone();
            self.gpus.release(&gpus);
            self.available.add(&holds);
            self.actions.push(Action::warn(format!("restarting actor {} after its worker died ({status})", spec.name)));
            self.restart_creation(actor_id);
        } else {
            actor.state = ActorState::Dead;
            self.actions.push(Action::ActorChanged(actor_id));
            self.fail_actor_queue(actor_id);
            self.release_actor(actor_id);
        }
    }

    /// Queues the actor's constructor again (a restart), on this node or, when
    /// it was created for another node, here again.
    fn restart_creation(&mut self, actor_id: ActorId) {
        let Some(actor) = self.actors.get_mut(&actor_id) else { return };
        let mut fresh = actor.creation.clone();
        fresh.task_id = TaskId::random().to_vec();
        actor.creation = fresh.clone();
        let hosted_for = actor.hosted_for;
        let Ok(task_id) = TaskId::from_bytes(&fresh.task_id) else { return };
        let holds = resources_of(&fresh.resources).unwrap_or_default();
        let placement = if fresh.placement_resources.is_empty() {
            holds.clone()
        } else {
            resources_of(&fresh.placement_resources).unwrap_or_default()
        };
        let _ = self.insert_task(task_id, fresh, holds, placement, 0);
        if let Some(task) = self.tasks.get_mut(&task_id) {
            task.from_peer = hosted_for;
        }
    }

    fn fail_all_ready(&mut self, message: &str) {
        let ready: Vec<TaskId> = self.ready.drain(..).flat_map(|q| q.tasks).collect();
        for task_id in ready {
            let creation_of = self
                .tasks
                .get(&task_id)
                .filter(|t| t.spec.kind == TaskKind::ActorCreation as i32)
                .and_then(|t| ActorId::from_bytes(&t.spec.actor_id).ok());
            self.finish_task(task_id, Some((SystemErrorKind::System, message.to_string())));
            if let Some(actor_id) = creation_of
                && let Some(actor) = self.actors.get_mut(&actor_id)
            {
                actor.state = ActorState::Dead;
                actor.death_cause = message.to_string();
                self.actions.push(Action::ActorChanged(actor_id));
                self.fail_actor_queue(actor_id);
                self.release_actor(actor_id);
            }
        }
    }

    // ------------------------------------------------------- placement groups

    /// Holds `bundles` of a placement group on this node: all of them or none.
    pub fn reserve_bundles(
        &mut self,
        pg_id: PlacementGroupId,
        bundles: &[(u32, ResourceSet)],
    ) -> Result<(), AgentError> {
        if self.bundles.contains_key(&pg_id) {
            return Ok(());
        }
        let mut sum = ResourceSet::new();
        for (_, b) in bundles {
            sum.add(b);
        }
        if !self.available.fits(&sum) {
            return Err(AgentError::BundlesDoNotFit {
                node: self.node_id.short(),
                available: self.available.clone(),
                wanted: sum,
            });
        }
        let pg_hex = pg_id.hex();
        for (index, b) in bundles {
            crate::resources::hold_bundle(&mut self.total, &mut self.available, &pg_hex, *index, b);
        }
        self.bundles.insert(pg_id, sum);
        self.schedule();
        Ok(())
    }

    /// Gives a placement group's bundles back: what runs in them is killed.
    pub fn return_bundles(&mut self, pg_id: PlacementGroupId) {
        let Some(sum) = self.bundles.remove(&pg_id) else { return };
        let pg_hex = pg_id.hex();
        let uses_group = |holds: &ResourceSet| holds.names().any(|n| n.ends_with(&pg_hex));
        let running: Vec<u32> = self
            .tasks
            .values()
            .filter(|t| uses_group(&t.holds) || uses_group(&t.placement))
            .filter_map(|t| match t.state {
                TaskState::Running(w) => self.workers.get(&w).map(|w| w.pid),
                _ => None,
            })
            .chain(
                self.actors
                    .values()
                    .filter(|a| a.held.as_ref().is_some_and(|(_, h)| uses_group(h)))
                    .filter_map(|a| a.worker.and_then(|w| self.workers.get(&w)).map(|w| w.pid)),
            )
            .filter(|pid| *pid != 0)
            .collect();
        for pid in running {
            self.actions.push(Action::Signal { pid, signal: libc::SIGKILL });
        }
        self.total.remove_containing(&pg_hex);
        self.available.remove_containing(&pg_hex);
        self.available.add(&sum);
        self.schedule();
    }

    pub fn has_worker(&self, worker_id: &WorkerId) -> bool {
        self.workers.contains_key(worker_id)
    }

    /// Cancels the task that produces `object_id`: dropped if queued, interrupted
    /// (or killed with `force`) if running.
    pub fn cancel(&mut self, object_id: ObjectId, force: bool) {
        let Some(&task_id) = self.producer.get(&object_id) else { return };
        let Some(task) = self.tasks.get_mut(&task_id) else { return };
        if task.cancelled {
            return;
        }
        task.cancelled = true;
        match task.state {
            TaskState::Running(worker_id) => {
                let is_actor_task = task.spec.kind == TaskKind::ActorTask as i32;
                if let Some(w) = self.workers.get(&worker_id)
                    && w.pid != 0
                    && !is_actor_task
                {
                    let signal = if force { libc::SIGKILL } else { libc::SIGINT };
                    self.actions.push(Action::Signal { pid: w.pid, signal });
                }
            }
            TaskState::Forwarded(node) => {
                self.actions.push(Action::PeerCancel { node, object_id, force });
            }
            TaskState::Ready | TaskState::WaitingArgs => {
                if task.spec.kind == TaskKind::ActorTask as i32
                    && let Some(actor) = self.actor_of_task(task_id)
                {
                    actor.queue.retain(|t| *t != task_id);
                }
                for q in &mut self.ready {
                    q.tasks.retain(|t| *t != task_id);
                }
                self.finish_task(task_id, Some((SystemErrorKind::TaskCancelled, "This task was cancelled".into())));
            }
        }
    }

    /// Stops scheduling and returns every worker pid, for the caller to kill.
    pub fn begin_shutdown(&mut self) -> Vec<u32> {
        self.shutting_down = true;
        self.workers.values().map(|w| w.pid).filter(|p| *p != 0).collect()
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down
    }

    pub fn worker_pids(&self) -> Vec<u32> {
        self.workers.values().map(|w| w.pid).filter(|p| *p != 0).collect()
    }
}

impl ActorEntry {
    fn new(id: ActorId, spec: &TaskSpec) -> Self {
        ActorEntry {
            id,
            class_name: spec.name.clone(),
            name: spec.actor_name.clone(),
            namespace: spec.namespace.clone(),
            state: ActorState::PendingCreation,
            worker: None,
            pid: 0,
            creation: spec.clone(),
            queue: VecDeque::new(),
            inflight: Vec::new(),
            num_restarts: 0,
            max_restarts: spec.max_restarts,
            max_task_retries: spec.max_task_retries,
            death_cause: String::new(),
            death_kind: SystemErrorKind::ActorDied,
            method_names: Vec::new(),
            no_restart: false,
            held: None,
            arg_pins: Vec::new(),
            remote: None,
            proxy: false,
            hosted_for: None,
        }
    }

    fn held_gpus_and_resources(&mut self, gpus: Vec<(usize, i64)>, holds: ResourceSet) {
        self.held = Some((gpus, holds));
    }

    fn take_held(&mut self) -> (Vec<(usize, i64)>, ResourceSet) {
        self.held.take().unwrap_or_default()
    }
}
