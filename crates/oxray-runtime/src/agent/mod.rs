//! The node agent: a gRPC service over `AgentState`, plus the worker processes
//! it starts and watches.

mod error;
mod jobs;
mod logs;
mod node_logs;
mod node_state;
pub(crate) mod node_stats;
mod peers;
mod profile;
mod serve_proxy;
mod service;
pub mod state;
mod template;
mod workers;

pub use workers::{Sink as OutputSink, print_line as print_worker_line, set_output_sinks};

pub use error::{AgentError, CopyError};
pub use service::AgentService;
pub use state::{Action, AgentConfig, AgentState, LogLevel};
pub use workers::SpawnConfig;

use crate::clock;
use crate::ids::{ClientId, NodeId, ObjectId, TaskId, WorkerId};
use oxray_proto::head_service_client::HeadServiceClient;
use oxray_proto::{ActorInfo, NodeInfo, PeerEvent, RefDeltas, TaskDoneRequest, TaskKind, TaskSpec, peer_event};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

pub struct AgentShared {
    pub state: Mutex<AgentState>,
    /// Woken whenever objects may have become ready.
    pub changed: Notify,
    pub spawn: Mutex<Option<SpawnConfig>>,
    pub head: Mutex<Option<HeadConn>>,
    /// Actor updates for the head, sent in order by one task.
    actor_updates: Mutex<Option<tokio::sync::mpsc::UnboundedSender<ActorInfo>>>,
    /// The task that sends them, stopped at shutdown with what it still holds (the head is
    /// going away too).
    actor_updates_sender: Mutex<Option<tokio::task::JoinHandle<()>>>,
    pub(crate) peers: peers::PeerLinks,
    /// Worker output for subscribed drivers.
    logs: logs::LogHub,
    /// Jobs the head placed on this node.
    pub(crate) jobs: jobs::NodeJobs,
    /// Warm processes that fork this node's workers.
    pub(crate) templates: template::Templates,
    /// Serve's HTTP proxy on this node, when the controller asked for one.
    pub(crate) serve_proxy: serve_proxy::ServeProxyHost,
    /// The application metrics this node's processes reported, for its `/metrics`.
    pub(crate) user_metrics: Mutex<crate::user_metrics::NodeMetrics>,
}

pub type HeadConn = HeadServiceClient<
    tonic::service::interceptor::InterceptedService<tonic::transport::Channel, crate::auth::AttachToken>,
>;

/// Object ids from a request.
pub(crate) fn object_ids(raw: &[Vec<u8>]) -> Result<Vec<ObjectId>, AgentError> {
    Ok(crate::ids::parse_all(raw, ObjectId::from_bytes)?)
}

impl AgentShared {
    pub fn new(state: AgentState) -> Arc<Self> {
        Arc::new(AgentShared {
            state: Mutex::new(state),
            changed: Notify::new(),
            spawn: Mutex::new(None),
            head: Mutex::new(None),
            actor_updates: Mutex::new(None),
            actor_updates_sender: Mutex::new(None),
            peers: peers::PeerLinks::default(),
            logs: logs::LogHub::default(),
            jobs: jobs::NodeJobs::default(),
            templates: template::Templates::default(),
            serve_proxy: serve_proxy::ServeProxyHost::default(),
            user_metrics: Mutex::default(),
        })
    }

    /// Connects this agent to the head: actor registrations and updates go there.
    pub fn attach_head(&self, head: HeadConn) {
        // Unbounded: it is fed from `run_actions`, which must not wait. It holds one
        // message per state change of this node's actors (a handful per actor life),
        // drained in order by one task whose calls each have the head channel's deadline.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<ActorInfo>();
        let mut sender = head.clone();
        let task = tokio::spawn(async move {
            while let Some(info) = rx.recv().await {
                if let Err(e) = sender.update_actor(info).await {
                    tracing::warn!("could not update the head's actor table: {}", e.message());
                }
            }
        });
        *self.actor_updates_sender.lock() = Some(task);
        *self.actor_updates.lock() = Some(tx);
        *self.head.lock() = Some(head);
    }

