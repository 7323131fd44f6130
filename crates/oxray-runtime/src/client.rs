//! The client every driver and worker process uses to talk to its node agent.

use crate::auth::AttachToken;
use crate::ids::{ActorId, ClientId, IdError, JobId, ObjectId};
use crate::refs::RefTable;
use crate::tls::TlsSettings;
use oxray_proto::bundle_service_client::BundleServiceClient;
use oxray_proto::driver_service_client::DriverServiceClient;
use oxray_proto::peer_service_client::PeerServiceClient;
use oxray_proto::worker_service_client::WorkerServiceClient;
use oxray_proto::{
    Assignment, CreateActorRequest, CreateObjectRequest, DriverHello, DriverSessionEvent, Empty, GetObjectsRequest,
    LogBatch, ObjectLocation, PutObjectRequest, RefDeltas, SubmitBatchRequest, SubscribeLogsRequest,
    TaskCancelledRequest, TaskDoneRequest, TaskSpec, UpdateRefsRequest, WaitObjectsRequest, WorkerEvent, WorkerHello,
    driver_session_event, worker_event, worker_service_server,
};
use parking_lot::Mutex;
use std::time::Duration;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

/// Calls one of the node agent's services (`DriverService` unless named):
/// in-process when this client lives in the agent's own process (the embedded
/// driver), else over gRPC through the client field given. Same requests, same order.
/// Over gRPC every call carries a deadline: `RPC_DEADLINE` unless one is given
/// (`None` for a wait the user asked to be unbounded).
macro_rules! agent_call {
    ($self:ident, $method:ident, $req:expr) => {
        agent_call!($self, crate::proto::driver_service_server::DriverService, driver, $method, $req)
    };
    ($self:ident, $method:ident, $req:expr, deadline: $deadline:expr) => {
        agent_call!($self, crate::proto::driver_service_server::DriverService, driver, $method, $req, deadline: $deadline)
    };
    ($self:ident, $service:path, $client:ident, $method:ident, $req:expr) => {
        agent_call!($self, $service, $client, $method, $req, deadline: Some(crate::client::RPC_DEADLINE))
    };
    ($self:ident, $service:path, $client:ident, $method:ident, $req:expr, deadline: $deadline:expr) => {
        match &$self.local {
            Some(service) => {
                <crate::agent::AgentService as $service>::$method(service, tonic::Request::new($req)).await
            }
            None => $self.$client.clone().$method(crate::client::with_deadline($req, $deadline)).await,
        }
    };
}

/// How long a control-plane call may go unanswered before it fails: calls that
/// wait on purpose (`get`/`wait` with a user timeout) get that timeout plus this.
pub const RPC_DEADLINE: Duration = Duration::from_secs(30);

/// The deadline of a wait the user left unbounded (a `get` with no timeout):
/// longer than anyone waits, so the client's default does not apply.
const UNBOUNDED_WAIT: Duration = Duration::from_secs(365 * 24 * 3600);

/// A request that the transport abandons (and the server is told to abandon,
/// through `grpc-timeout`) after `deadline`; `None` for a wait with no limit.
pub fn with_deadline<T>(message: T, deadline: Option<Duration>) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(deadline.unwrap_or(UNBOUNDED_WAIT));
    request
}

/// The deadline of a call that waits up to `timeout_ms` (negative: no limit) by design.
fn wait_deadline(timeout_ms: i64) -> Option<Duration> {
    u64::try_from(timeout_ms).ok().map(|ms| Duration::from_millis(ms) + RPC_DEADLINE)
}

/// The assignments a worker receives from its node agent.
pub type AssignmentStream = tonic::Streaming<Assignment>;

/// A channel whose every call carries the cluster token.
pub type AuthedChannel = InterceptedService<Channel, AttachToken>;
pub type DriverClient = DriverServiceClient<AuthedChannel>;
pub type WorkerClient = WorkerServiceClient<AuthedChannel>;
pub type PeerClient = PeerServiceClient<AuthedChannel>;
pub type BundleClient = BundleServiceClient<AuthedChannel>;
pub type NodeJobClient = NodeJobServiceClient<AuthedChannel>;
use oxray_proto::node_job_service_client::NodeJobServiceClient;
pub type NodeStateClient = NodeStateServiceClient<AuthedChannel>;
use oxray_proto::node_state_service_client::NodeStateServiceClient;

/// A generated client over an authenticated channel, with no message size limit
/// (objects stream through these calls).
macro_rules! authed_client {
    ($client:ident, $channel:expr, $auth:expr) => {
        $client::with_interceptor($channel, $auth)
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX)
    };
}

