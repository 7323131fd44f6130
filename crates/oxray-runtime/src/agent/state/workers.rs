//! The worker pool: worker processes this node started, which are idle, how
//! many are still starting, and what happens when one exits.

use super::{Action, ActorState, AgentState, AssignmentSender, TaskState};
use crate::agent::AgentError;
use crate::errors::SystemErrorKind;
use crate::ids::{ActorId, JobId, ObjectId, TaskId, WorkerId};
use crate::resources::ResourceSet;
use crate::resources::group_names::cpus_to_lend;
use crate::task_env::WorkerStartEnv;
use oxray_proto::{Assignment, TaskKind};
use std::collections::{HashMap, HashSet, VecDeque};

#[derive(Debug, Clone, PartialEq)]
pub(super) enum WorkerRole {
    Pool,
    Actor(ActorId),
}

#[derive(Debug)]
pub(super) struct WorkerEntry {
    pub(super) pid: u32,
    pub(super) role: WorkerRole,
    pub(super) tx: Option<AssignmentSender>,
    pub(super) running: Option<TaskId>,
    /// An assignment made before the worker connected (actor creation).
    pub(super) pending: Option<Assignment>,
    pub(super) held_refs: HashSet<ObjectId>,
    pub(super) label: String,
    /// The job whose task or actor runs there: its output goes to that driver.
    pub(super) job_id: Option<JobId>,
    pub(super) blocked: bool,
    /// What an actor's worker lent while blocked in `get` (its CPUs), taken back after.
    pub(super) lent: ResourceSet,
    /// It ran a task without GPUs: never given a GPU task after (as in Ray, a GPU task
    /// starts in a worker whose CUDA state no CPU-only task has touched).
    pub(super) ran_cpu_only: bool,
}

/// The worker processes of this node.
pub(super) struct WorkerPool {
    workers: HashMap<WorkerId, WorkerEntry>,
    /// Connected pool workers with nothing to run, oldest first.
    idle: VecDeque<WorkerId>,
    /// Pool workers spawned but not connected yet.
    starting: usize,
    /// At most this many pool workers start at once.
    max_starting: usize,
    /// Environment every worker starts with.
    env: Vec<(String, String)>,
    /// What a pool worker starts with, as the rules for a task's environment read it.
    pub(super) start_env: WorkerStartEnv,
    /// Workers that exited before connecting, in a row: three fail the ready tasks.
    failed_starts: u32,
    /// Actors' worker processes started and not connected yet.
    actors_starting: HashSet<WorkerId>,
    /// Actors' worker processes to start once fewer are starting (with their environments).
    deferred: VecDeque<(WorkerId, Vec<(String, String)>)>,
}

/// Actors' worker processes starting at once, at most: each start (a fork, then connecting) is
/// cheap, but a thousand at once starve the agent, and the workers' connections time out.
const ACTOR_STARTS_AT_ONCE: usize = 32;

impl WorkerPool {
    pub(super) fn new(max_starting: usize, env: Vec<(String, String)>, inherited: WorkerStartEnv) -> Self {
        let start_env = inherited.with(env.iter().map(|(name, value)| (name.as_str(), value.as_str())));
        WorkerPool {
            start_env,
            workers: HashMap::new(),
            idle: VecDeque::new(),
            starting: 0,
            max_starting: max_starting.max(1),
            env,
            failed_starts: 0,
            actors_starting: HashSet::new(),
            deferred: VecDeque::new(),
        }
    }

    /// Whether `worker_id` is an actor's worker that was starting: it no longer is.
    fn actor_started(&mut self, worker_id: WorkerId) -> bool {
        self.actors_starting.remove(&worker_id)
    }

    pub(super) fn get(&self, id: &WorkerId) -> Option<&WorkerEntry> {
        self.workers.get(id)
    }

    pub(super) fn get_mut(&mut self, id: &WorkerId) -> Option<&mut WorkerEntry> {
        self.workers.get_mut(id)
    }

    pub(super) fn contains_key(&self, id: &WorkerId) -> bool {
        self.workers.contains_key(id)
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &WorkerEntry> {
        self.workers.values()
    }

    /// An idle worker that may run a task with (`gpu`) or without GPUs, oldest first.
    fn idle_for(&self, gpu: bool) -> Option<usize> {
        self.idle.iter().position(|w| !gpu || self.workers.get(w).is_some_and(|e| !e.ran_cpu_only))
    }

    pub(super) fn has_idle_for(&self, gpu: bool) -> bool {
        self.idle_for(gpu).is_some()
    }

    pub(super) fn take_idle_for(&mut self, gpu: bool) -> Option<WorkerId> {
        let at = self.idle_for(gpu)?;
        self.idle.remove(at)
    }

    pub(super) fn make_idle(&mut self, id: WorkerId) {
        self.idle.push_back(id);
    }

    /// How many more pool workers to start for `wanted` runnable tasks.
    pub(super) fn to_start(&self, wanted: usize) -> usize {
        wanted.min(self.max_starting).saturating_sub(self.starting)
    }
}

impl AgentState {
    /// The environment every worker of this node starts with.
    pub fn worker_env(&self) -> &[(String, String)] {
        &self.workers.env
    }