    /// Stops sending actor updates to the head (this node is shutting down).
    pub(crate) fn stop_actor_updates(&self) {
        self.actor_updates.lock().take();
        if let Some(task) = self.actor_updates_sender.lock().take() {
            task.abort();
        }
    }

    fn head(&self) -> Option<HeadConn> {
        self.head.lock().clone()
    }

    fn head_or_unavailable(&self) -> Result<HeadConn, AgentError> {
        self.head().ok_or(AgentError::NoHead)
    }

    /// Runs `f` under the state lock, then carries out the actions it queued.
    pub fn with_state<T>(self: &Arc<Self>, f: impl FnOnce(&mut AgentState) -> T) -> T {
        let (out, actions) = {
            let mut st = self.state.lock();
            let out = f(&mut st);
            let actions = st.take_actions();
            // Messages to other nodes are queued before the lock is released, so
            // each node's link carries them in the order the state made them.
            (out, self.send_to_peers(&st, actions))
        };
        self.changed.notify_waiters();
        self.run_actions(actions);
        out
    }

    /// Reserves room for an object through `reserve` (run under the state lock),
    /// first copying the objects it asks to spill on a blocking thread, never
    /// under the lock. After a few rounds it stops asking (the object goes to disk).
    pub(crate) async fn reserving<T>(
        self: &Arc<Self>,
        size: usize,
        mut reserve: impl FnMut(&mut AgentState, bool) -> Result<state::Reservation<T>, AgentError>,
    ) -> Result<T, AgentError> {
        const SPILL_ROUNDS: usize = 8;
        let mut round = 0;
        loop {
            let jobs = match self.with_state(|st| reserve(st, round < SPILL_ROUNDS))? {
                state::Reservation::Done(reserved) => return Ok(reserved),
                state::Reservation::SpillFirst(jobs) => jobs,
            };
            round += 1;
            let this = self.clone();
            // Its own task: a caller that goes away mid-copy still records the outcome,
            // without which the objects would stay marked as being spilled.
            let finished = tokio::spawn(async move {
                let copies = tokio::task::spawn_blocking(move || {
                    jobs.into_iter()
                        .map(|job| {
                            let copied = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.run()))
                                .unwrap_or_else(|_| Err(std::io::Error::other("the spill copy panicked")));
                            (job, copied)
                        })
                        .collect::<Vec<_>>()
                })
                .await;
                match copies {
                    Ok(done) => this.with_state(|st| st.finish_spills(size, done)),
                    Err(e) => Err(AgentError::StoreFull { size, source: std::io::Error::other(e.to_string()) }),
                }
            });
            finished
                .await
                .map_err(|e| AgentError::StoreFull { size, source: std::io::Error::other(e.to_string()) })??;
        }
    }

    fn run_actions(self: &Arc<Self>, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::SpawnWorker { worker_id, env } => {
                    // Spawned from a runtime thread, never the caller's: PDEATHSIG follows
                    // the spawning thread, and an in-process caller may be a short-lived
                    // user thread.
                    let this = self.clone();
                    tokio::spawn(async move { this.start_worker(worker_id, env) });
                }
                Action::Signal { pid, signal } => signal_worker(pid, signal),
                Action::RemovePlacementGroup(pg_id) => {
                    let Some(mut head) = self.head() else { continue };
                    tokio::spawn(async move {
                        let request =
                            oxray_proto::PlacementGroupRequest { pg_id: pg_id.to_vec(), ..Default::default() };
                        if let Err(e) = head.remove_placement_group(request).await {
                            tracing::warn!(
                                "could not remove placement group {pg_id} of a gone driver: {}",
                                e.message()
                            );
                        }
                    });
                }
                Action::Log { level: LogLevel::Debug, message } => tracing::debug!("{message}"),
                Action::Log { level: LogLevel::Info, message } => tracing::info!("{message}"),
                Action::Log { level: LogLevel::Warn, message } => tracing::warn!("{message}"),
                Action::ActorChanged(actor_id) => {
                    // Deaths during shutdown are not news: the head is going away too.
                    // An actor living elsewhere is reported by its own node.
                    let (info, owner) = {
                        let st = self.state.lock();
                        let actor = st.actor(&actor_id).filter(|a| !st.is_shutting_down() && a.remote.is_none());
                        (actor.map(|a| actor_info(a, &st.node_id)), actor.and_then(|a| a.hosted_for))
                    };
                    if let Some(owner) = owner
                        && let Some(info) = &info
                    {
                        self.peers.send_event(owner, PeerEvent { event: Some(peer_event::Event::Actor(info.clone())) });
                    }
                    if let (Some(info), Some(tx)) = (info, self.actor_updates.lock().as_ref()) {
                        let _ = tx.send(info);
                    }
                }
                Action::Pull { id, address } => {
                    let this = self.clone();
                    tokio::spawn(async move { this.pull(id, address).await });
                }
                Action::Forward { .. }
                | Action::ResetPeerLink { .. }
                | Action::ReleaseRemote { .. }
                | Action::PeerCancel { .. }
                | Action::PeerKillActor { .. }
                | Action::PeerJobEnded { .. } => {}
            }
        }
    }

    /// Starts the template that forks workers started with `extra_env` (this node's usual
    /// setup when empty), so the first one does not wait for its imports.
    pub fn warm_worker_template(&self, extra_env: &[(String, String)]) {
        let Some(cfg) = self.spawn.lock().clone() else { return };
        let mut env = self.state.lock().worker_env().to_vec();
        env.extend_from_slice(extra_env);
        self.templates.warm(&cfg, &env, extra_env.is_empty());
    }

    fn start_worker(self: &Arc<Self>, worker_id: WorkerId, env: Vec<(String, String)>) {
        let Some(cfg) = self.spawn.lock().clone() else { return };
        let Some(forked) = self.templates.fork(&cfg, worker_id, &env) else {
            self.start_worker_process(&cfg, worker_id, &env);
            return;
        };
        let this = self.clone();
        tokio::spawn(async move {
            let Ok(answer) = tokio::time::timeout(template::REPLY_TIMEOUT, forked.pid).await else {
                tracing::warn!(
                    "a worker template did not answer within {:?}: starting the worker without it",
                    template::REPLY_TIMEOUT
                );
                this.start_worker_process(&cfg, worker_id, &env);
                return;
            };
            match answer {
                Ok(Ok(pid)) => {
                    let exit = async move { forked.exit.await.unwrap_or_else(|_| "unknown exit".into()) };
                    let outputs = [forked.stdout, forked.stderr].map(|pipe| {
                        tokio::net::unix::pipe::Receiver::from_owned_fd(std::os::fd::OwnedFd::from(pipe))
                            .map(|r| Box::new(r) as Box<dyn tokio::io::AsyncRead + Unpin + Send>)
                            .ok()
                    });
                    let [stdout, stderr] = outputs;
                    this.watch_worker(&cfg, worker_id, pid, stdout, stderr, exit);
                }
                Ok(Err(e)) => {
                    tracing::warn!("a worker template could not fork a worker ({e}): starting it without one");
                    this.start_worker_process(&cfg, worker_id, &env);
                }
                Err(_) => this.start_worker_process(&cfg, worker_id, &env),
            }
        });
    }

    /// Starts a worker as a fresh interpreter.
    fn start_worker_process(self: &Arc<Self>, cfg: &SpawnConfig, worker_id: WorkerId, env: &[(String, String)]) {
        let mut child = match workers::spawn_worker(cfg, worker_id, env) {
            Ok(child) => child,
            Err(e) => {
                let status = format!("could not start {}: {e}", cfg.python);
                self.with_state(|st| st.worker_exited(worker_id, status, clock::now_ms()));
                return;
            }
        };
        let pid = child.id().unwrap_or(0);
        let stdout = child.stdout.take().map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>);
        let stderr = child.stderr.take().map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>);
        let exit = async move {
            match child.wait().await {
                Ok(s) => describe_exit(s),
                Err(e) => format!("wait failed: {e}"),
            }
        };
        self.watch_worker(cfg, worker_id, pid, stdout, stderr, exit);
    }

    /// Records a started worker's pid, forwards its output, and reports its exit.
    fn watch_worker(
        self: &Arc<Self>,
        cfg: &SpawnConfig,
        worker_id: WorkerId,
        pid: u32,
        stdout: Option<Box<dyn tokio::io::AsyncRead + Unpin + Send>>,
        stderr: Option<Box<dyn tokio::io::AsyncRead + Unpin + Send>>,
        exit: impl Future<Output = String> + Send + 'static,
    ) {
        self.state.lock().set_worker_pid(worker_id, pid);
        let _ = oxray_object_store::create_private_dir_all(&cfg.log_dir());
        let log_path = cfg.log_dir().join(format!("worker-{}-{pid}.log", worker_id.short()));
        let forward = cfg.forward_output;
        for (stream, to_stderr) in [(stdout, false), (stderr, true)] {
            let Some(stream) = stream else { continue };
            let this = self.clone();
            let path = log_path.clone();
            let host = cfg.agent_address.rsplit_once(':').map_or(cfg.agent_address.clone(), |(h, _)| h.to_string());
            tokio::spawn(async move {
                let emit = move |line: &str| {
                    let (label, job_id) = match this.state.lock().worker_label(&worker_id) {
                        Some((label, pid, job_id)) => (format!("{label} pid={pid}"), job_id),
                        None => (format!("pid={pid}"), None),
                    };
                    if forward {
                        workers::print_line(&label, line, to_stderr);
                    }
                    this.logs.publish(job_id, format!("{label}, ip={host}"), line.to_string(), to_stderr);
                };
                workers::forward_output(stream, path, emit).await;
            });
        }
        let this = self.clone();
        tokio::spawn(async move {
            let status = exit.await;
            this.with_state(|st| st.worker_exited(worker_id, status, clock::now_ms()));
        });
    }

    /// Waits until `need` of the ids are ready (or unknown), or the deadline passes; with
    /// `stop_at_error`, also stops at the first one that holds a failed task's error.
    async fn wait_ready(
        self: &Arc<Self>,
        ids: &[ObjectId],
        need: usize,
        deadline: Option<Instant>,
        blocked_worker: Option<WorkerId>,
        stop_at_error: bool,
    ) -> Waited {
        let mut blocked = false;
        let mut pending: std::collections::VecDeque<ObjectId> = ids.iter().copied().collect();
        let needs_all = need >= ids.len();
        // The node's count of error objects when the ids were last searched for one: errors are
        // rare, so a wait looks through its ids again only when that count moved.
        let mut errors_searched: Option<u64> = None;
        let waited = loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (ready, failed) = {
                let st = self.state.lock();
                let done = |id: &ObjectId| st.is_settled(id);
                let mut failed = None;
                if stop_at_error && errors_searched != Some(st.errors_ready()) {
                    errors_searched = Some(st.errors_ready());
                    failed = ids.iter().find(|id| st.holds_error(id)).copied();
                }
                if needs_all {
                    // Objects mostly finish in order: drop finished ones from the
                    // front and stop at the first pending one (O(n) over the wait).
                    while pending.front().is_some_and(done) {
                        pending.pop_front();
                    }
                } else {
                    pending.retain(|id| !done(id));
                }
                (ids.len() - pending.len(), failed)
            };
            if let Some(id) = failed {
                break Waited::Failed(id);
            }
            if ready >= need {
                break Waited::Ready;
            }
            if let (Some(worker), false) = (blocked_worker, blocked) {
                blocked = true;
                self.with_state(|st| st.set_worker_blocked(worker, true, clock::now_ms()));
                continue;
            }
            if !notified_before(notified, deadline).await {
                break Waited::TimedOut;
            }
        };
        if let (Some(worker), true) = (blocked_worker, blocked) {
            self.with_state(|st| st.set_worker_blocked(worker, false, clock::now_ms()));
        }
        waited
    }

    /// Waits until `done` holds of the state (checked again after every change).
    pub(crate) async fn wait_for_state(self: &Arc<Self>, done: impl Fn(&AgentState) -> bool) {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if done(&self.state.lock()) {
                return;
            }
            notified.await;
        }
    }

    fn apply_increfs(self: &Arc<Self>, client: ClientId, deltas: &Option<RefDeltas>) -> Result<(), AgentError> {
        if let Some(d) = deltas {
            let inc = object_ids(&d.incref)?;
            self.state.lock().add_holders(client, &inc);
        }
        Ok(())
    }

    fn apply_decrefs(self: &Arc<Self>, client: ClientId, deltas: &Option<RefDeltas>) -> Result<(), AgentError> {
        if let Some(d) = deltas {
            let dec = object_ids(&d.decref)?;
            let released = object_ids(&d.released)?;
            if !dec.is_empty() || !released.is_empty() {
                self.with_state(|st| {
                    st.release_views(client, &released);
                    st.remove_holders(client, &dec, clock::now_ms());
                });
            }
        }
        Ok(())
    }

    /// Runs one request between its reference changes, in the order that keeps
    /// objects alive: increfs first, then the request itself (which may pin or
    /// unpin objects), then decrefs and released views.
    fn with_ref_changes<T>(
        self: &Arc<Self>,
        client: ClientId,
        deltas: &Option<RefDeltas>,
        request: impl FnOnce() -> Result<T, AgentError>,
    ) -> Result<T, AgentError> {
        self.apply_increfs(client, deltas)?;
        let out = request()?;
        self.apply_decrefs(client, deltas)?;
        Ok(out)
    }

    /// `Some(client)` when the client is one of this node's workers: a worker
    /// waiting in get()/wait() lends its task's CPUs back meanwhile.
    fn as_blocking_worker(&self, client: ClientId) -> Option<WorkerId> {
        let worker = client.as_worker();
        self.state.lock().has_worker(&worker).then_some(worker)
    }

    /// A task's results: the worker may now hold refs it was passed, and the
    /// completion unpins the task's arguments.
    fn handle_task_done(self: &Arc<Self>, worker: WorkerId, done: TaskDoneRequest) -> Result<(), AgentError> {
        let task = TaskId::from_bytes(&done.task_id)?;
        let nested = object_ids(&done.nested_refs)?;
        let deltas = done.ref_deltas.clone();
        self.with_ref_changes(worker.into(), &deltas, || {
            self.with_state(|st| st.task_done(worker, task, done, &nested, clock::now_ms()))
        })
    }

    /// Tasks and actor calls from one client, in the order it made them.
    async fn apply_submissions(self: &Arc<Self>, specs: Vec<TaskSpec>) -> Result<(), AgentError> {
        if specs.is_empty() {
            return Ok(());
        }
        self.learn_before_submit(&specs).await;
        self.with_state(|st| {
            let now_ms = clock::now_ms();
            for spec in specs {
                let owner = ClientId::from_bytes(&spec.owner_id)?;
                if st.driver_has_ended(&owner) {
                    // Its work was cleaned up: a driver that is in fact still there (it was
                    // stopped past its lease) must hear so, not wait for it for ever.
                    return Err(AgentError::DriverEnded(owner));
                }
                if spec.kind == TaskKind::ActorTask as i32 {
                    st.submit_actor_task(owner, spec, now_ms)?;
                } else {
                    st.submit(owner, spec, now_ms)?;
                }
            }
            st.schedule(now_ms);
            Ok(())
        })
    }

    pub fn node_info(&self, address: &str) -> NodeInfo {
        let st = self.state.lock();
        NodeInfo {
            node_id: st.node_id.to_vec(),
            address: address.to_string(),
            ip: address.rsplit_once(':').map(|(h, _)| h.to_string()).unwrap_or_default(),
            alive: true,
            total: st.total().to_map(),
            available: st.reported_available().to_map(),
            is_head: false,
            session_dir: String::new(),
            start_time_ms: 0,
            metrics_address: String::new(),
            labels: st.labels.clone(),
        }
    }
}