/// What a driver or worker sees go wrong when it calls its node agent. Every
/// gRPC status becomes one of these in one place (`From<tonic::Status>`).
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot connect to the oxray node agent at {address}: {reason}")]
    Connect { address: String, reason: String },
    /// The cluster token is missing, wrong, or not printable.
    #[error("{0}")]
    Auth(String),
    #[error("the oxray node agent is unreachable: {0}")]
    Unavailable(String),
    /// The agent refused the request as given.
    #[error("{message}")]
    Refused { reason: Refusal, message: String },
    #[error(transparent)]
    BadId(#[from] IdError),
    #[error(transparent)]
    Token(#[from] crate::auth::TokenError),
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// Anything else the agent or the transport reported.
    #[error("{0}")]
    Rpc(String),
}

/// Why the agent refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A value the request carries is not acceptable.
    InvalidArgument,
    /// A name is taken (a named actor).
    AlreadyExists,
    /// An id the agent does not know.
    NotFound,
    /// The cluster is not in a state to do it (an object never reserved, bundles that do not fit).
    FailedPrecondition,
    /// No room: the object store is full.
    ResourceExhausted,
}

impl From<tonic::Status> for ClientError {
    fn from(s: tonic::Status) -> Self {
        let refused = |reason| ClientError::Refused { reason, message: s.message().to_string() };
        match s.code() {
            tonic::Code::Unauthenticated => {
                ClientError::Auth(format!("the cluster requires its token ({}): set OXRAY_TOKEN", s.message()))
            }
            tonic::Code::PermissionDenied => {
                ClientError::Auth(format!("the cluster refused the token ({}): check OXRAY_TOKEN", s.message()))
            }
            // A plaintext client talking to a TLS server sees its connection
            // closed or garbage frames, depending on timing.
            _ if is_transport_failure(&s) && !tls_configured() => ClientError::Unavailable(format!(
                "{}; if the cluster uses TLS, set OXRAY_TLS_CA (and OXRAY_TLS_CERT/OXRAY_TLS_KEY)",
                with_causes(s.message(), &s)
            )),
            tonic::Code::Unavailable => ClientError::Unavailable(with_causes(s.message(), &s)),
            tonic::Code::DeadlineExceeded => ClientError::Unavailable(format!("no answer in time ({})", s.message())),
            tonic::Code::InvalidArgument => refused(Refusal::InvalidArgument),
            tonic::Code::AlreadyExists => refused(Refusal::AlreadyExists),
            tonic::Code::NotFound => refused(Refusal::NotFound),
            tonic::Code::FailedPrecondition => refused(Refusal::FailedPrecondition),
            tonic::Code::ResourceExhausted => refused(Refusal::ResourceExhausted),
            _ => ClientError::Rpc(with_causes(s.message(), &s)),
        }
    }
}

/// What a get of objects found.
#[derive(Debug)]
pub enum Got {
    /// Every object, in the order asked.
    All(Vec<ObjectLocation>),
    /// One object holds a failed task's error (the others were not waited for).
    Failed(ObjectLocation),
}

impl Got {
    fn from_reply(mut reply: oxray_proto::GetObjectsReply) -> Self {
        if reply.failed && reply.objects.len() == 1 {
            Got::Failed(reply.objects.remove(0))
        } else {
            Got::All(reply.objects)
        }
    }

    /// The objects found, a failed one alone.
    pub fn into_objects(self) -> Vec<ObjectLocation> {
        match self {
            Got::All(objects) => objects,
            Got::Failed(object) => vec![object],
        }
    }
}

pub struct CoreClient {
    pub client_id: ClientId,
    pub address: String,
    driver: DriverClient,
    worker: WorkerClient,
    refs: Mutex<RefTable>,
    /// Arena views dropped since the last report.
    released: Mutex<Vec<ObjectId>>,
    /// Tasks and actor calls not yet sent: submission returns at once and a
    /// background sender ships them in batches. Every other call sends them
    /// first, so the agent sees this client's requests in order.
    queued: Mutex<Vec<TaskSpec>>,
    sending: tokio::sync::Mutex<()>,
    queued_signal: std::sync::Arc<tokio::sync::Notify>,
    /// Signalled when a reference count or a view changed, for the task that flushes them.
    refs_changed: std::sync::Arc<tokio::sync::Notify>,
    /// The same signal for a sender thread outside the async runtime (a worker's
    /// runtime has no threads of its own to run `run_sender` while user code runs).
    queued_ready: parking_lot::Condvar,
    send_error: Mutex<Option<String>>,
    /// Set in the embedded driver: the agent in this same process, called directly.
    local: Option<crate::agent::AgentService>,
    /// In a worker: its event stream to the agent. Task completions and all of
    /// the worker's reference changes travel on it, so they stay in order.
    worker_events: Mutex<Option<tokio::sync::mpsc::UnboundedSender<WorkerEvent>>>,
    /// Dropped with the client: ends the tasks that print other nodes' output.
    log_stop: Mutex<Option<tokio::sync::watch::Sender<()>>>,
    /// A joined driver's session with its agent (`open_driver_session`).
    driver_session: Mutex<Option<DriverSessionHandle>>,
}

/// The task that keeps a driver's session alive, and how to end it.
/// What the Jobs API lists about a driver.
#[derive(Clone, Debug, Default)]
pub struct DriverAbout {
    /// Its command line.
    pub entrypoint: String,
    /// The Jobs API submission that started it (empty when started by hand).
    pub submission_id: String,
}

struct DriverSessionHandle {
    /// Sent (or dropped with the client) to end the session.
    stop: tokio::sync::oneshot::Sender<()>,
    /// Done once the agent has cleaned up after the session (or gave no word in time).
    done: tokio::task::JoinHandle<()>,
}

