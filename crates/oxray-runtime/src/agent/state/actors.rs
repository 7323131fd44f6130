//! Actors on this node (and routes to actors elsewhere): their lifecycle, names
//! unique per namespace, calls queued per caller, and restarts after a death.

use super::{Action, AgentState, WorkerRole, requests_of};
use crate::agent::AgentError;
use crate::errors::SystemErrorKind;
use crate::ids::{ActorId, ClientId, JobId, NodeId, ObjectId, TaskId, WorkerId};
use crate::resources::ResourceSet;
use oxray_proto::{TaskKind, TaskSpec};
use std::collections::{HashMap, HashSet, VecDeque};

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
    pub(super) creation: TaskSpec,
    pub(super) queue: VecDeque<TaskId>,
    pub(super) inflight: Vec<TaskId>,
    pub num_restarts: i32,
    pub max_restarts: i32,
    pub max_task_retries: i32,
    pub death_cause: String,
    pub(super) death_kind: SystemErrorKind,
    pub method_names: Vec<String>,
    pub(super) no_restart: bool,
    /// GPUs and resources the live actor holds, returned when it dies.
    pub(super) held: Option<(Vec<(usize, i64)>, ResourceSet)>,
    /// Constructor arguments, pinned until the actor is dead for good.
    pub(super) arg_pins: Vec<ObjectId>,
    /// The node it lives on, when that is not this one.
    pub remote: Option<NodeId>,
    /// Known here only to route calls: created and restarted by another node.
    pub(super) proxy: bool,
    /// The owner node this actor was created for, when it forwarded the creation here.
    pub hosted_for: Option<NodeId>,
    /// Dead, its creation spec dropped and its entry in the bounded history.
    pub(super) retired: bool,
}

impl ActorEntry {
    /// The spec that created it (cut to its ids, job, detachment and resources once it is dead for good).
    pub fn creation(&self) -> &TaskSpec {
        &self.creation
    }

    /// Dead, or killed for good and about to be (its process may not have exited yet).
    pub fn is_ending(&self) -> bool {
        self.state == ActorState::Dead || self.no_restart
    }
}

/// Actors this node hosts or routes to, and the names of live ones.
#[derive(Default)]
pub(super) struct ActorTable {
    actors: HashMap<ActorId, ActorEntry>,
    /// (namespace, name) -> actor, for named actors not yet dead.
    named: HashMap<(String, String), ActorId>,
    /// Dead actors, oldest first: only the last `dead_kept` stay in `actors`
    /// (calls to a forgotten one fail with the head's record of its death).
    dead: VecDeque<ActorId>,
    dead_kept: usize,
}

impl ActorTable {
    pub(super) fn get(&self, id: &ActorId) -> Option<&ActorEntry> {
        self.actors.get(id)
    }

    pub(super) fn get_mut(&mut self, id: &ActorId) -> Option<&mut ActorEntry> {
        self.actors.get_mut(id)
    }

    pub(super) fn contains_key(&self, id: &ActorId) -> bool {
        self.actors.contains_key(id)
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &ActorEntry> {
        self.actors.values()
    }

    pub(super) fn insert(&mut self, id: ActorId, entry: ActorEntry) {
        self.actors.insert(id, entry);
    }

    pub(super) fn remove(&mut self, id: &ActorId) {
        if self.actors.remove(id).is_some_and(|a| a.retired) {
            self.dead.retain(|d| d != id);
        }
    }

    pub(super) fn set_dead_kept(&mut self, kept: usize) {
        self.dead_kept = kept;
    }

    pub(super) fn len(&self) -> usize {
        self.actors.len()
    }

    /// A dead actor keeps only what its callers are told: its creation spec
    /// (constructor arguments included) goes, and once more than `dead_kept`
    /// actors are dead the oldest are forgotten.
    pub(super) fn retire(&mut self, id: ActorId) {
        let Some(actor) = self.actors.get_mut(&id).filter(|a| a.state == ActorState::Dead && !a.retired) else {
            return;
        };
        actor.retired = true;
        let key = (actor.namespace.clone(), actor.name.clone());
        if !actor.name.is_empty() && self.named.get(&key) == Some(&id) {
            self.named.remove(&key);
        }
        let spec = &actor.creation;
        actor.creation = TaskSpec {
            task_id: spec.task_id.clone(),
            actor_id: spec.actor_id.clone(),
            job_id: spec.job_id.clone(),
            owner_id: spec.owner_id.clone(),
            name: spec.name.clone(),
            // Kept for listings (`actor_info`).
            detached: spec.detached,
            resources: spec.resources.clone(),
            placement_group: spec.placement_group.clone(),
            ..Default::default()
        };
        self.dead.push_back(id);
    }

    /// Forgets the oldest dead actors beyond `dead_kept`, stopping at one whose
    /// change is `unreported` yet (it is read when the change is sent).
    fn forget_oldest_dead(&mut self, unreported: impl Fn(&ActorId) -> bool) {
        while self.dead.len() > self.dead_kept {
            let Some(&old) = self.dead.front() else { break };
            if unreported(&old) {
                break;
            }
            self.dead.pop_front();
            if self.actors.get(&old).is_some_and(|a| a.state == ActorState::Dead) {
                self.actors.remove(&old);
            }
        }
    }
}

impl AgentState {
    /// An actor is dead for good: see `ActorTable::retire`.
    pub(super) fn retire_actor(&mut self, id: ActorId) {
        self.actors.retire(id);
        let actions = &self.actions;
        self.actors.forget_oldest_dead(|a| actions.contains(&Action::ActorChanged(*a)));
    }

