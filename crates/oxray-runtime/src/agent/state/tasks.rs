//! Tasks on this node: those waiting for arguments or resources, who produces
//! which object, the functions they run, and the scheduler that places ready
//! tasks on workers (or hands them to another node).

use super::remote::Placement;
use super::task_history::Outcome;
use super::{Action, ActorState, AgentState, WorkerRole, requests_of};
use crate::agent::AgentError;
use crate::errors::SystemErrorKind;
use crate::ids::{ActorId, ClientId, JobId, NodeId, ObjectId, TaskId, WorkerId};
use crate::resources::{ResourceSet, group_names};
use oxray_proto::task_arg::Kind;
use oxray_proto::{Assignment, TaskEnv, TaskKind, TaskSpec};
use std::collections::{HashMap, HashSet, VecDeque};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TaskState {
    WaitingArgs,
    Ready,
    Running(WorkerId),
    /// Sent to another node, which runs it and reports back.
    Forwarded(NodeId),
}

#[derive(Debug)]
pub(super) struct TaskEntry {
    pub(super) spec: TaskSpec,
    pub(super) holds: ResourceSet,
    pub(super) placement: ResourceSet,
    pub(super) missing_args: HashSet<ObjectId>,
    pub(super) pinned: Vec<ObjectId>,
    pub(super) retries_left: i32,
    pub(super) state: TaskState,
    pub(super) cancelled: bool,
    pub(super) gpus: Vec<(usize, i64)>,
    /// The owner node that forwarded it here (it is never forwarded again).
    pub(super) from_peer: Option<NodeId>,
    /// The job it belongs to: its worker's output goes to that job's driver.
    pub(super) job: Option<JobId>,
    /// 0 for the first try, one more per retry.
    pub(super) attempt: i32,
    /// When it was submitted here, and when it last started (ms since the epoch; 0: not yet).
    pub(super) created_ms: u64,
    pub(super) started_ms: u64,
    /// Its code raised (the error is in its returns).
    pub(super) raised: bool,
}

impl TaskEntry {
    /// It runs on `worker` from `now_ms`.
    pub(super) fn start_on(&mut self, worker: WorkerId, now_ms: u64) {
        self.state = TaskState::Running(worker);
        self.started_ms = now_ms;
    }
}

#[derive(Debug)]
struct ShapeQueue {
    holds: ResourceSet,
    placement: ResourceSet,
    creation: bool,
    tasks: VecDeque<TaskId>,
}

/// Every task this node owns or runs, with the indices scheduling needs.
#[derive(Default)]
pub(super) struct TaskTable {
    entries: HashMap<TaskId, TaskEntry>,
    ready: ReadyQueues,
    /// Tasks waiting for each object to become ready (or to arrive here).
    waiters: HashMap<ObjectId, Vec<TaskId>>,
    /// The task that produces each return object, while it is queued or running.
    producer: HashMap<ObjectId, TaskId>,
}

impl TaskTable {
    pub(super) fn get(&self, id: &TaskId) -> Option<&TaskEntry> {
        self.entries.get(id)
    }

    pub(super) fn get_mut(&mut self, id: &TaskId) -> Option<&mut TaskEntry> {
        self.entries.get_mut(id)
    }

    pub(super) fn contains_key(&self, id: &TaskId) -> bool {
        self.entries.contains_key(id)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&TaskId, &TaskEntry)> {
        self.entries.iter()
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &TaskEntry> {
        self.entries.values()
    }

    /// The resources the ready tasks queued here will take when they start.
    pub(super) fn queued_placement(&self) -> ResourceSet {
        self.ready.queued_placement()
    }

    pub(super) fn add_waiter(&mut self, object: ObjectId, task: TaskId) {
        self.waiters.entry(object).or_default().push(task);
    }

    /// The tasks that were waiting for `object`, which is now ready.
    pub(super) fn take_waiters(&mut self, object: &ObjectId) -> Option<Vec<TaskId>> {
        self.waiters.remove(object)
    }

    pub(super) fn set_producer(&mut self, object: ObjectId, task: TaskId) {
        self.producer.insert(object, task);
    }

    pub(super) fn producer_of(&self, object: &ObjectId) -> Option<TaskId> {
        self.producer.get(object).copied()
    }

    pub(super) fn clear_producer(&mut self, object: &ObjectId) {
        self.producer.remove(object);
    }

    /// Whether a queued or running task will still write `object`.
    pub(super) fn produces_pending(&self, object: &ObjectId) -> bool {
        self.producer.get(object).is_some_and(|t| self.entries.contains_key(t))
    }
}

/// Ready tasks, one FIFO per resource shape, so a shape that does not fit is
/// skipped in O(1) however many tasks it has.
#[derive(Default)]
struct ReadyQueues {
    queues: Vec<ShapeQueue>,
}

impl ReadyQueues {
    fn push(&mut self, task_id: TaskId, task: &TaskEntry) {
        let creation = task.spec.kind == TaskKind::ActorCreation as i32;
        match self
            .queues
            .iter_mut()
            .find(|q| q.creation == creation && q.holds == task.holds && q.placement == task.placement)
        {
            Some(q) => q.tasks.push_back(task_id),
            None => self.queues.push(ShapeQueue {
                holds: task.holds.clone(),
                placement: task.placement.clone(),
                creation,
                tasks: VecDeque::from([task_id]),
            }),
        }
    }