/// The endpoint every connection to a node agent or the head starts from: TLS
/// when this process's environment configures it (see [`crate::tls`]), else plaintext.
fn endpoint(address: &str) -> Result<Endpoint, ClientError> {
    let err = |reason: String| ClientError::Connect { address: address.to_string(), reason };
    let tls = TlsSettings::from_env()?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut endpoint = Endpoint::from_shared(format!("{scheme}://{address}")).map_err(|e| err(e.to_string()))?;
    if let Some(tls) = &tls {
        endpoint = endpoint.tls_config(tls.client_config()).map_err(|e| err(format!("bad TLS settings: {e}")))?;
    }
    Ok(endpoint
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(10))
        .http2_keep_alive_interval(Duration::from_secs(10))
        .keep_alive_timeout(Duration::from_secs(10))
        // Large windows: object transfers stream megabytes per round trip.
        .initial_stream_window_size(Some(8 << 20))
        .initial_connection_window_size(Some(16 << 20)))
}

/// A call that failed in the connection itself, not in the agent.
fn is_transport_failure(s: &tonic::Status) -> bool {
    let message = with_causes(s.message(), s);
    ["transport error", "h2 protocol error", "connection closed", "broken pipe"].iter().any(|m| message.contains(m))
}

fn tls_configured() -> bool {
    [crate::tls::CERT_VAR, crate::tls::CA_VAR].iter().any(|v| std::env::var_os(v).is_some_and(|v| !v.is_empty()))
}

/// `message` followed by the causes of `error`: tonic's own message is often
/// just "transport error", and the chain says what happened (a refused TLS
/// certificate, a reset connection).
fn with_causes(message: &str, error: &dyn std::error::Error) -> String {
    let mut reason = message.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause = cause.to_string();
        if !reason.contains(&cause) {
            reason = format!("{reason}: {cause}");
        }
        source = error_source(source);
    }
    reason
}

