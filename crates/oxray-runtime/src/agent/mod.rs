//! The node agent: a gRPC service over `AgentState`, plus the worker processes
//! it starts and watches.

mod logs;
mod peers;
pub mod state;
mod workers;

pub use workers::print_line as print_worker_line;

pub use state::{Action, AgentConfig, AgentState};
pub use workers::SpawnConfig;

use crate::ids::{Id, id_from_bytes};
use oxray_proto::head_client::HeadClient;
use oxray_proto::node_agent_server::NodeAgent;
use oxray_proto::*;
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::{Request, Response, Status};

pub struct AgentShared {
    pub state: Mutex<AgentState>,
    /// Woken whenever objects may have become ready.
    pub changed: Notify,
    pub spawn: Mutex<Option<SpawnConfig>>,
    pub head: Mutex<Option<HeadConn>>,
    /// Actor updates for the head, sent in order by one task.
    actor_updates: Mutex<Option<tokio::sync::mpsc::UnboundedSender<ActorInfo>>>,
    pub(crate) peers: peers::PeerLinks,
    /// Worker output for subscribed drivers.
    logs: logs::LogHub,
}

pub type HeadConn =
    HeadClient<tonic::service::interceptor::InterceptedService<tonic::transport::Channel, crate::auth::AttachToken>>;

fn bad(e: String) -> Status {
    Status::invalid_argument(e)
}

fn ids(raw: &[Vec<u8>]) -> Result<Vec<Id>, Status> {
    raw.iter().map(|r| id_from_bytes(r).map_err(bad)).collect()
}

impl AgentShared {
    pub fn new(state: AgentState) -> Arc<Self> {
        Arc::new(AgentShared {
            state: Mutex::new(state),
            changed: Notify::new(),
            spawn: Mutex::new(None),
            head: Mutex::new(None),
            actor_updates: Mutex::new(None),
            peers: peers::PeerLinks::default(),
            logs: logs::LogHub::default(),
        })
    }

    /// Connects this agent to the head: actor registrations and updates go there.
    pub fn attach_head(&self, head: HeadConn) {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<ActorInfo>();
        let mut sender = head.clone();
        tokio::spawn(async move {
            while let Some(info) = rx.recv().await {
                if let Err(e) = sender.update_actor(info).await {
                    eprintln!("(oxray) could not update the head's actor table: {}", e.message());
                }
            }
        });
        *self.actor_updates.lock() = Some(tx);
        *self.head.lock() = Some(head);
    }

    fn head(&self) -> Option<HeadConn> {
        self.head.lock().clone()
    }

    fn head_or_unavailable(&self) -> Result<HeadConn, Status> {
        self.head().ok_or_else(|| Status::unavailable("this node has no head"))
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
                Action::Signal { pid, signal } => {
                    // SAFETY: plain kill(2) on a pid we started.
                    unsafe { libc::kill(pid as i32, signal) };
                }
                Action::Log(message) => eprintln!("(oxray) {message}"),
                Action::ActorChanged(actor_id) => {
                    // Deaths during shutdown are not news: the head is going away too.
                    // An actor living elsewhere is reported by its own node.
                    let (info, owner) = {
                        let st = self.state.lock();
                        let actor = st.actors.get(&actor_id).filter(|a| !st.is_shutting_down() && a.remote.is_none());
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
                | Action::ReleaseRemote { .. }
                | Action::PeerCancel { .. }
                | Action::PeerKillActor { .. } => {}
            }
        }
    }