    fn remove(&mut self, task_id: TaskId) {
        for q in &mut self.queues {
            q.tasks.retain(|t| *t != task_id);
        }
    }

    /// Every ready task, in queue order, leaving the queues empty.
    fn drain(&mut self) -> Vec<TaskId> {
        self.queues.drain(..).flat_map(|q| q.tasks).collect()
    }

    fn len(&self) -> usize {
        self.queues.len()
    }

    /// What the queued tasks will take once they start (a placement per task).
    fn queued_placement(&self) -> ResourceSet {
        let mut total = ResourceSet::new();
        for q in &self.queues {
            for _ in &q.tasks {
                total.add(&q.placement);
            }
        }
        total
    }

    fn shape(&self, qi: usize) -> &ShapeQueue {
        &self.queues[qi]
    }

    fn front(&self, qi: usize) -> Option<TaskId> {
        self.queues[qi].tasks.front().copied()
    }

    fn pop_front(&mut self, qi: usize) {
        self.queues[qi].tasks.pop_front();
    }

    fn drop_empty(&mut self) {
        self.queues.retain(|q| !q.tasks.is_empty());
    }
}

/// Pickled functions registered by clients, by content id, with the jobs that
/// registered each. A job's functions go once the job has ended here and no
/// detached actor or task of it is left here (their workers may submit them
/// again, as in Ray, where a job's functions live while its detached actors do);
/// a function also registered by a live job, or run by a queued or running task
/// or a live actor, stays. A function registered without a job stays for the
/// node's life. Workers register again after a drop (`generation`).
#[derive(Default)]
pub(super) struct FunctionTable {
    blobs: HashMap<Vec<u8>, FunctionEntry>,
    /// Jobs ended on this node, newest last (bounded), and the same as a set:
    /// their registrations do not keep a function.
    ended: VecDeque<JobId>,
    ended_set: HashSet<JobId>,
    /// Bumped on every drop; assignments carry it so workers know their registrations may be gone.
    generation: u64,
}

struct FunctionEntry {
    data: Vec<u8>,
    jobs: HashSet<JobId>,
    unowned: bool,
}

/// How many ended jobs the function table remembers.
const ENDED_JOBS_KEPT: usize = 4096;

impl FunctionTable {
    fn register(&mut self, id: Vec<u8>, data: Vec<u8>, job: Option<JobId>) {
        let entry =
            self.blobs.entry(id).or_insert_with(|| FunctionEntry { data, jobs: HashSet::new(), unowned: false });
        match job {
            Some(job) => {
                entry.jobs.insert(job);
            }
            None => entry.unowned = true,
        }
    }

    pub(super) fn get(&self, id: &[u8]) -> Option<&Vec<u8>> {
        self.blobs.get(id).map(|e| &e.data)
    }

    pub(super) fn len(&self) -> usize {
        self.blobs.len()
    }

    pub(super) fn has_ended(&self, job: &JobId) -> bool {
        self.ended_set.contains(job)
    }

    fn note_ended(&mut self, job: JobId) {
        if !self.ended_set.insert(job) {
            return;
        }
        if self.ended.len() >= ENDED_JOBS_KEPT
            && let Some(old) = self.ended.pop_front()
        {
            self.ended_set.remove(&old);
        }
        self.ended.push_back(job);
    }