    /// Whether `pid` is one of this node's worker processes.
    pub fn is_worker_pid(&self, pid: u32) -> bool {
        pid != 0 && self.workers.values().any(|w| w.pid == pid)
    }

    /// How many worker processes this node has (starting, idle or busy).
    pub fn worker_count(&self) -> usize {
        self.workers.values().count()
    }

    pub(super) fn spawn_worker(
        &mut self,
        role: WorkerRole,
        label: String,
        job_id: Option<JobId>,
        extra_env: Vec<(String, String)>,
    ) -> WorkerId {
        let worker_id = WorkerId::random();
        if role == WorkerRole::Pool {
            self.workers.starting += 1;
        }
        let mut env = self.workers.env.clone();
        env.extend(extra_env);
        let is_actor = matches!(role, WorkerRole::Actor(_));
        self.workers.workers.insert(
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
                lent: ResourceSet::new(),
                ran_cpu_only: false,
            },
        );
        if is_actor && self.workers.actors_starting.len() >= ACTOR_STARTS_AT_ONCE {
            self.workers.deferred.push_back((worker_id, env));
        } else {
            if is_actor {
                self.workers.actors_starting.insert(worker_id);
            }
            self.actions.push(Action::SpawnWorker { worker_id, env });
        }
        worker_id
    }

    /// Starts the deferred actor workers there is room for now (those whose entry is gone, an
    /// actor killed while it waited, are dropped).
    fn start_deferred_workers(&mut self) {
        while self.workers.actors_starting.len() < ACTOR_STARTS_AT_ONCE && !self.shutting_down {
            let Some((worker_id, env)) = self.workers.deferred.pop_front() else { return };
            if self.workers.contains_key(&worker_id) {
                self.workers.actors_starting.insert(worker_id);
                self.actions.push(Action::SpawnWorker { worker_id, env });
            }
        }
    }

    pub(super) fn run_on(&mut self, worker_id: WorkerId, task_id: TaskId, gpus: Vec<(usize, i64)>, now_ms: u64) {
        let task = self.tasks.get_mut(&task_id).expect("task exists");
        self.available.subtract(&task.holds);
        let no_gpus = gpus.is_empty();
        task.gpus = gpus;
        task.start_on(worker_id, now_ms);
        let label = task.spec.name.clone();
        let job_id = task.job;
        let assignment = self.assignment_for(task_id, worker_id);
        let worker = self.workers.get_mut(&worker_id).expect("idle worker exists");
        worker.ran_cpu_only |= no_gpus;
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
    pub fn worker_connected(
        &mut self,
        worker_id: WorkerId,
        tx: AssignmentSender,
        now_ms: u64,
    ) -> Result<(), AgentError> {
        if !self.workers.contains_key(&worker_id) {
            return Err(AgentError::UnknownWorker(worker_id));
        }
        self.workers.failed_starts = 0;
        if self.workers.actor_started(worker_id) {
            self.start_deferred_workers();
        }
        let worker = self.workers.get_mut(&worker_id).expect("checked above");
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
            self.workers.starting = self.workers.starting.saturating_sub(1);
            self.workers.make_idle(worker_id);
            self.schedule(now_ms);
        }
        Ok(())
    }

    /// Release a blocked worker's resources while it waits in `get`, so nested
    /// tasks can use them (as Ray does); `false` takes them back.
    pub fn set_worker_blocked(&mut self, worker_id: WorkerId, blocked: bool, now_ms: u64) {
        let Some(worker) = self.workers.get_mut(&worker_id) else { return };
        if worker.blocked == blocked {
            return;
        }
        if let (WorkerRole::Actor(actor_id), None) = (&worker.role, worker.running) {
            // A live actor waiting in `get` (e.g. a training rank waiting for its next batch)
            // lends its CPUs, so the tasks it waits for can run on them.
            let lend = self.actors.get(actor_id).and_then(|a| a.held.as_ref()).map(|(_, holds)| cpus_to_lend(holds));
            let Some(lend) = lend else { return };
            let worker = self.workers.get_mut(&worker_id).expect("looked up above");
            worker.blocked = blocked;
            if blocked {
                self.available.add(&lend);
                worker.lent = lend;
                self.schedule(now_ms);
            } else {
                let lent = std::mem::take(&mut worker.lent);
                self.available.subtract(&lent);
            }
            return;
        }
        let Some(task_id) = worker.running else { return };
        let Some(task) = self.tasks.get(&task_id) else { return };
        worker.blocked = blocked;
        if blocked {
            self.available.add(&task.holds);
            self.schedule(now_ms);
        } else {
            self.available.subtract(&task.holds);
        }
    }