fn error_source<'a>(e: Option<&'a (dyn std::error::Error + 'static)>) -> Option<&'a (dyn std::error::Error + 'static)> {
    e.and_then(|e| e.source())
}

/// Why a connect failed, with the likely fix.
fn connect_failure(e: &tonic::transport::Error) -> String {
    let tls = tls_configured();
    let reason = with_causes(&e.to_string(), e);
    let hint = if tls {
        "is the cluster running, is the address right, and does the cluster use TLS with a certificate this CA signed?"
    } else {
        "is the cluster running and is the address right? If the cluster uses TLS, set OXRAY_TLS_CA (and OXRAY_TLS_CERT/OXRAY_TLS_KEY)"
    };
    format!("{reason}; {hint}")
}

/// A connection to a node agent, for a client that gives each call its own
/// deadline (`agent_call!`): some of its calls wait as long as the user asked.
pub async fn connect_channel(address: &str) -> Result<Channel, ClientError> {
    endpoint(address)?
        .connect()
        .await
        .map_err(|e| ClientError::Connect { address: address.to_string(), reason: connect_failure(&e) })
}

/// A connection whose every call fails after `deadline` (connecting included)
/// unless the response has begun: for services with no call that waits on
/// purpose (the head; agents called by other agents). A stream's deadline only
/// covers its opening.
pub async fn connect_control_channel(address: &str, deadline: Duration) -> Result<Channel, ClientError> {
    endpoint(address)?
        .timeout(deadline)
        .connect()
        .await
        .map_err(|e| ClientError::Connect { address: address.to_string(), reason: connect_failure(&e) })
}

/// How many agents' connections `AgentChannels` keeps; the least recently used
/// beyond that are closed (a cluster whose nodes come and go never stops growing).
const MAX_AGENT_CHANNELS: usize = 256;

/// Connections to node agents by address, shared (agents forwarding to each
/// other, the head reserving bundles). A channel connects on its first call, not
/// under the cache's lock, so an unreachable agent holds up only its own callers;
/// every call has a deadline.
pub struct AgentChannels {
    /// Least recently used first.
    channels: Mutex<indexmap::IndexMap<String, Channel>>,
    capacity: usize,
    deadline: Duration,
}

impl Default for AgentChannels {
    fn default() -> Self {
        AgentChannels::with_deadline(RPC_DEADLINE, MAX_AGENT_CHANNELS)
    }
}

impl AgentChannels {
    pub fn with_deadline(deadline: Duration, capacity: usize) -> Self {
        AgentChannels { channels: Mutex::new(indexmap::IndexMap::new()), capacity: capacity.max(1), deadline }
    }

    fn channel(&self, address: &str) -> Result<Channel, ClientError> {
        if let Some(c) = self.cached(address) {
            return Ok(c);
        }
        // Built outside the lock: the endpoint reads the TLS files.
        // The deadline only starts once connected, so connecting gets a bound of its own.
        let connect_within = self.deadline.min(Duration::from_secs(10));
        let c = endpoint(address)?.timeout(self.deadline).connect_timeout(connect_within).connect_lazy();
        let mut channels = self.channels.lock();
        if let Some(raced) = channels.get(address) {
            return Ok(raced.clone());
        }
        if channels.len() >= self.capacity {
            channels.shift_remove_index(0);
        }
        channels.insert(address.to_string(), c.clone());
        Ok(c)
    }

    /// The open channel to `address`, now the most recently used.
    fn cached(&self, address: &str) -> Option<Channel> {
        let mut channels = self.channels.lock();
        let index = channels.get_index_of(address)?;
        let last = channels.len() - 1;
        channels.move_index(index, last);
        Some(channels[last].clone())
    }

    /// Closes the connection to an agent that is gone (callers holding a client keep theirs).
    pub fn forget(&self, address: &str) {
        self.channels.lock().shift_remove(address);
    }

    pub fn len(&self) -> usize {
        self.channels.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub async fn driver(&self, address: &str, token: &str) -> Result<DriverClient, ClientError> {
        Ok(authed_client!(DriverServiceClient, self.channel(address)?, AttachToken::new(token)?))
    }

    pub async fn peer(&self, address: &str, token: &str) -> Result<PeerClient, ClientError> {
        Ok(authed_client!(PeerServiceClient, self.channel(address)?, AttachToken::new(token)?))
    }

    pub async fn bundles(&self, address: &str, token: &str) -> Result<BundleClient, ClientError> {
        Ok(authed_client!(BundleServiceClient, self.channel(address)?, AttachToken::new(token)?))
    }

    pub async fn node_jobs(&self, address: &str, token: &str) -> Result<NodeJobClient, ClientError> {
        Ok(authed_client!(NodeJobServiceClient, self.channel(address)?, AttachToken::new(token)?))
    }

    pub async fn node_state(&self, address: &str, token: &str) -> Result<NodeStateClient, ClientError> {
        Ok(authed_client!(NodeStateServiceClient, self.channel(address)?, AttachToken::new(token)?))
    }
}

impl CoreClient {
    pub async fn connect(address: &str, token: &str, client_id: ClientId) -> Result<Self, ClientError> {
        let channel = connect_channel(address).await?;
        // Calls made through `driver()` directly get the default deadline too.
        let auth = AttachToken::new(token)?.with_default_deadline(RPC_DEADLINE);
        Ok(CoreClient {
            client_id,
            address: address.to_string(),
            driver: authed_client!(DriverServiceClient, channel.clone(), auth.clone()),
            worker: authed_client!(WorkerServiceClient, channel, auth),
            refs: Mutex::new(RefTable::default()),
            released: Mutex::new(Vec::new()),
            queued: Mutex::new(Vec::new()),
            sending: tokio::sync::Mutex::new(()),
            queued_signal: std::sync::Arc::default(),
            refs_changed: std::sync::Arc::default(),
            queued_ready: parking_lot::Condvar::new(),
            send_error: Mutex::new(None),
            worker_events: Mutex::new(None),
            local: None,
            log_stop: Mutex::new(None),
            driver_session: Mutex::new(None),
        })
    }

    /// A client for a driver that hosts the agent itself: hot calls skip the network.
    pub async fn connect_local(
        address: &str,
        token: &str,
        client_id: ClientId,
        service: crate::agent::AgentService,
    ) -> Result<Self, ClientError> {
        let mut client = Self::connect(address, token, client_id).await?;
        client.local = Some(service);
        Ok(client)
    }

    /// Opens this driver's session with its agent, kept alive by pings until
    /// `end_driver_session` or until the client is dropped; its end makes the
    /// agent clean up after the driver (its objects, its job's tasks, actors and
    /// placement groups). The agent tells the head (the Jobs API's DRIVER rows).
    /// An embedded driver has no session (its cluster ends with it): it is only
    /// reported to the head.
    pub async fn open_driver_session(&self, job_id: JobId, about: DriverAbout) -> Result<(), ClientError> {
        let hello = DriverHello {
            client_id: self.client_id.to_vec(),
            job_id: job_id.to_vec(),
            pid: std::process::id(),
            entrypoint: about.entrypoint,
            submission_id: about.submission_id,
        };
        if let Some(local) = &self.local {
            local.local_driver_started(&hello).await;
            return Ok(());
        }
        if self.driver_session.lock().is_some() {
            return Ok(());
        }
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let _ = tx.send(DriverSessionEvent { event: Some(driver_session_event::Event::Hello(hello)) }).await;
        let mut replies =
            self.driver.clone().driver_session(tokio_stream::wrappers::ReceiverStream::new(rx)).await?.into_inner();
        let lease_ms = replies
            .message()
            .await?
            .ok_or_else(|| ClientError::Rpc("the agent closed the driver session as it opened".into()))?
            .lease_ms;
        let ping_every = Duration::from_millis((lease_ms / 3).max(10));
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let done = tokio::spawn(async move {
            let mut tick = tokio::time::interval(ping_every);
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        let ping = DriverSessionEvent { event: Some(driver_session_event::Event::Ping(Empty {})) };
                        if tx.send(ping).await.is_err() {
                            return;
                        }
                    }
                    _ = &mut stopped => break,
                    // The agent ended the session (it only ever sends the first message).
                    _ = replies.message() => return,
                }
            }
            drop(tx);
            // The agent closes its side once it has cleaned up after this driver.
            let _ = tokio::time::timeout(Duration::from_secs(10), async {
                while let Ok(Some(_)) = replies.message().await {}
            })
            .await;
        });
        *self.driver_session.lock() = Some(DriverSessionHandle { stop, done });
        Ok(())
    }

    /// Ends this driver's session and waits (up to 10 s) until the agent has
    /// cleaned up after it. Does nothing if no session is open.
    pub async fn end_driver_session(&self) {
        let Some(session) = self.driver_session.lock().take() else { return };
        let _ = session.stop.send(());
        let _ = session.done.await;
    }

    /// Prints, in this driver's terminal, what the workers of job `job_id`
    /// print on every node except `skip` (the embedded agent prints its own).
    /// Nodes that join later are followed within 2 s.
    pub async fn follow_logs(self: &std::sync::Arc<Self>, token: String, job_id: Option<JobId>, skip: Option<String>) {
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(());
        *self.log_stop.lock() = Some(stop_tx);
        let follower = std::sync::Arc::new(LogFollower {
            token,
            job_id,
            skip,
            following: Mutex::new(std::collections::HashSet::new()),
            channels: AgentChannels::default(),
            stop: stop_rx,
        });
        let mut agent = self.driver.clone();
        follower.follow_new_nodes(&mut agent).await;
        tokio::spawn(async move {
            let mut stop = follower.stop.clone();
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(2)) => {}
                    _ = stop.changed() => return,
                }
                follower.follow_new_nodes(&mut agent).await;
            }
        });
    }

    /// Queues a task or actor call; `run_sender` ships it.
    pub fn enqueue(&self, spec: TaskSpec) -> Result<(), ClientError> {
        if let Some(e) = self.send_error.lock().take() {
            return Err(ClientError::Rpc(e));
        }
        self.queued.lock().push(spec);
        self.queued_signal.notify_one();
        self.queued_ready.notify_one();
        Ok(())
    }

    /// Blocks the calling thread (outside the async runtime) until a submission
    /// is queued or `timeout` passes; true when something is queued.
    pub fn wait_for_submissions(&self, timeout: Duration) -> bool {
        let mut queued = self.queued.lock();
        if queued.is_empty() {
            self.queued_ready.wait_for(&mut queued, timeout);
        }
        !queued.is_empty()
    }

    pub fn has_queued(&self) -> bool {
        !self.queued.lock().is_empty()
    }

    /// Sends everything queued for a background sender: a failure is kept and
    /// raised by the next submission or flush.
    pub async fn send_queued(&self) {
        if let Err(e) = self.flush_submissions().await {
            *self.send_error.lock() = Some(e.to_string());
        }
    }

    /// Sends everything queued, in order.
    pub async fn flush_submissions(&self) -> Result<(), ClientError> {
        let _turn = self.sending.lock().await;
        self.ship_queued().await
    }

    /// Sends the queued specs; the caller holds `sending`.
    async fn ship_queued(&self) -> Result<(), ClientError> {
        loop {
            let specs = std::mem::take(&mut *self.queued.lock());
            if specs.is_empty() {
                break;
            }
            agent_call!(self, submit_batch, SubmitBatchRequest { specs })?;
        }
        match self.send_error.lock().take() {
            Some(e) => Err(ClientError::Rpc(e)),
            None => Ok(()),
        }
    }

    /// The background sender; ends when the client is dropped.
    pub async fn run_sender(client: std::sync::Weak<CoreClient>) {
        loop {
            let Some(c) = client.upgrade() else { break };
            if !c.queued.lock().is_empty() {
                c.send_queued().await;
                continue;
            }
            let queued_signal = c.queued_signal.clone();
            let signal = queued_signal.notified();
            tokio::pin!(signal);
            signal.as_mut().enable();
            if c.queued.lock().is_empty() {
                drop(c);
                // Wake up now and then to notice that the client was dropped (rarely: a thousand
                // idle workers each waking often keep a node's CPUs busy).
                let _ = tokio::time::timeout(Duration::from_secs(5), signal).await;
            }
        }
    }

    /// The raw RPC client of the agent's `DriverService`. Callers that depend on
    /// earlier submissions should call `flush_submissions` first.
    pub fn driver(&self) -> DriverClient {
        self.driver.clone()
    }

    pub fn incref(&self, id: ObjectId) {
        let mut refs = self.refs.lock();
        let was_clean = !refs.has_changes();
        refs.incref(id);
        self.signal_first_change(was_clean && refs.has_changes());
    }

    pub fn decref(&self, id: ObjectId) {
        let mut refs = self.refs.lock();
        let was_clean = !refs.has_changes();
        refs.decref(id);
        self.signal_first_change(was_clean && refs.has_changes());
    }

    /// Wakes the background flush when there were no changes to send before (later ones go
    /// with it): the call path pays a branch, not a wake-up per reference.
    fn signal_first_change(&self, first: bool) {
        if first {
            self.refs_changed.notify_one();
        }
    }

    /// Signalled when reference changes appear after none were pending (one stored wake-up
    /// while nobody waits): the background flush waits on it instead of polling, so an idle
    /// process sleeps.
    pub fn refs_changed(&self) -> std::sync::Arc<tokio::sync::Notify> {
        self.refs_changed.clone()
    }

    pub fn mark_reported(&self, id: ObjectId) {
        self.refs.lock().mark_reported(id);
    }

    /// The agent registers the submitter as holder of a task's returns itself.
    pub fn mark_reported_all(&self, ids: &[ObjectId]) {
        let mut refs = self.refs.lock();
        for id in ids {
            refs.mark_reported(*id);
        }
    }

    pub fn has_ref_changes(&self) -> bool {
        self.refs.lock().has_changes() || !self.released.lock().is_empty()
    }

    /// This process dropped a view of the object's arena range.
    pub fn release_view(&self, id: ObjectId) {
        let mut released = self.released.lock();
        released.push(id);
        self.signal_first_change(released.len() == 1);
    }

    /// Opens a worker's session with the agent: returns the stream of assignments.
    pub async fn worker_connect(&self) -> Result<tonic::Streaming<Assignment>, ClientError> {
        // Unbounded, because senders must not block (`try_task_done_now` runs on the
        // task's thread). What bounds it: a worker sends one `Done` per assignment it
        // ran and gets no new work until the agent has read that `Done`, and reference
        // changes are merged in `RefTable` and sent as one message per flush.
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let hello = WorkerHello { worker_id: self.client_id.to_vec(), pid: std::process::id() };
        let _ = tx.send(WorkerEvent { event: Some(worker_event::Event::Hello(hello)) });
        *self.worker_events.lock() = Some(tx);
        let stream = tokio_stream::wrappers::UnboundedReceiverStream::new(rx);
        Ok(self.worker.clone().worker_connect(stream).await?.into_inner())
    }

    fn worker_stream(&self) -> Option<tokio::sync::mpsc::UnboundedSender<WorkerEvent>> {
        self.worker_events.lock().clone()
    }

    /// Reference changes for a unary RPC; a worker sends them on its stream instead.
    fn deltas_for_rpc(&self) -> Option<RefDeltas> {
        if self.worker_events.lock().is_some() {
            return None;
        }
        self.take_ref_deltas()
    }

    /// Pending reference changes, to ride along with the next RPC.
    pub fn take_ref_deltas(&self) -> Option<RefDeltas> {
        let (inc, dec) = self.refs.lock().take_changes();
        let released = std::mem::take(&mut *self.released.lock());
        if inc.is_empty() && dec.is_empty() && released.is_empty() {
            return None;
        }
        Some(RefDeltas {
            incref: inc.into_iter().map(|i| i.to_vec()).collect(),
            decref: dec.into_iter().map(|i| i.to_vec()).collect(),
            released: released.into_iter().map(|i| i.to_vec()).collect(),
        })
    }

    /// Sends pending reference changes after any queued submissions (which may
    /// use the objects being dropped), all under the send lock so nothing overtakes.
    pub async fn flush_refs(&self) -> Result<(), ClientError> {
        let _turn = self.sending.lock().await;
        self.ship_queued().await?;
        let Some(deltas) = self.take_ref_deltas() else { return Ok(()) };
        if let Some(events) = self.worker_stream() {
            let _ = events.send(WorkerEvent { event: Some(worker_event::Event::Refs(deltas)) });
            return Ok(());
        }
        agent_call!(
            self,
            update_refs,
            UpdateRefsRequest { client_id: self.client_id.to_vec(), ref_deltas: Some(deltas) }
        )?;
        Ok(())
    }

    pub async fn create_actor(&self, spec: TaskSpec, get_if_exists: bool) -> Result<(ActorId, bool), ClientError> {
        self.flush_submissions().await?;
        let reply =
            agent_call!(self, create_actor, CreateActorRequest { spec: Some(spec), get_if_exists })?.into_inner();
        Ok((ActorId::from_bytes(&reply.actor_id)?, reply.existing))
    }

    /// Where to write a new object of `size` bytes (an arena range or a file).
    pub async fn create_object(&self, id: ObjectId, size: usize) -> Result<ObjectLocation, ClientError> {
        if self.worker_stream().is_some() && self.has_ref_changes() {
            self.flush_refs().await?;
        }
        // Submissions first: the ref changes sent with this call may drop objects they use.
        let _turn = self.sending.lock().await;
        self.ship_queued().await?;
        let request = CreateObjectRequest {
            object_id: id.to_vec(),
            size: size as u64,
            client_id: self.client_id.to_vec(),
            ref_deltas: self.deltas_for_rpc(),
        };
        let reply = agent_call!(self, create_object, request)?;
        reply.into_inner().location.ok_or_else(|| ClientError::Rpc("the agent returned no location".into()))
    }

    pub async fn seal_object(&self, object: ObjectLocation, nested: &[ObjectId]) -> Result<(), ClientError> {
        let _turn = self.sending.lock().await;
        self.ship_queued().await?;
        let request = PutObjectRequest {
            client_id: self.client_id.to_vec(),
            object: Some(object),
            nested_refs: nested.iter().map(|n| n.to_vec()).collect(),
            ref_deltas: self.deltas_for_rpc(),
        };
        agent_call!(self, put_object, request)?;
        Ok(())
    }

    /// Returns None when `timeout_ms` passed first. Queued submissions ride
    /// along; the send lock is held only for a short first wait, so other
    /// threads' submissions are never held up behind a long `get`.
    pub async fn get_objects(
        &self,
        ids: &[ObjectId],
        timeout_ms: i64,
    ) -> Result<Option<Vec<ObjectLocation>>, ClientError> {
        Ok(self.get_objects_or_error(ids, timeout_ms, false).await?.map(Got::into_objects))
    }

    /// As [`CoreClient::get_objects`]; with `fail_fast`, ends as soon as one object holds a
    /// failed task's error (`Got::Failed`), as Ray's get does, instead of waiting for all.
    pub async fn get_objects_or_error(
        &self,
        ids: &[ObjectId],
        timeout_ms: i64,
        fail_fast: bool,
    ) -> Result<Option<Got>, ClientError> {
        let ids: Vec<Vec<u8>> = ids.iter().map(|id| id.to_vec()).collect();
        const FIRST_WAIT_MS: i64 = 20;
        let first = if timeout_ms < 0 { FIRST_WAIT_MS } else { timeout_ms.min(FIRST_WAIT_MS) };
        let reply = {
            let _turn = self.sending.lock().await;
            let request = GetObjectsRequest {
                client_id: self.client_id.to_vec(),
                object_ids: ids.clone(),
                timeout_ms: first,
                ref_deltas: self.deltas_for_rpc(),
                submissions: std::mem::take(&mut *self.queued.lock()),
                fail_fast,
            };
            agent_call!(self, get_objects, request, deadline: wait_deadline(first))?.into_inner()
        };
        if !reply.timed_out {
            return Ok(Some(Got::from_reply(reply)));
        }
        if timeout_ms >= 0 && timeout_ms <= first {
            return Ok(None);
        }
        let rest = if timeout_ms < 0 { -1 } else { timeout_ms - first };
        self.flush_submissions().await?;
        // No ref changes here: this long wait holds no lock, so they could overtake
        // submissions queued meanwhile; `flush_refs` sends them in order.
        let request = GetObjectsRequest {
            client_id: self.client_id.to_vec(),
            object_ids: ids,
            timeout_ms: rest,
            ref_deltas: None,
            submissions: Vec::new(),
            fail_fast,
        };
        let reply = agent_call!(self, get_objects, request, deadline: wait_deadline(rest))?.into_inner();
        Ok((!reply.timed_out).then(|| Got::from_reply(reply)))
    }

    pub async fn wait_objects(
        &self,
        ids: &[ObjectId],
        num_returns: u32,
        timeout_ms: i64,
    ) -> Result<Vec<ObjectId>, ClientError> {
        self.flush_submissions().await?;
        let object_ids = ids.iter().map(|id| id.to_vec()).collect();
        let request = WaitObjectsRequest { client_id: self.client_id.to_vec(), object_ids, num_returns, timeout_ms };
        let ready =
            agent_call!(self, wait_objects, request, deadline: wait_deadline(timeout_ms))?.into_inner().ready_ids;
        Ok(crate::ids::parse_all(&ready, ObjectId::from_bytes)?)
    }

    /// A worker's completion sent right away, when nothing is queued ahead of it
    /// (the common case): no async runtime round trip. Gives the request back
    /// when it must take the ordered path instead.
    pub fn try_task_done_now(&self, mut done: TaskDoneRequest) -> Option<TaskDoneRequest> {
        let Some(events) = self.worker_stream() else { return Some(done) };
        let Ok(_turn) = self.sending.try_lock() else { return Some(done) };
        if !self.queued.lock().is_empty() || self.send_error.lock().is_some() {
            return Some(done);
        }
        done.ref_deltas = self.take_ref_deltas();
        match events.send(WorkerEvent { event: Some(worker_event::Event::Done(done)) }) {
            Ok(()) => None,
            Err(e) => match e.0.event {
                Some(worker_event::Event::Done(d)) => Some(d),
                _ => None,
            },
        }
    }

    /// Whether the agent cancelled `task_id` (asked by a worker that an interrupt
    /// reached outside user code).
    pub async fn task_cancelled(&self, task_id: Vec<u8>) -> Result<bool, ClientError> {
        let reply = self.worker.clone().task_cancelled(TaskCancelledRequest { task_id }).await?;
        Ok(reply.into_inner().cancelled)
    }

    /// Reports a finished task. A worker sends it on its stream without waiting.
    pub async fn task_done(&self, mut done: TaskDoneRequest) -> Result<(), ClientError> {
        let _turn = self.sending.lock().await;
        self.ship_queued().await?;
        done.ref_deltas = self.take_ref_deltas();
        match self.worker_stream() {
            Some(events) => events
                .send(WorkerEvent { event: Some(worker_event::Event::Done(done)) })
                .map_err(|_| ClientError::Rpc("the worker's stream to its node agent is closed".into())),
            None => {
                agent_call!(self, worker_service_server::WorkerService, worker, task_done, done)?;
                Ok(())
            }
        }
    }
}