    /// Drops every function that only ended jobs (other than those in `kept_jobs`)
    /// registered and that nothing in `in_use` runs. Returns how many went.
    fn sweep(&mut self, kept_jobs: &HashSet<JobId>, in_use: &HashSet<&[u8]>) -> usize {
        let ended: HashSet<JobId> = self.ended_set.difference(kept_jobs).copied().collect();
        let before = self.blobs.len();
        self.blobs.retain(|id, entry| {
            entry.jobs.retain(|j| !ended.contains(j));
            entry.unowned || !entry.jobs.is_empty() || in_use.contains(id.as_slice())
        });
        let dropped = before - self.blobs.len();
        if dropped > 0 {
            self.generation += 1;
        }
        dropped
    }
}

impl AgentState {
    /// Keeps a pickled function for `job` (None: for the node's life).
    pub fn register_function(&mut self, id: Vec<u8>, data: Vec<u8>, job: Option<JobId>) {
        self.functions.register(id, data, job);
    }

    pub fn function(&self, id: &[u8]) -> Option<Vec<u8>> {
        self.functions.get(id).cloned()
    }

    /// How many functions this node keeps.
    pub fn function_count(&self) -> usize {
        self.functions.len()
    }

    /// `job` has ended on this node: drops the functions no live job, detached
    /// actor of an ended job, queued or running task, or live actor still needs.
    pub(super) fn drop_ended_jobs_functions(&mut self, job: Option<JobId>) {
        if let Some(job) = job {
            self.functions.note_ended(job);
            self.peers.forget_sent_functions(job.as_bytes());
        }
        let live_actors = self.actors.values().filter(|a| a.state != ActorState::Dead);
        let mut kept_jobs = HashSet::new();
        let mut in_use: HashSet<&[u8]> = HashSet::new();
        for actor in live_actors {
            in_use.insert(&actor.creation.function_id);
            if actor.creation.detached
                && let Ok(job) = JobId::from_bytes(&actor.creation.job_id)
            {
                kept_jobs.insert(job);
            }
        }
        // A job with work here keeps its functions: its workers may submit them again.
        kept_jobs.extend(self.tasks.values().filter_map(|t| t.job));
        in_use.extend(self.tasks.values().map(|t| t.spec.function_id.as_slice()));
        let dropped = self.functions.sweep(&kept_jobs, &in_use);
        if dropped > 0 {
            self.actions.push(Action::info(format!("dropped {dropped} functions of ended jobs")));
        }
    }

    /// Why no live node can ever hold `request` ("(name: wants x, cluster has y). The
    /// cluster's total resources are {...}."), or None when one can, or when it asks
    /// for a placement group's resources (they appear once the group is created).
    fn unmet_by_cluster(&self, request: &ResourceSet) -> Option<String> {
        if self.feasible_anywhere(request) || group_names::uses_any_group(request) {
            return None;
        }
        let total = self.cluster_total();
        let detail: Vec<String> = total
            .shortfall(request)
            .iter()
            .map(|(name, want, have)| format!("{name}: wants {want}, cluster has {have}"))
            .collect();
        Some(format!("({}). The cluster's total resources are {total}.", detail.join("; ")))
    }

    /// A lone cluster fails a request no node can ever meet at once; one that nodes
    /// may join keeps it pending (see `warn_infeasible`).
    pub(super) fn infeasible_message(&self, what: &str, request: &ResourceSet) -> Option<String> {
        if self.nodes_may_join() {
            return None;
        }
        let why = self.unmet_by_cluster(request)?;
        Some(format!("{what} requires {request} but no node in the cluster can ever provide it {why}"))
    }

    /// Ready work waiting for resources, one entry per shape (placement group
    /// bundles excluded: they wait for their group, not for a new node).
    pub fn pending_demand(&self) -> Vec<(ResourceSet, u32)> {
        let mut demand = Vec::new();
        for q in &self.tasks.ready.queues {
            if group_names::uses_any_group(&q.placement) {
                continue;
            }
            let waiting =
                q.tasks.iter().filter_map(|id| self.tasks.get(id)).filter(|t| t.state == TaskState::Ready).count();
            if waiting > 0 {
                demand.push((q.placement.clone(), u32::try_from(waiting).unwrap_or(u32::MAX)));
            }
        }
        demand
    }