    pub fn register_actor(&mut self, spec: &TaskSpec, get_if_exists: bool) -> Result<(ActorId, bool), AgentError> {
        let actor_id = ActorId::from_bytes(&spec.actor_id)?;
        if !spec.actor_name.is_empty() {
            let key = (spec.namespace.clone(), spec.actor_name.clone());
            if let Some(existing) = self.actors.named.get(&key) {
                let alive = self.actors.get(existing).is_some_and(|a| !a.is_ending());
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
            self.actors.named.insert(key, actor_id);
        }
        self.actors.insert(actor_id, ActorEntry::new(actor_id, spec));
        Ok((actor_id, false))
    }

    /// Reclaims the actor once no handle to it is left: each strong handle (the creator's,
    /// and copies of it passed on) holds a ref to its token object, which the creator puts.
    pub fn reclaim_when_unreferenced(&mut self, actor_id: ActorId) {
        self.handle_tokens.insert(handle_token_id(actor_id), actor_id);
    }

    /// Ends an actor whose handles are all gone, as Ray does: a call queued behind the
    /// creator's (so after the calls it made) runs `__ray_shutdown__` and exits.
    pub(super) fn reclaim_actor(&mut self, actor_id: ActorId, now_ms: u64) {
        let Some(actor) = self.actors.get(&actor_id).filter(|a| a.state != ActorState::Dead) else { return };
        let creation = &actor.creation;
        let Ok(owner) = ClientId::from_bytes(&creation.owner_id) else { return };
        let spec = TaskSpec {
            task_id: TaskId::random().to_vec(),
            name: format!("{}.__ray_terminate__", actor.class_name),
            kind: TaskKind::ActorTask as i32,
            actor_id: actor_id.to_vec(),
            method_name: RECLAIM_METHOD.into(),
            owner_id: creation.owner_id.clone(),
            job_id: creation.job_id.clone(),
            ..Default::default()
        };
        if let Err(e) = self.submit_actor_task(owner, spec, now_ms) {
            self.actions.push(Action::warn(format!("could not reclaim actor {}: {e}", actor_id.short())));
        }
    }

    pub fn named_actor(&self, namespace: &str, name: &str) -> Option<&ActorEntry> {
        let id = self.actors.named.get(&(namespace.to_string(), name.to_string()))?;
        self.actors.get(id).filter(|a| !a.is_ending())
    }

    pub(super) fn start_actor_worker(&mut self, task_id: TaskId, gpus: Vec<(usize, i64)>, now_ms: u64) {
        let task = self.tasks.get_mut(&task_id).expect("creation task exists");
        self.available.subtract(&task.holds);
        task.gpus = gpus;
        let label = task.spec.name.clone();
        let job_id = task.job;
        let actor_id = ActorId::from_bytes(&task.spec.actor_id).unwrap_or_default();
        let env: Vec<(String, String)> = task.spec.env_vars.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        let worker_id = self.spawn_worker(WorkerRole::Actor(actor_id), label, job_id, env);
        self.tasks.get_mut(&task_id).expect("exists").start_on(worker_id, now_ms);
        let assignment = self.assignment_for(task_id, worker_id);
        let worker = self.workers.get_mut(&worker_id).expect("just spawned");
        worker.running = Some(task_id);
        worker.pending = Some(assignment);
        if let Some(actor) = self.actors.get_mut(&actor_id) {
            actor.worker = Some(worker_id);
        }
    }

    pub(super) fn creation_done(
        &mut self,
        worker_id: WorkerId,
        task_id: TaskId,
        failed: bool,
        method_names: Vec<String>,
        error_text: String,
        now_ms: u64,
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
        self.finish_task(task_id, None, now_ms);
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
            self.unpin(id, now_ms);
        }
        if killed_meanwhile {
            // Killed before its constructor finished: don't bring it back.
            self.release_actor(actor_id, now_ms);
            if let Some(w) = self.workers.get(&worker_id) {
                self.actions.push(Action::Signal { pid: w.pid, signal: libc::SIGKILL });
            }
            return;
        }
        let Some(actor) = self.actors.get_mut(&actor_id) else { return };
        if failed {
            // The worker words it as Ray does ("The actor died because of an error raised in its
            // creation task, ray::A.__init__() ..." and the traceback).
            actor.death_cause = if error_text.is_empty() {
                format!("The actor {} died because its constructor raised", actor.class_name)
            } else {
                error_text
            };
            actor.death_kind = SystemErrorKind::ActorDied;
            actor.no_restart = true;
            actor.state = ActorState::Dead;
            self.actions.push(Action::ActorChanged(actor_id));
            self.fail_actor_queue(actor_id, now_ms);
            self.release_actor(actor_id, now_ms);
            if let Some(w) = self.workers.get(&worker_id) {
                self.actions.push(Action::Signal { pid: w.pid, signal: libc::SIGKILL });
            }
            return;
        }
        actor.state = ActorState::Alive;
        actor.pid = pid;
        actor.method_names = method_names;
        self.actions.push(Action::ActorChanged(actor_id));
        self.dispatch_actor(actor_id, now_ms);
    }