/// The driver's subscriptions to node agents' worker output.
struct LogFollower {
    token: String,
    job_id: Option<JobId>,
    skip: Option<String>,
    following: Mutex<std::collections::HashSet<String>>,
    channels: AgentChannels,
    stop: tokio::sync::watch::Receiver<()>,
}

impl LogFollower {
    async fn follow_new_nodes(self: &std::sync::Arc<Self>, agent: &mut DriverClient) {
        let Ok(reply) = agent.cluster_info(Empty {}).await else { return };
        for node in reply.into_inner().nodes {
            if !node.alive || self.skip.as_deref() == Some(node.address.as_str()) {
                continue;
            }
            if !self.following.lock().insert(node.address.clone()) {
                continue;
            }
            let Some(stream) = self.subscribe(&node.address).await else {
                self.following.lock().remove(&node.address);
                continue;
            };
            let this = self.clone();
            tokio::spawn(async move {
                this.print(stream).await;
                this.following.lock().remove(&node.address);
            });
        }
    }

    async fn subscribe(&self, address: &str) -> Option<tonic::Streaming<LogBatch>> {
        let mut client = self.channels.driver(address, &self.token).await.ok()?;
        let request = SubscribeLogsRequest { job_id: self.job_id.map(JobId::to_vec).unwrap_or_default() };
        client.subscribe_logs(request).await.ok().map(|r| r.into_inner())
    }