    /// Queues a warning for each shape of ready work that no live node can run
    /// (it waits for a node that fits to join or come back). The agent calls this
    /// periodically (`OXRAY_INFEASIBLE_WARNING_INTERVAL_S`).
    pub fn warn_infeasible(&mut self) {
        let mut warnings = Vec::new();
        for q in &self.tasks.ready.queues {
            let mut waiting =
                q.tasks.iter().filter_map(|id| self.tasks.get(id)).filter(|t| t.state == TaskState::Ready);
            let Some(first) = waiting.next() else { continue };
            let what = if q.creation { "actor creation" } else { "task" };
            if let Some(selector) = self.unmatched_selector(&first.spec) {
                warnings.push(format!(
                    "{what} {} waits for a node with labels matching label_selector {selector}: no live node has them. \
                     It runs as soon as such a node joins the cluster.",
                    first.spec.name
                ));
                continue;
            }
            let Some(why) = self.unmet_by_cluster(&q.placement) else { continue };
            warnings.push(format!(
                "{} {what}(s) such as {} require {} and are waiting for a node that can run them {why} \
                 They run as soon as such a node joins the cluster.",
                1 + waiting.count(),
                first.spec.name,
                q.placement
            ));
        }
        self.actions.extend(warnings.into_iter().map(Action::warn));
    }

    /// Accepts a normal task or an actor creation. An impossible request fails
    /// its returns at once (never waits forever) and the message is returned.
    pub fn submit(&mut self, client: ClientId, spec: TaskSpec, now_ms: u64) -> Result<Option<String>, AgentError> {
        let task_id = TaskId::from_bytes(&spec.task_id)?;
        let (holds, placement) = requests_of(&spec)?;
        let return_ids = spec.return_ids.iter().map(|r| ObjectId::from_bytes(r)).collect::<Result<Vec<_>, _>>()?;
        self.add_holders(client, &return_ids);
        for r in &return_ids {
            self.tasks.set_producer(*r, task_id);
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
                self.retire_actor(id);
            }
            for r in return_ids {
                self.store_error(r, kind, &message, now_ms);
            }
            self.actions.push(Action::warn(message.clone()));
            return Ok(Some(message));
        }
        let retries = spec.max_retries;
        self.insert_task(task_id, spec, holds, placement, retries, now_ms)?;
        Ok(None)
    }