    pub fn submit_actor_task(&mut self, client: ClientId, spec: TaskSpec, now_ms: u64) -> Result<(), AgentError> {
        let actor_id = ActorId::from_bytes(&spec.actor_id)?;
        let task_id = TaskId::from_bytes(&spec.task_id)?;
        let return_ids = spec.return_ids.iter().map(|r| ObjectId::from_bytes(r)).collect::<Result<Vec<_>, _>>()?;
        self.add_holders(client, &return_ids);
        for r in &return_ids {
            self.tasks.set_producer(*r, task_id);
        }
        let Some(actor) = self.actors.get(&actor_id) else {
            for r in return_ids {
                self.store_error(r, SystemErrorKind::ActorDied, "The actor is unknown to this cluster", now_ms);
            }
            return Ok(());
        };
        if actor.state == ActorState::Dead {
            let (kind, cause) = (actor.death_kind, actor.death_cause.clone());
            for r in return_ids {
                self.store_error(r, kind, &cause, now_ms);
            }
            return Ok(());
        }
        let retries = spec.call_max_task_retries.unwrap_or(actor.max_task_retries);
        self.insert_task(task_id, spec, ResourceSet::new(), ResourceSet::new(), retries, now_ms)?;
        self.actors.get_mut(&actor_id).expect("checked").queue.push_back(task_id);
        self.dispatch_actor(actor_id, now_ms);
        Ok(())
    }