    fn start_worker(self: &Arc<Self>, worker_id: Id, env: Vec<(String, String)>) {
        let Some(cfg) = self.spawn.lock().clone() else { return };
        let spawned = workers::spawn_worker(&cfg, worker_id, &env);
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                let status = format!("could not start {}: {e}", cfg.python);
                self.with_state(|st| st.worker_exited(worker_id, status));
                return;
            }
        };
        let pid = child.id().unwrap_or(0);
        self.state.lock().set_worker_pid(worker_id, pid);
        let _ = std::fs::create_dir_all(cfg.log_dir());
        let log_path = cfg.log_dir().join(format!("worker-{}-{pid}.log", &hex::encode(worker_id)[..8]));
        let forward = cfg.forward_output;
        for (stream, to_stderr) in [
            (child.stdout.take().map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>), false),
            (child.stderr.take().map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>), true),
        ] {
            let Some(stream) = stream else { continue };
            let this = self.clone();
            let path = log_path.clone();
            let host = cfg.agent_address.rsplit_once(':').map_or(cfg.agent_address.clone(), |(h, _)| h.to_string());
            tokio::spawn(async move {
                let emit = move |line: &str| {
                    let (label, job_id) = match this.state.lock().worker_label(&worker_id) {
                        Some((label, pid, job_id)) => (format!("{label} pid={pid}"), job_id),
                        None => (format!("pid={pid}"), Vec::new()),
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
            let status = match child.wait().await {
                Ok(s) => describe_exit(s),
                Err(e) => format!("wait failed: {e}"),
            };
            this.with_state(|st| st.worker_exited(worker_id, status));
        });
    }

    /// Waits until every id is ready (or unknown), or the deadline passes.
    async fn wait_ready(
        self: &Arc<Self>,
        ids: &[Id],
        need: usize,
        deadline: Option<Instant>,
        blocked_worker: Option<Id>,
    ) -> bool {
        let mut blocked = false;
        let mut pending: std::collections::VecDeque<Id> = ids.iter().copied().collect();
        let needs_all = need >= ids.len();
        let done = loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let ready = {
                let st = self.state.lock();
                let done = |id: &Id| st.is_settled(id);
                if needs_all {
                    // Objects mostly finish in order: drop finished ones from the
                    // front and stop at the first pending one (O(n) over the wait).
                    while pending.front().is_some_and(done) {
                        pending.pop_front();
                    }
                } else {
                    pending.retain(|id| !done(id));
                }
                ids.len() - pending.len()
            };
            if ready >= need {
                break true;
            }
            if let (Some(worker), false) = (blocked_worker, blocked) {
                blocked = true;
                self.with_state(|st| st.set_worker_blocked(worker, true));
                continue;
            }
            if !notified_before(notified, deadline).await {
                break false;
            }
        };
        if let (Some(worker), true) = (blocked_worker, blocked) {
            self.with_state(|st| st.set_worker_blocked(worker, false));
        }
        done
    }

    fn apply_increfs(self: &Arc<Self>, client: Id, deltas: &Option<RefDeltas>) -> Result<(), Status> {
        if let Some(d) = deltas {
            let inc = ids(&d.incref)?;
            self.state.lock().add_holders(client, &inc);
        }
        Ok(())
    }

    fn apply_decrefs(self: &Arc<Self>, client: Id, deltas: &Option<RefDeltas>) -> Result<(), Status> {
        if let Some(d) = deltas {
            let dec = ids(&d.decref)?;
            let released = ids(&d.released)?;
            if !dec.is_empty() || !released.is_empty() {
                self.with_state(|st| {
                    st.release_views(client, &released);
                    st.remove_holders(client, &dec);
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
        client: Id,
        deltas: &Option<RefDeltas>,
        request: impl FnOnce() -> Result<T, Status>,
    ) -> Result<T, Status> {
        self.apply_increfs(client, deltas)?;
        let out = request()?;
        self.apply_decrefs(client, deltas)?;
        Ok(out)
    }

    /// `Some(client)` when the client is one of this node's workers: a worker
    /// waiting in get()/wait() lends its task's CPUs back meanwhile.
    fn as_blocking_worker(&self, client: Id) -> Option<Id> {
        self.state.lock().has_worker(&client).then_some(client)
    }

    /// A task's results: the worker may now hold refs it was passed, and the
    /// completion unpins the task's arguments.
    fn handle_task_done(self: &Arc<Self>, worker: Id, done: TaskDoneRequest) -> Result<(), Status> {
        let task = id_from_bytes(&done.task_id).map_err(bad)?;
        let nested = ids(&done.nested_refs)?;
        let deltas = done.ref_deltas.clone();
        self.with_ref_changes(worker, &deltas, || {
            self.with_state(|st| st.task_done(worker, task, done, &nested)).map_err(bad)
        })
    }

    /// Tasks and actor calls from one client, in the order it made them.
    async fn apply_submissions(self: &Arc<Self>, specs: Vec<TaskSpec>) -> Result<(), Status> {
        if specs.is_empty() {
            return Ok(());
        }
        self.learn_before_submit(&specs).await;
        self.with_state(|st| {
            for spec in specs {
                let owner = id_from_bytes(&spec.owner_id)?;
                if spec.kind == TaskKind::ActorTask as i32 {
                    st.submit_actor_task(owner, spec)?;
                } else {
                    st.submit(owner, spec)?;
                }
            }
            st.schedule();
            Ok::<_, String>(())
        })
        .map_err(bad)
    }

    pub fn node_info(&self, address: &str) -> NodeInfo {
        let st = self.state.lock();
        NodeInfo {
            node_id: st.node_id.to_vec(),
            address: address.to_string(),
            ip: address.rsplit_once(':').map(|(h, _)| h.to_string()).unwrap_or_default(),
            alive: true,
            total: st.total().to_map(),
            available: st.available().to_map(),
            is_head: false,
            session_dir: String::new(),
            start_time_ms: 0,
        }
    }
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
async fn notified_before(
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

fn timeout_deadline(ms: i64) -> Option<Instant> {
    (ms >= 0).then(|| Instant::now() + Duration::from_millis(ms as u64))
}

#[derive(Clone)]
pub struct AgentService {
    pub shared: Arc<AgentShared>,
    pub address: String,
}

type AssignmentStream = UnboundedReceiverStream<Result<Assignment, Status>>;

#[tonic::async_trait]
impl NodeAgent for AgentService {
    async fn create_actor(&self, request: Request<CreateActorRequest>) -> Result<Response<CreateActorReply>, Status> {
        let req = request.into_inner();
        let spec = req.spec.ok_or_else(|| bad("missing actor spec".into()))?;
        let owner = id_from_bytes(&spec.owner_id).map_err(bad)?;
        self.shared.learn_before_submit(std::slice::from_ref(&spec)).await;
        if let Some(mut head) = self.shared.head() {
            let info = ActorInfo {
                actor_id: spec.actor_id.clone(),
                class_name: spec.name.clone(),
                state: state::ActorState::PendingCreation.as_str().into(),
                name: spec.actor_name.clone(),
                namespace: spec.namespace.clone(),
                max_task_retries: spec.max_task_retries,
                node_id: self.shared.state.lock().node_id.to_vec(),
                ..Default::default()
            };
            let reply = head
                .register_actor(RegisterActorRequest { actor: Some(info), get_if_exists: req.get_if_exists })
                .await?
                .into_inner();
            if reply.existing {
                return Ok(Response::new(CreateActorReply { actor_id: reply.actor_id, existing: true }));
            }
        }
        let (actor_id, existing) = self
            .shared
            .with_state(|st| {
                let (actor_id, existing) = st.register_actor(&spec, req.get_if_exists)?;
                if !existing {
                    st.submit(owner, spec)?;
                    st.schedule();
                }
                Ok::<_, String>((actor_id, existing))
            })
            .map_err(Status::already_exists)?;
        Ok(Response::new(CreateActorReply { actor_id: actor_id.to_vec(), existing }))
    }

    async fn submit_batch(&self, request: Request<SubmitBatchRequest>) -> Result<Response<Empty>, Status> {
        self.shared.apply_submissions(request.into_inner().specs).await?;
        Ok(Response::new(Empty {}))
    }

    async fn create_object(
        &self,
        request: Request<CreateObjectRequest>,
    ) -> Result<Response<CreateObjectReply>, Status> {
        let req = request.into_inner();
        let id = id_from_bytes(&req.object_id).map_err(bad)?;
        if req.ref_deltas.is_some() {
            let client = id_from_bytes(&req.client_id).map_err(bad)?;
            self.shared.with_ref_changes(client, &req.ref_deltas, || Ok(()))?;
        }
        let location = self
            .shared
            .with_state(|st| st.reserve_object(id, req.size as usize))
            .map_err(Status::resource_exhausted)?;
        Ok(Response::new(CreateObjectReply { location: Some(location) }))
    }

    async fn put_object(&self, request: Request<PutObjectRequest>) -> Result<Response<Empty>, Status> {
        let req = request.into_inner();
        let client = id_from_bytes(&req.client_id).map_err(bad)?;
        let object = req.object.ok_or_else(|| bad("missing object".into()))?;
        let id = id_from_bytes(&object.object_id).map_err(bad)?;
        let nested = ids(&req.nested_refs)?;
        self.shared.with_ref_changes(client, &req.ref_deltas, || {
            self.shared
                .with_state(|st| {
                    st.add_holders(client, &[id]);
                    let sealed = st.seal_object(&object, &nested);
                    st.schedule();
                    sealed
                })
                .map_err(bad)
        })?;
        Ok(Response::new(Empty {}))
    }

    async fn get_objects(&self, request: Request<GetObjectsRequest>) -> Result<Response<GetObjectsReply>, Status> {
        let req = request.into_inner();
        let client = id_from_bytes(&req.client_id).map_err(bad)?;
        let submissions = req.submissions;
        self.shared.apply_increfs(client, &req.ref_deltas)?;
        self.shared.apply_submissions(submissions).await?;
        self.shared.apply_decrefs(client, &req.ref_deltas)?;
        let wanted = ids(&req.object_ids)?;
        let worker = self.shared.as_blocking_worker(client);
        let deadline = timeout_deadline(req.timeout_ms);
        let ok = self.shared.wait_ready(&wanted, wanted.len(), deadline, worker).await
            && self.shared.wait_local(&wanted, deadline).await;
        if !ok {
            return Ok(Response::new(GetObjectsReply { objects: Vec::new(), timed_out: true }));
        }
        let objects = {
            let mut st = self.shared.state.lock();
            wanted.iter().map(|id| st.locate(*id, client)).collect()
        };
        Ok(Response::new(GetObjectsReply { objects, timed_out: false }))
    }

    async fn wait_objects(&self, request: Request<WaitObjectsRequest>) -> Result<Response<WaitObjectsReply>, Status> {
        let req = request.into_inner();
        let wanted = ids(&req.object_ids)?;
        let need = (req.num_returns as usize).min(wanted.len());
        let client = id_from_bytes(&req.client_id).map_err(bad)?;
        let worker = self.shared.as_blocking_worker(client);
        self.shared.wait_ready(&wanted, need, timeout_deadline(req.timeout_ms), worker).await;
        let st = self.shared.state.lock();
        let ready_ids = wanted.iter().filter(|id| st.is_settled(id)).map(|id| id.to_vec()).collect();
        Ok(Response::new(WaitObjectsReply { ready_ids }))
    }

    async fn update_refs(&self, request: Request<UpdateRefsRequest>) -> Result<Response<Empty>, Status> {
        let req = request.into_inner();
        let client = id_from_bytes(&req.client_id).map_err(bad)?;
        self.shared.with_ref_changes(client, &req.ref_deltas, || Ok(()))?;
        Ok(Response::new(Empty {}))
    }

    async fn kill_actor(&self, request: Request<ActorRequest>) -> Result<Response<Empty>, Status> {
        let req = request.into_inner();
        let id = id_from_bytes(&req.actor_id).map_err(bad)?;
        self.shared.with_state(|st| st.kill_actor(id, req.no_restart)).map_err(Status::not_found)?;
        Ok(Response::new(Empty {}))
    }

    async fn cancel_task(&self, request: Request<CancelRequest>) -> Result<Response<Empty>, Status> {
        let req = request.into_inner();
        let id = id_from_bytes(&req.object_id).map_err(bad)?;
        self.shared.with_state(|st| {
            st.cancel(id, req.force);
            st.schedule();
        });
        Ok(Response::new(Empty {}))
    }

    async fn get_named_actor(
        &self,
        request: Request<GetNamedActorRequest>,
    ) -> Result<Response<GetNamedActorReply>, Status> {
        let req = request.into_inner();
        if let Some(mut head) = self.shared.head() {
            return head.get_named_actor(req).await;
        }
        let st = self.shared.state.lock();
        let actor = st.named_actor(&req.namespace, &req.name).map(|a| actor_info(a, &st.node_id));
        Ok(Response::new(GetNamedActorReply { found: actor.is_some(), actor }))
    }

    async fn get_actor_info(&self, request: Request<ActorRequest>) -> Result<Response<GetNamedActorReply>, Status> {
        let req = request.into_inner();
        let id = id_from_bytes(&req.actor_id).map_err(bad)?;
        let local = {
            let st = self.shared.state.lock();
            st.actors.get(&id).map(|a| actor_info(a, &st.node_id))
        };
        match (local, self.shared.head()) {
            (Some(actor), _) => Ok(Response::new(GetNamedActorReply { found: true, actor: Some(actor) })),
            (None, Some(mut head)) => head.get_actor(req).await,
            (None, None) => Ok(Response::new(GetNamedActorReply { found: false, actor: None })),
        }
    }

    async fn list_actors(&self, request: Request<Empty>) -> Result<Response<ListActorsReply>, Status> {
        if let Some(mut head) = self.shared.head() {
            return head.list_actors(request.into_inner()).await;
        }
        let st = self.shared.state.lock();
        Ok(Response::new(ListActorsReply { actors: st.actors.values().map(|a| actor_info(a, &st.node_id)).collect() }))
    }

    async fn register_function(&self, request: Request<FunctionBlob>) -> Result<Response<Empty>, Status> {
        let blob = request.into_inner();
        self.shared.state.lock().register_function(blob.function_id, blob.data);
        Ok(Response::new(Empty {}))
    }

    async fn get_function(&self, request: Request<FunctionId>) -> Result<Response<FunctionBlob>, Status> {
        let id = request.into_inner().function_id;
        let data = self.shared.state.lock().function(&id);
        match data {
            Some(data) => Ok(Response::new(FunctionBlob { function_id: id, data })),
            None => Err(Status::not_found(format!("function {} is not registered", hex::encode(&id)))),
        }
    }

    async fn cluster_info(&self, _request: Request<Empty>) -> Result<Response<ClusterInfoReply>, Status> {
        let own = self.shared.node_info(&self.address);
        let head = self.shared.head.lock().clone();
        let mut nodes = match head {
            Some(mut head) => head.list_nodes(Empty {}).await.map(|r| r.into_inner().nodes).unwrap_or_default(),
            None => Vec::new(),
        };
        // This node's own numbers are live; the head's lag by a heartbeat.
        match nodes.iter_mut().find(|n| n.node_id == own.node_id) {
            Some(n) => {
                n.available = own.available;
                n.total = own.total;
            }
            None => nodes.push(own),
        }
        Ok(Response::new(ClusterInfoReply { nodes }))
    }

    type WorkerConnectStream = AssignmentStream;

    async fn worker_connect(
        &self,
        request: Request<tonic::Streaming<WorkerEvent>>,
    ) -> Result<Response<Self::WorkerConnectStream>, Status> {
        let mut events = request.into_inner();
        let hello = match events.message().await? {
            Some(WorkerEvent { event: Some(worker_event::Event::Hello(h)) }) => h,
            _ => return Err(bad("a worker stream must start with a hello".into())),
        };
        let worker_id = id_from_bytes(&hello.worker_id).map_err(bad)?;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        self.shared.with_state(|st| st.worker_connected(worker_id, tx)).map_err(Status::not_found)?;
        let shared = self.shared.clone();
        tokio::spawn(async move {
            while let Ok(Some(event)) = events.message().await {
                // Events that arrive after the worker was declared dead are stale.
                if !shared.state.lock().has_worker(&worker_id) {
                    break;
                }
                let outcome = match event.event {
                    Some(worker_event::Event::Done(done)) => shared.handle_task_done(worker_id, done),
                    Some(worker_event::Event::Refs(deltas)) => {
                        shared.with_ref_changes(worker_id, &Some(deltas), || Ok(()))
                    }
                    _ => Err(bad("unexpected worker event".into())),
                };
                if let Err(status) = outcome {
                    eprintln!("(oxray) bad event from worker {}: {}", hex::encode(worker_id), status.message());
                }
            }
        });
        Ok(Response::new(UnboundedReceiverStream::new(rx)))
    }

    async fn task_done(&self, request: Request<TaskDoneRequest>) -> Result<Response<Empty>, Status> {
        let req = request.into_inner();
        let worker = id_from_bytes(&req.worker_id).map_err(bad)?;
        self.shared.handle_task_done(worker, req)?;
        Ok(Response::new(Empty {}))
    }

    type PeerLinkStream = UnboundedReceiverStream<Result<PeerEvent, Status>>;

    async fn peer_link(
        &self,
        request: Request<tonic::Streaming<PeerMessage>>,
    ) -> Result<Response<Self::PeerLinkStream>, Status> {
        let mut incoming = request.into_inner();
        let hello = match incoming.message().await? {
            Some(PeerMessage { msg: Some(peer_message::Msg::Hello(hello)) }) => hello,
            _ => return Err(bad("a peer link must start with a hello".into())),
        };
        let owner = id_from_bytes(&hello.node_id).map_err(bad)?;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        self.shared.serve_link(owner, incoming, tx);
        Ok(Response::new(UnboundedReceiverStream::new(rx)))
    }

    type PullObjectStream = tokio_stream::wrappers::ReceiverStream<Result<ObjectChunk, Status>>;

    async fn pull_object(&self, request: Request<PullRequest>) -> Result<Response<Self::PullObjectStream>, Status> {
        let id = id_from_bytes(&request.into_inner().object_id).map_err(bad)?;
        Ok(Response::new(tokio_stream::wrappers::ReceiverStream::new(self.shared.serve_pull(id))))
    }

    type SubscribeLogsStream = tokio_stream::wrappers::ReceiverStream<Result<LogBatch, Status>>;

    async fn subscribe_logs(
        &self,
        request: Request<SubscribeLogsRequest>,
    ) -> Result<Response<Self::SubscribeLogsStream>, Status> {
        Ok(Response::new(self.shared.logs.subscribe(request.into_inner().job_id)))
    }

    async fn create_placement_group(
        &self,
        request: Request<PlacementGroupSpec>,
    ) -> Result<Response<PlacementGroupInfo>, Status> {
        let mut head = self.shared.head_or_unavailable()?;
        let info = head.create_placement_group(request.into_inner()).await?;
        // Learn at once where the bundles went, rather than at the next heartbeat.
        if let Ok(nodes) = head.list_nodes(Empty {}).await {
            self.shared.with_state(|st| st.update_peers(&nodes.into_inner().nodes));
        }
        Ok(info)
    }

    async fn remove_placement_group(&self, request: Request<PlacementGroupRequest>) -> Result<Response<Empty>, Status> {
        let mut head = self.shared.head_or_unavailable()?;
        head.remove_placement_group(request.into_inner()).await
    }

    async fn get_placement_group(
        &self,
        request: Request<PlacementGroupRequest>,
    ) -> Result<Response<PlacementGroupReply>, Status> {
        let mut head = self.shared.head_or_unavailable()?;
        head.get_placement_group(request.into_inner()).await
    }

    async fn list_placement_groups(
        &self,
        request: Request<Empty>,
    ) -> Result<Response<ListPlacementGroupsReply>, Status> {
        let mut head = self.shared.head_or_unavailable()?;
        head.list_placement_groups(request.into_inner()).await
    }

    async fn reserve_bundles(&self, request: Request<ReserveBundlesRequest>) -> Result<Response<Empty>, Status> {
        let req = request.into_inner();
        let pg_id = id_from_bytes(&req.pg_id).map_err(bad)?;
        let mut bundles = Vec::new();
        for slot in &req.bundles {
            let resources = crate::resources::ResourceSet::from_map(&slot.resources).map_err(|e| bad(e.to_string()))?;
            bundles.push((slot.index, resources));
        }
        self.shared.with_state(|st| st.reserve_bundles(pg_id, &bundles)).map_err(Status::failed_precondition)?;
        Ok(Response::new(Empty {}))
    }

    async fn return_bundles(&self, request: Request<PlacementGroupRequest>) -> Result<Response<Empty>, Status> {
        let pg_id = id_from_bytes(&request.into_inner().pg_id).map_err(bad)?;
        self.shared.with_state(|st| st.return_bundles(pg_id));
        Ok(Response::new(Empty {}))
    }
}

fn actor_info(a: &state::ActorEntry, node_id: &Id) -> ActorInfo {
    ActorInfo {
        actor_id: a.id.to_vec(),
        class_name: a.class_name.clone(),
        state: a.state.as_str().to_string(),
        name: a.name.clone(),
        namespace: a.namespace.clone(),
        pid: a.pid,
        num_restarts: a.num_restarts,
        death_cause: a.death_cause.clone(),
        method_names: a.method_names.clone(),
        max_task_retries: a.max_task_retries,
        node_id: node_id.to_vec(),
    }
}

#[cfg(test)]
mod state_tests;