/// Sends `signal` to a worker. SIGKILL goes to its whole process group (each
/// worker leads its own session), so processes a task started die with it.
pub(crate) fn signal_worker(pid: u32, signal: i32) {
    let Ok(pid) = i32::try_from(pid) else { return };
    if pid <= 1 {
        return;
    }
    if signal == libc::SIGKILL {
        // SAFETY: kill(2) on the process group of a worker this agent started
        // (setsid made its pid the group id); a group already gone gives ESRCH.
        unsafe { libc::kill(-pid, signal) };
    }
    // SAFETY: plain kill(2) on a pid we started.
    unsafe { libc::kill(pid, signal) };
}

fn describe_exit(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (_, Some(sig)) if sig == libc::SIGKILL => "killed by SIGKILL".into(),
        (_, Some(sig)) => format!("killed by signal {sig}"),
        (Some(code), _) => format!("exit code {code}"),
        _ => "unknown exit".into(),
    }
}

/// Waits for a change notification; false when `deadline` passes first.
pub(crate) async fn notified_before(
    notified: std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>,
    deadline: Option<Instant>,
) -> bool {
    match deadline {
        Some(d) => {
            let now = Instant::now();
            now < d && tokio::time::timeout(d - now, notified).await.is_ok()
        }
        None => {
            notified.await;
            true
        }
    }
}