    /// Sends queued calls to a live actor: each caller's calls in the order it
    /// made them within each concurrency group, so a call waiting for its arguments
    /// holds back only later calls from the same caller to the same group (as in Ray),
    /// never other callers' or other groups'.
    pub(super) fn dispatch_actor(&mut self, actor_id: ActorId, now_ms: u64) {
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
        // (caller, concurrency group): as in Ray, each group keeps its own order, so a call
        // waiting for its arguments holds back only its caller's later calls in its group.
        let mut waiting_callers: HashSet<(&[u8], &str)> = HashSet::new();
        let mut ready = Vec::new();
        let mut gone = Vec::new();
        let mut to_copy = Vec::new();
        for &task_id in &actor.queue {
            let Some(task) = self.tasks.get(&task_id) else {
                gone.push(task_id);
                continue;
            };
            let sequence = (task.spec.owner_id.as_slice(), task.spec.concurrency_group.as_str());
            if waiting_callers.contains(&sequence) {
                continue;
            }
            let copies =
                if remote.is_none() && task.missing_args.is_empty() { self.nonlocal_args(task_id) } else { Vec::new() };
            if task.missing_args.is_empty() && copies.is_empty() {
                ready.push(task_id);
            } else {
                waiting_callers.insert(sequence);
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
            self.tasks.get_mut(&task_id).expect("exists").start_on(worker_id, now_ms);
            self.actors.get_mut(&actor_id).expect("exists").inflight.push(task_id);
            if let Some(tx) = self.workers.get(&worker_id).and_then(|w| w.tx.as_ref()) {
                let _ = tx.send(Ok(assignment));
            }
        }
    }

    pub(super) fn fail_actor_queue(&mut self, actor_id: ActorId, now_ms: u64) {
        let Some(actor) = self.actors.get_mut(&actor_id) else { return };
        let pending: Vec<TaskId> = actor.queue.drain(..).chain(actor.inflight.drain(..)).collect();
        let (kind, cause) = (actor.death_kind, actor.death_cause.clone());
        for task_id in pending {
            self.finish_task(task_id, Some((kind, cause.clone())), now_ms);
        }
    }

    pub(super) fn release_actor(&mut self, actor_id: ActorId, now_ms: u64) {
        let Some(actor) = self.actors.get_mut(&actor_id) else { return };
        let pins = if actor.state == ActorState::Dead { std::mem::take(&mut actor.arg_pins) } else { Vec::new() };
        let (gpus, holds) = actor.take_held();
        for id in pins {
            self.unpin(id, now_ms);
        }
        let Some(actor) = self.actors.get_mut(&actor_id) else { return };
        self.gpus.release(&gpus);
        self.available.add(&holds);
        if actor.state == ActorState::Dead {
            let ended_job = JobId::from_bytes(&actor.creation.job_id).is_ok_and(|j| self.functions.has_ended(&j));
            self.retire_actor(actor_id);
            if ended_job {
                // The last actor of an ended job may have kept its functions.
                self.drop_ended_jobs_functions(None);
            }
        }
        self.schedule(now_ms);
    }

    pub fn kill_actor(&mut self, actor_id: ActorId, no_restart: bool, now_ms: u64) -> Result<(), AgentError> {
        let actor = self.actors.get_mut(&actor_id).ok_or(AgentError::UnknownActor(actor_id))?;
        if no_restart && actor.state != ActorState::Dead {
            actor.no_restart = true;
            // Ray's wording, with the class named.
            actor.death_cause =
                format!("The actor is dead because it was killed by `ray.kill` (actor class {})", actor.class_name);
            self.actions.push(Action::ActorChanged(actor_id));
        }
        self.stop_actor(actor_id, no_restart, now_ms)
    }

    /// Kills an actor for good, with `cause` as what its callers are told.
    pub(super) fn kill_actor_because(&mut self, actor_id: ActorId, cause: String, now_ms: u64) {
        let Some(actor) = self.actors.get_mut(&actor_id) else { return };
        actor.no_restart = true;
        actor.death_cause = cause;
        let _ = self.stop_actor(actor_id, true, now_ms);
    }

    fn stop_actor(&mut self, actor_id: ActorId, no_restart: bool, now_ms: u64) -> Result<(), AgentError> {
        let actor = self.actors.get_mut(&actor_id).ok_or(AgentError::UnknownActor(actor_id))?;
        if let Some(node) = actor.remote.filter(|_| actor.state != ActorState::Dead) {
            self.actions.push(Action::PeerKillActor { node, actor_id, no_restart });
            return Ok(());
        }
        match actor.worker.and_then(|w| self.workers.get(&w)) {
            Some(w) if w.pid != 0 => self.actions.push(Action::Signal { pid: w.pid, signal: libc::SIGKILL }),
            _ => {
                let can_restart = actor.max_restarts < 0 || actor.num_restarts < actor.max_restarts;
                if !no_restart && can_restart && actor.state != ActorState::Dead {
                    // Killed (restart allowed) before its process exists: as in Ray, that counts
                    // as a restart, and its creation simply goes on.
                    actor.num_restarts += 1;
                    self.actions.push(Action::ActorChanged(actor_id));
                } else if actor.state != ActorState::Dead {
                    actor.state = ActorState::Dead;
                    if actor.death_cause.is_empty() {
                        actor.death_cause = format!("The actor {} was killed before it started", actor.class_name);
                    }
                    let creation = TaskId::from_bytes(&actor.creation.task_id).unwrap_or_default();
                    self.actions.push(Action::ActorChanged(actor_id));
                    // Its constructor must never run now: drop the creation task and
                    // whatever it held (a worker still starting is killed on connect).
                    self.release_task_resources(creation);
                    self.finish_task(creation, None, now_ms);
                    self.fail_actor_queue(actor_id, now_ms);
                    self.release_actor(actor_id, now_ms);
                }
            }
        }
        Ok(())
    }

    pub(super) fn actor_of_task(&mut self, task_id: TaskId) -> Option<&mut ActorEntry> {
        let actor_id = ActorId::from_bytes(&self.tasks.get(&task_id)?.spec.actor_id).ok()?;
        self.actors.get_mut(&actor_id)
    }

    pub(super) fn actor_worker_exited(
        &mut self,
        actor_id: ActorId,
        worker_id: WorkerId,
        pid: u32,
        was_blocked: bool,
        status: &str,
        now_ms: u64,
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
                // As in Ray: a call lost to a crash is "unavailable" while the actor comes back.
                let kind = if can_restart { SystemErrorKind::ActorUnavailable } else { SystemErrorKind::ActorDied };
                self.finish_task(task_id, Some((kind, cause.clone())), now_ms);
            }
        }
        for task_id in retry_ids.into_iter().rev() {
            self.retry(task_id, now_ms);
        }
        // A creation task still running on the dead worker is finished here too.
        let creation_id =
            TaskId::from_bytes(&self.actors.get(&actor_id).expect("exists").creation.task_id).unwrap_or_default();
        self.release_task_resources_as(creation_id, was_blocked);
        // Its constructor's arguments stay pinned (by the actor) for a restart.
        self.settle_creation(actor_id, now_ms);
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
            self.restart_creation(actor_id, now_ms);
        } else {
            actor.state = ActorState::Dead;
            self.actions.push(Action::ActorChanged(actor_id));
            self.fail_actor_queue(actor_id, now_ms);
            self.release_actor(actor_id, now_ms);
        }
    }

    /// Queues the actor's constructor again (a restart), on this node or, when
    /// it was created for another node, here again.
    pub(super) fn restart_creation(&mut self, actor_id: ActorId, now_ms: u64) {
        let Some(actor) = self.actors.get_mut(&actor_id) else { return };
        let mut fresh = actor.creation.clone();
        fresh.task_id = TaskId::random().to_vec();
        actor.creation = fresh.clone();
        let hosted_for = actor.hosted_for;
        let Ok(task_id) = TaskId::from_bytes(&fresh.task_id) else { return };
        let (holds, placement) = requests_of(&fresh).unwrap_or_default();
        let _ = self.insert_task(task_id, fresh, holds, placement, 0, now_ms);
        if let Some(task) = self.tasks.get_mut(&task_id) {
            task.from_peer = hosted_for;
        }
    }
}

impl AgentState {
    pub fn actor(&self, id: &ActorId) -> Option<&ActorEntry> {
        self.actors.get(id)
    }

    pub fn actors(&self) -> impl Iterator<Item = &ActorEntry> {
        self.actors.values()
    }
}

impl ActorEntry {
    pub(super) fn new(id: ActorId, spec: &TaskSpec) -> Self {
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
            retired: false,
        }
    }

    pub(super) fn held_gpus_and_resources(&mut self, gpus: Vec<(usize, i64)>, holds: ResourceSet) {
        self.held = Some((gpus, holds));
    }

    pub(super) fn take_held(&mut self) -> (Vec<(usize, i64)>, ResourceSet) {
        self.held.take().unwrap_or_default()
    }
}

/// The built-in method a reclaimed actor's worker answers by ending the actor.
pub(super) const RECLAIM_METHOD: &str = "__oxray_reclaim__";

/// The id of an actor's handle token: its id's bytes reversed (an id nothing else makes,
/// as object ids are random; `python/oxray/_private/actor.py` derives the same).
pub(super) fn handle_token_id(actor_id: ActorId) -> ObjectId {
    let mut bytes = *actor_id.as_bytes();
    bytes.reverse();
    ObjectId::from_array(bytes)
}