    async fn print(&self, mut stream: tonic::Streaming<LogBatch>) {
        let mut stop = self.stop.clone();
        loop {
            let batch = tokio::select! {
                next = stream.message() => match next {
                    Ok(Some(batch)) => batch,
                    _ => return,
                },
                _ = stop.changed() => return,
            };
            for line in batch.lines {
                crate::agent::print_worker_line(&line.prefix, &line.text, line.is_stderr);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxray_proto::ReserveBundlesRequest;
    use std::time::Instant;

    /// An address whose TCP connects hang: a listener that never accepts, with a
    /// full backlog, so the kernel drops further SYNs.
    async fn blackhole() -> (String, tokio::net::TcpListener, Vec<std::net::TcpStream>) {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let listener = socket.listen(0).unwrap();
        let address = listener.local_addr().unwrap();
        let mut fillers = Vec::new();
        loop {
            match std::net::TcpStream::connect_timeout(&address, Duration::from_millis(300)) {
                Ok(s) => fillers.push(s),
                Err(_) => break,
            }
            assert!(fillers.len() < 64, "the backlog never filled");
        }
        (address.to_string(), listener, fillers)
    }

    #[tokio::test]
    async fn an_agent_that_never_answers_holds_up_only_its_own_calls() {
        let (dead, _listener, _fillers) = blackhole().await;
        let live = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let live_address = live.local_addr().unwrap().to_string();
        let channels = std::sync::Arc::new(AgentChannels::with_deadline(Duration::from_millis(500), 8));
        let stuck = tokio::spawn({
            let channels = channels.clone();
            let dead = dead.clone();
            async move {
                let mut agent = channels.bundles(&dead, "token").await?;
                let request = ReserveBundlesRequest { pg_id: vec![0; 16], bundles: vec![] };
                agent.reserve_bundles(request).await.map_err(ClientError::from)
            }
        });
        // Let the stuck call start connecting first.
        tokio::task::yield_now().await;
        let started = Instant::now();
        tokio::time::timeout(Duration::from_secs(2), channels.bundles(&live_address, "token"))
            .await
            .expect("a client for a live agent waited behind the dead one's connect")
            .unwrap();
        assert!(started.elapsed() < Duration::from_secs(2));
        // The dead agent's call fails at its deadline instead of hanging.
        let outcome = tokio::time::timeout(Duration::from_secs(5), stuck).await.expect("no deadline").unwrap();
        assert!(outcome.is_err(), "{outcome:?}");
    }

    #[tokio::test]
    async fn the_channel_cache_keeps_the_most_recently_used_agents() {
        let channels = AgentChannels::with_deadline(RPC_DEADLINE, 2);
        channels.peer("127.0.0.1:1", "t").await.unwrap();
        channels.peer("127.0.0.1:2", "t").await.unwrap();
        channels.peer("127.0.0.1:1", "t").await.unwrap();
        channels.peer("127.0.0.1:3", "t").await.unwrap();
        assert_eq!(channels.len(), 2);
        let kept: Vec<String> = channels.channels.lock().keys().cloned().collect();
        assert_eq!(kept, ["127.0.0.1:1", "127.0.0.1:3"], "the least recently used (:2) was closed");
        channels.forget("127.0.0.1:1");
        assert_eq!(channels.len(), 1);
    }

    #[test]
    fn waits_get_their_own_deadline_and_unbounded_waits_none_that_fires() {
        assert_eq!(wait_deadline(1_000), Some(Duration::from_secs(1) + RPC_DEADLINE));
        assert_eq!(wait_deadline(-1), None);
        let request = with_deadline((), None);
        assert!(request.metadata().get("grpc-timeout").is_some(), "an explicit deadline keeps the default off");
    }
}