/// The deadline of a get or wait; negative means none, and so does one too far
/// away to represent (the value comes off the network).
pub(crate) fn timeout_deadline(ms: i64) -> Option<Instant> {
    u64::try_from(ms).ok().and_then(|ms| Instant::now().checked_add(Duration::from_millis(ms)))
}

pub(crate) fn actor_info(a: &state::ActorEntry, node_id: &NodeId) -> ActorInfo {
    ActorInfo {
        actor_id: a.id.to_vec(),
        class_name: a.class_name.clone(),
        // Killed for good is dead to everyone else at once, as in Ray (its name is free again),
        // while this node still waits for the process to exit.
        state: if a.is_ending() { oxray_proto::ActorState::Dead as i32 } else { a.state.to_proto() as i32 },
        name: a.name.clone(),
        namespace: a.namespace.clone(),
        pid: a.pid,
        num_restarts: a.num_restarts,
        death_cause: a.death_cause.clone(),
        method_names: a.method_names.clone(),
        max_task_retries: a.max_task_retries,
        node_id: node_id.to_vec(),
        job_id: a.creation().job_id.clone(),
        detached: a.creation().detached,
        resources: a.creation().resources.clone(),
        placement_group_id: placement_group_of(a.creation()),
    }
}

/// The placement group a task or actor was placed in (empty: none), for listings.
pub(crate) fn placement_group_of(spec: &TaskSpec) -> Vec<u8> {
    spec.placement_group.as_ref().map(|b| b.placement_group_id.clone()).unwrap_or_default()
}

/// How a wait for objects ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Waited {
    /// As many as needed are ready.
    Ready,
    /// This one holds a failed task's error (with `stop_at_error`).
    Failed(ObjectId),
    /// The deadline passed first.
    TimedOut,
}

#[cfg(test)]
mod tests {
    use super::timeout_deadline;

    #[test]
    fn a_timeout_off_the_network_never_overflows() {
        assert!(timeout_deadline(-1).is_none());
        // Representable on Linux (seconds are 64-bit), unlike on some platforms: either way no panic.
        let _ = timeout_deadline(i64::MAX);
        assert!(timeout_deadline(10).is_some());
    }
}