    pub(super) fn insert_task(
        &mut self,
        task_id: TaskId,
        spec: TaskSpec,
        holds: ResourceSet,
        placement: ResourceSet,
        retries_left: i32,
        now_ms: u64,
    ) -> Result<(), AgentError> {
        let job = JobId::from_optional_bytes(&spec.job_id)?;
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
            self.tasks.add_waiter(*id, task_id);
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
            job,
            attempt: 0,
            created_ms: now_ms,
            started_ms: 0,
            raised: false,
        };
        self.tasks.entries.insert(task_id, entry);
        if state == TaskState::Ready {
            self.push_ready(task_id);
        }
        Ok(())
    }

    /// Ends a task for good: stores errors in returns that have no value, and unpins its arguments.
    pub(super) fn finish_task(&mut self, task_id: TaskId, error: Option<(SystemErrorKind, String)>, now_ms: u64) {
        let Some(mut task) = self.tasks.entries.remove(&task_id) else { return };
        if let Some((kind, message)) = &error {
            for raw in &task.spec.return_ids {
                if let Ok(r) = ObjectId::from_bytes(raw) {
                    self.store_error(r, *kind, message, now_ms);
                }
            }
        }
        for r in task.spec.return_ids.iter().filter_map(|r| ObjectId::from_bytes(r).ok()) {
            self.tasks.clear_producer(&r);
            self.maybe_free(r, now_ms);
        }
        for id in std::mem::take(&mut task.pinned) {
            self.unpin(id, now_ms);
        }
        // A task handed to another node is that node's to report, unless it failed here.
        if matches!(task.state, TaskState::Forwarded(_)) && error.is_none() {
            return;
        }
        let outcome = match error {
            Some((kind, message)) => Outcome::Failed(kind, message),
            None if task.raised => Outcome::Raised,
            None => Outcome::Finished,
        };
        let worker = self.task_worker(&task);
        self.task_history.push(task_id, task, worker, outcome, now_ms);
    }

    pub(super) fn assignment_for(&mut self, task_id: TaskId, worker: WorkerId) -> Assignment {
        let task = &self.tasks.entries[&task_id];
        let ref_args: Vec<ObjectId> = task
            .spec
            .args
            .iter()
            .filter_map(|a| match &a.kind {
                Some(Kind::ObjectId(raw)) => ObjectId::from_bytes(raw).ok(),
                _ => None,
            })
            .collect();
        let (cuda_visible_devices, env) = self.task_env(task_id, worker);
        let spec = self.tasks.entries[&task_id].spec.clone();
        let resolved_args = ref_args.into_iter().map(|id| self.locate(id, worker.into())).collect();
        Assignment {
            task: Some(spec),
            resolved_args,
            cuda_visible_devices,
            exit: false,
            functions_generation: self.functions.generation,
            cancel_task_id: Vec::new(),
            env: Some(env),
        }
    }

    /// Task `task_id`'s GPUs as CUDA names them, and the environment it runs with on
    /// `worker` (`task_env`): an actor's worker started with its runtime_env, and its
    /// calls run on its GPUs.
    fn task_env(&self, task_id: TaskId, worker: WorkerId) -> (String, TaskEnv) {
        let task = &self.tasks.entries[&task_id];
        let actor = match self.workers.get(&worker).map(|w| &w.role) {
            Some(WorkerRole::Actor(actor_id)) => self.actors.get(actor_id),
            _ => None,
        };
        let start_env = match actor {
            Some(actor) => {
                let own = actor.creation.env_vars.iter().map(|(name, value)| (name.as_str(), value.as_str()));
                self.workers.start_env.with(own)
            }
            None => self.workers.start_env.clone(),
        };
        let indices: Vec<usize> = match actor.and_then(|a| a.held.as_ref()) {
            Some((gpus, _)) if task.spec.kind == TaskKind::ActorTask as i32 => gpus.iter().map(|(i, _)| *i).collect(),
            _ => task.gpus.iter().map(|(i, _)| *i).collect(),
        };
        let gpu_names = start_env.gpu_names(&indices);
        let kind = TaskKind::try_from(task.spec.kind).unwrap_or(TaskKind::Normal);
        let cpus = task.spec.resources.get("CPU").copied();
        let env = start_env.task_env(kind, &gpu_names, cpus, &task.spec.env_vars);
        (gpu_names, env)
    }

    /// Takes a task that has not started out of the ready queues and, for an
    /// actor call, out of its actor's queue.
    pub(super) fn unqueue(&mut self, task_id: TaskId) {
        if let Some(actor) = self.actor_of_task(task_id) {
            actor.queue.retain(|t| *t != task_id);
        }
        self.tasks.ready.remove(task_id);
    }

    pub(super) fn push_ready(&mut self, task_id: TaskId) {
        if let Some(node) = self.spread_to(task_id).or_else(|| self.locality_node(task_id)) {
            self.forward_task(task_id, node);
            return;
        }
        let Some(task) = self.tasks.entries.get(&task_id) else { return };
        self.tasks.ready.push(task_id, task);
    }

    /// Places ready tasks on idle workers while resources allow, and asks for
    /// new workers when tasks fit but no worker is free.
    pub fn schedule(&mut self, now_ms: u64) {
        if self.shutting_down {
            return;
        }
        let mut scratch = self.available.clone();
        let mut wanted_workers = 0usize;
        for qi in 0..self.tasks.ready.len() {
            while let Some(task_id) = self.tasks.ready.front(qi) {
                if self.tasks.get(&task_id).is_none_or(|t| t.state != TaskState::Ready) {
                    self.tasks.ready.pop_front(qi);
                    continue;
                }
                let q = self.tasks.ready.shape(qi);
                let (placement, holds) = (q.placement.clone(), q.holds.clone());
                let only_here = match self.placement_for(task_id, &placement) {
                    Placement::Anywhere => false,
                    Placement::Here => true,
                    Placement::Wait => break,
                    Placement::Node(node) => {
                        self.tasks.ready.pop_front(qi);
                        self.forward_task(task_id, node);
                        continue;
                    }
                    Placement::Fail(message) => {
                        tracing::debug!(task = %task_id.hex(), reason = %message, "scheduling: task cannot run");
                        self.tasks.ready.pop_front(qi);
                        self.finish_task(task_id, Some((SystemErrorKind::TaskUnschedulable, message)), now_ms);
                        continue;
                    }
                };
                if !self.available.fits(&placement) || !self.available.fits(&holds) {
                    if only_here {
                        break;
                    }
                    // Not here now: another node with room, or one that can run it at all.
                    match self.pick_peer(task_id, &placement) {
                        Some(node) => {
                            self.tasks.ready.pop_front(qi);
                            self.forward_task(task_id, node);
                            continue;
                        }
                        None => break,
                    }
                }
                let remote_args = self.nonlocal_args(task_id);
                if !remote_args.is_empty() {
                    self.tasks.ready.pop_front(qi);
                    self.wait_for_copies(task_id, remote_args);
                    continue;
                }
                let q = self.tasks.ready.shape(qi);
                let holds = q.holds.clone();
                if q.creation {
                    let Some(gpus) = self.gpus.acquire(group_names::gpu_amount(&holds)) else { break };
                    self.tasks.ready.pop_front(qi);
                    self.start_actor_worker(task_id, gpus, now_ms);
                    scratch.subtract(&holds);
                    continue;
                }
                let wants_gpu = group_names::gpu_amount(&holds) > 0.0;
                if !self.workers.has_idle_for(wants_gpu) {
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
                let Some(gpus) = self.gpus.acquire(group_names::gpu_amount(&holds)) else { break };
                let worker_id = self.workers.take_idle_for(wants_gpu).expect("checked above");
                self.tasks.ready.pop_front(qi);
                self.run_on(worker_id, task_id, gpus, now_ms);
                scratch.subtract(&holds);
            }
        }
        self.tasks.ready.drop_empty();
        self.available.retain_in(&self.total);
        let to_start = self.workers.to_start(wanted_workers);
        if to_start > 0 {
            tracing::debug!(
                wanted = wanted_workers,
                starting = to_start,
                "scheduling: starting workers for ready tasks"
            );
        }
        for _ in 0..to_start {
            self.spawn_worker(WorkerRole::Pool, "worker".into(), None, Vec::new());
        }
    }

    /// Whether `task_id` is still queued, running or forwarded here.
    pub fn has_task(&self, task_id: &TaskId) -> bool {
        self.tasks.contains_key(task_id)
    }

    /// A worker finished a task: record its results and free the worker.
    pub fn task_done(
        &mut self,
        worker_id: WorkerId,
        task_id: TaskId,
        done: oxray_proto::TaskDoneRequest,
        nested: &[ObjectId],
        now_ms: u64,
    ) -> Result<(), AgentError> {
        let oxray_proto::TaskDoneRequest {
            returns,
            application_error,
            method_names,
            error_text,
            retire,
            not_retryable,
            actor_exit,
            ..
        } = done;
        let returns = &returns[..];
        if !actor_exit.is_empty() {
            // The actor ends itself, from a call or (an async actor's background task) from none:
            // every call it finished was reported before this.
            if let Some(&WorkerRole::Actor(actor_id)) = self.workers.get(&worker_id).map(|w| &w.role) {
                self.kill_actor_because(actor_id, actor_exit, now_ms);
            }
            return Ok(());
        }
        let current = self.tasks.get(&task_id).is_some_and(|t| match t.state {
            TaskState::Running(w) => w == worker_id,
            _ => false,
        });
        let Some(task) = self.tasks.get(&task_id).filter(|_| current) else {
            // Stale: the task already finished (cancelled) or was retried elsewhere
            // after this worker was given up for dead. Drop its unsealed results.
            for loc in returns {
                if let Ok(id) = ObjectId::from_bytes(&loc.object_id) {
                    self.objects.store_mut().discard_unsealed(&id);
                }
            }
            return Ok(());
        };
        let kind = task.spec.kind;
        let cancelled = task.cancelled;
        let retry_app_error =
            application_error && task.spec.retry_exceptions && !not_retryable && task.retries_left != 0 && !cancelled;
        if kind == TaskKind::ActorCreation as i32 {
            self.creation_done(worker_id, task_id, application_error, method_names, error_text, now_ms);
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
                if !retire {
                    self.workers.make_idle(worker_id);
                } else if let Some(tx) = &worker.tx {
                    // It reached its function's `max_calls`: told to exit, it takes nothing else.
                    let _ = tx.send(Ok(Assignment { exit: true, ..Default::default() }));
                }
            }
        } else if let Some(actor) = self.actor_of_task(task_id) {
            actor.inflight.retain(|t| *t != task_id);
        }
        if retry_app_error {
            for loc in returns {
                if let Ok(id) = ObjectId::from_bytes(&loc.object_id) {
                    self.objects.store_mut().free(&id);
                }
            }
            self.retry(task_id, now_ms);
        } else if cancelled && (kind == TaskKind::ActorTask as i32 || returns.is_empty()) {
            let error = self.cancelled_error(task_id);
            self.finish_task(task_id, error, now_ms);
        } else {
            // As in Ray, a cancelled task (not an actor call) that still ended reports its own
            // result: how the cancel stopped it (RayTaskError(TaskCancelledError)), or the value
            // it returned after handling the interrupt.
            for loc in returns {
                // Each return pins every nested ref: which return holds which is not
                // reported, and dropping one return must not free refs inside another.
                self.seal_object(loc, nested, now_ms)?;
            }
            if application_error && let Some(task) = self.tasks.get_mut(&task_id) {
                task.raised = true;
            }
            self.finish_task(task_id, None, now_ms);
        }
        self.schedule(now_ms);
        Ok(())
    }

    pub(super) fn release_task_resources(&mut self, task_id: TaskId) {
        let blocked = match self.tasks.get(&task_id).map(|t| t.state) {
            Some(TaskState::Running(worker)) => self.workers.get(&worker).is_some_and(|w| w.blocked),
            _ => false,
        };
        self.release_task_resources_as(task_id, blocked);
    }

    /// `blocked`: the worker was waiting in get(), so its CPUs are already lent back.
    pub(super) fn release_task_resources_as(&mut self, task_id: TaskId, blocked: bool) {
        let Some(task) = self.tasks.get_mut(&task_id) else { return };
        if let TaskState::Running(_) = task.state {
            if !blocked {
                self.available.add(&task.holds);
            }
            let gpus = std::mem::take(&mut task.gpus);
            self.gpus.release(&gpus);
        }
    }

    pub(super) fn retry(&mut self, task_id: TaskId, now_ms: u64) {
        let Some(task) = self.tasks.get_mut(&task_id) else { return };
        if task.retries_left > 0 {
            task.retries_left -= 1;
        }
        task.attempt += 1;
        task.state = TaskState::Ready;
        if task.spec.kind == TaskKind::ActorTask as i32 {
            task.state = TaskState::WaitingArgs;
            let actor_id = ActorId::from_bytes(&task.spec.actor_id).unwrap_or_default();
            if let Some(actor) = self.actors.get_mut(&actor_id) {
                actor.queue.push_front(task_id);
                // A live actor takes it again at once (a restarting one, once it is back).
                self.dispatch_actor(actor_id, now_ms);
            }
        } else {
            self.push_ready(task_id);
        }
    }

    /// Whether `task_id` is queued or running here and was cancelled. A worker
    /// asks when an interrupt reached it outside user code (unpacking arguments,
    /// between tasks): the cancel must not be lost, nor hit the next task.
    pub fn is_cancelled(&self, task_id: TaskId) -> bool {
        self.tasks.get(&task_id).is_some_and(|t| t.cancelled)
    }

    /// Cancels the task that produces `object_id`: dropped if queued, interrupted (or killed
    /// with `force`) if running. `recursive` also cancels the tasks it submitted that are still
    /// here, and those forwarded on (their nodes cancel the tasks submitted there in turn).
    /// A cancel asked by a client of this node: of a task this node knows (submitted, queued, run or
    /// forwarded here), or else of one another node knows, since the ref may be borrowed from a task a
    /// task on another node submitted: the cancel goes to every live peer, which cancels what it knows
    /// and forwards no further.
    pub fn cancel_from_client(&mut self, object_id: ObjectId, force: bool, recursive: bool, now_ms: u64) {
        if self.tasks.producer_of(&object_id).is_some() {
            self.cancel(object_id, force, recursive, now_ms);
            return;
        }
        let peers: Vec<NodeId> = self.peers.alive_nodes().collect();
        for node in peers {
            self.actions.push(Action::PeerCancel { node, object_id, force, recursive });
        }
    }

    pub fn cancel(&mut self, object_id: ObjectId, force: bool, recursive: bool, now_ms: u64) {
        let Some(task_id) = self.tasks.producer_of(&object_id) else { return };
        let Some(task) = self.tasks.get_mut(&task_id) else { return };
        if task.cancelled {
            return;
        }
        task.cancelled = true;
        let children: Vec<ObjectId> = if recursive {
            let parent = task_id.to_vec();
            self.tasks
                .values()
                .filter(|t| t.spec.parent_task_id == parent && t.spec.kind != TaskKind::ActorCreation as i32)
                .filter_map(|t| t.spec.return_ids.first().and_then(|r| ObjectId::from_bytes(r).ok()))
                .collect()
        } else {
            Vec::new()
        };
        // The task itself first: an async actor call awaiting a child must see its own
        // CancelledError, not the child's TaskCancelledError arriving ahead of it.
        self.cancel_one(task_id, object_id, force, recursive, now_ms);
        for child in children {
            self.cancel(child, force, true, now_ms);
        }
    }

    fn cancel_one(&mut self, task_id: TaskId, object_id: ObjectId, force: bool, recursive: bool, now_ms: u64) {
        let Some(task) = self.tasks.get_mut(&task_id) else { return };
        match task.state {
            TaskState::Running(worker_id) => {
                if task.spec.kind != TaskKind::ActorTask as i32 {
                    self.signal_worker(worker_id, if force { libc::SIGKILL } else { libc::SIGINT });
                } else if let Some(tx) = self.workers.get(&worker_id).and_then(|w| w.tx.as_ref()) {
                    // An actor call is never interrupted: an async one is cancelled on its
                    // event loop, one still queued in the worker is skipped, and a running sync
                    // one sees `is_canceled()`. Its result becomes TaskCancelledError either way.
                    let cancel = Assignment { cancel_task_id: task_id.to_vec(), ..Default::default() };
                    let _ = tx.send(Ok(cancel));
                }
            }
            TaskState::Forwarded(node) => {
                self.actions.push(Action::PeerCancel { node, object_id, force, recursive });
            }
            TaskState::Ready | TaskState::WaitingArgs => {
                self.unqueue(task_id);
                self.finish_task(task_id, Some((SystemErrorKind::TaskCancelled, cancelled_message(task_id))), now_ms);
            }
        }
    }

    /// What a cancelled task's results become: `TaskCancelledError`, unless the
    /// cancel already settled them (its owner died: `OwnerDiedError`).
    fn cancelled_error(&self, task_id: TaskId) -> Option<(SystemErrorKind, String)> {
        let task = self.tasks.get(&task_id)?;
        let settled =
            task.spec.return_ids.iter().filter_map(|r| ObjectId::from_bytes(r).ok()).all(|r| self.is_ready(&r));
        (!settled).then(|| (SystemErrorKind::TaskCancelled, cancelled_message(task_id)))
    }

    pub(super) fn after_crash(&mut self, task_id: TaskId, pid: u32, status: &str, now_ms: u64) {
        let Some(task) = self.tasks.get(&task_id) else { return };
        if task.cancelled {
            let error = self.cancelled_error(task_id);
            self.finish_task(task_id, error, now_ms);
        } else if task.retries_left != 0 && !self.shutting_down {
            let name = task.spec.name.clone();
            self.actions.push(Action::warn(format!("task {name} lost its worker (pid={pid}, {status}); retrying")));
            self.retry(task_id, now_ms);
        } else {
            let message = format!(
                "The worker running task {} (pid={pid}) died unexpectedly ({status}), and the task has no retries left",
                task.spec.name
            );
            self.finish_task(task_id, Some((SystemErrorKind::WorkerCrashed, message)), now_ms);
        }
    }

    pub(super) fn fail_all_ready(&mut self, message: &str, now_ms: u64) {
        let ready = self.tasks.ready.drain();
        for task_id in ready {
            let creation_of = self
                .tasks
                .get(&task_id)
                .filter(|t| t.spec.kind == TaskKind::ActorCreation as i32)
                .and_then(|t| ActorId::from_bytes(&t.spec.actor_id).ok());
            self.finish_task(task_id, Some((SystemErrorKind::System, message.to_string())), now_ms);
            if let Some(actor_id) = creation_of
                && let Some(actor) = self.actors.get_mut(&actor_id)
            {
                actor.state = ActorState::Dead;
                actor.death_cause = message.to_string();
                self.actions.push(Action::ActorChanged(actor_id));
                self.fail_actor_queue(actor_id, now_ms);
                self.release_actor(actor_id, now_ms);
            }
        }
    }
}

/// Ray's text for a cancelled task: it names the task, as `ObjectRef.task_id()` does.
fn cancelled_message(task_id: TaskId) -> String {
    format!("Task: TaskID({}) was cancelled.", task_id.hex())
}