    /// A worker process exited. Retries or fails what it was running, and
    /// restarts or buries its actor.
    pub fn worker_exited(&mut self, worker_id: WorkerId, status: String, now_ms: u64) {
        let Some(worker) = self.workers.workers.remove(&worker_id) else { return };
        self.workers.idle.retain(|w| *w != worker_id);
        if self.workers.actor_started(worker_id) {
            self.start_deferred_workers();
        }
        // CPUs its actor lent while blocked come back before the actor's holds are released.
        self.available.subtract(&worker.lent);
        self.objects.release_all_views(worker_id.into());
        let held: Vec<ObjectId> = worker.held_refs.iter().copied().collect();
        for id in held {
            if let Some(meta) = self.objects.get_mut(&id) {
                meta.holders.remove(&worker_id.into());
            }
            self.maybe_free(id, now_ms);
        }
        if worker.tx.is_none() && !self.shutting_down {
            if worker.role == WorkerRole::Pool {
                self.workers.starting = self.workers.starting.saturating_sub(1);
            }
            self.workers.failed_starts += 1;
            if self.workers.failed_starts >= 3 {
                self.workers.failed_starts = 0;
                self.fail_all_ready(&format!(
                    "Worker processes keep exiting before they start ({status}); see the worker logs in the session directory"
                ), now_ms);
            }
        }
        self.owner_exited(worker_id, worker.pid, now_ms);
        match worker.role {
            WorkerRole::Pool => {
                if let Some(task_id) = worker.running {
                    // The worker entry is gone: pass on whether it had lent its CPUs back.
                    self.release_task_resources_as(task_id, worker.blocked);
                    self.after_crash(task_id, worker.pid, &status, now_ms);
                }
            }
            WorkerRole::Actor(actor_id) => {
                self.actor_worker_exited(actor_id, worker_id, worker.pid, worker.blocked, &status, now_ms)
            }
        }
        if worker.job_id.is_some_and(|job| self.functions.has_ended(&job)) {
            // A task of an ended job was killed: the functions only it ran can go now.
            self.drop_ended_jobs_functions(None);
        }
        self.schedule(now_ms);
    }

    /// A worker's death ends what it owned, as in Ray: the actors it created
    /// (unless detached) die with it, and the tasks it submitted that have not
    /// finished are stopped, their results `OwnerDiedError`. Whoever was handed
    /// one of those refs or actors gets an error instead of waiting for ever.
    fn owner_exited(&mut self, worker_id: WorkerId, pid: u32, now_ms: u64) {
        let owner = worker_id.to_vec();
        let why = format!("its owner, the worker with pid {pid}, died");
        let actors: Vec<ActorId> = self
            .actors
            .values()
            .filter(|a| !a.proxy && !a.creation.detached && a.state != ActorState::Dead && a.creation.owner_id == owner)
            .map(|a| a.id)
            .collect();
        for actor_id in actors {
            let class = self.actors.get(&actor_id).map(|a| a.class_name.clone()).unwrap_or_default();
            self.kill_actor_because(actor_id, format!("The actor {class} died because {why}"), now_ms);
        }
        let tasks: Vec<TaskId> = self
            .tasks
            .iter()
            .filter(|(_, t)| t.spec.kind == TaskKind::Normal as i32 && t.spec.owner_id == owner && !t.cancelled)
            .map(|(id, _)| *id)
            .collect();
        for task_id in tasks {
            let Some(task) = self.tasks.get_mut(&task_id) else { continue };
            task.cancelled = true;
            let message = format!("The result of task {} was lost because {why} before it finished", task.spec.name);
            let returns = task.spec.return_ids.clone();
            match task.state {
                TaskState::Running(runner) => {
                    // Its results read as the owner's death; the worker's exit ends the task.
                    self.signal_worker(runner, libc::SIGKILL);
                    for id in returns.iter().filter_map(|r| ObjectId::from_bytes(r).ok()) {
                        self.store_error(id, SystemErrorKind::OwnerDied, &message, now_ms);
                    }
                }
                TaskState::Forwarded(node) => {
                    if let Some(object_id) = returns.first().and_then(|r| ObjectId::from_bytes(r).ok()) {
                        self.actions.push(Action::PeerCancel { node, object_id, force: true, recursive: false });
                    }
                    self.finish_task(task_id, Some((SystemErrorKind::OwnerDied, message)), now_ms);
                }
                TaskState::Ready | TaskState::WaitingArgs => {
                    self.unqueue(task_id);
                    self.finish_task(task_id, Some((SystemErrorKind::OwnerDied, message)), now_ms);
                }
            }
        }
    }

    /// Sends `signal` to the process of `worker_id`, once it has one.
    pub(super) fn signal_worker(&mut self, worker_id: WorkerId, signal: i32) {
        if let Some(w) = self.workers.get(&worker_id).filter(|w| w.pid != 0) {
            self.actions.push(Action::Signal { pid: w.pid, signal });
        }
    }

    pub fn has_worker(&self, worker_id: &WorkerId) -> bool {
        self.workers.contains_key(worker_id)
    }
}
