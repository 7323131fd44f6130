//! Starting a node in the current process: a node agent, plus the head when
//! this node hosts it (the embedded cluster that `oxray.init()` uses, or
//! `oxray start --head`), or joined to a head elsewhere (`oxray start --address`);
//! and tearing it down without leftovers.

use crate::agent::node_stats::StatsSampler;
use crate::agent::{AgentConfig, AgentService, AgentShared, AgentState, SpawnConfig};
use crate::auth::{AttachToken, RequireToken};
use crate::client::{RPC_DEADLINE, connect_control_channel};
use crate::clock;
use crate::head::Head;
use crate::head::cluster_state::HeadClusterState;
use crate::head::job_resources::{HeadDrivers, HeadEntrypointResources, HeadRemoteJobs};
use crate::ids::NodeId;
use crate::resources::ResourceSet;
use crate::tls::TlsSettings;
use oxray_http::{ClusterState, HttpConfig, HttpServer, MetricsServer, NodeMetricsSource, NodeSample};
use oxray_jobs::{DriverTable, EntrypointResources, JobsConfig, RemoteJobs};
use oxray_object_store::{ObjectStore, process_start_ticks};
use oxray_proto::bundle_service_server::BundleServiceServer;
use oxray_proto::driver_service_server::DriverServiceServer;
use oxray_proto::head_service_client::HeadServiceClient;
use oxray_proto::head_service_server::HeadServiceServer;
use oxray_proto::node_job_service_server::NodeJobServiceServer;
use oxray_proto::node_state_service_server::NodeStateServiceServer;
use oxray_proto::peer_service_server::PeerServiceServer;
use oxray_proto::worker_service_server::WorkerServiceServer;
use oxray_proto::{HeartbeatRequest, NodeInfo, NodeStats, RegisterNodeRequest, ResourceDemand};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio_stream::wrappers::TcpListenerStream;

/// Where this node's head is.
#[derive(Debug, Clone)]
pub enum HeadRole {
    /// Serve the head here, on the agent's port (0 picks a free one). With a
    /// state directory its tables survive a restart.
    Local { port: u16, state_dir: Option<PathBuf> },
    /// Join the head at this address.
    Join { address: String },
}

#[derive(Debug, Clone)]
pub struct ClusterConfig {
    pub head: HeadRole,
    /// The node agent's port when joining (0 picks a free one).
    pub agent_port: u16,
    pub num_cpus: Option<f64>,
    pub num_gpus: Option<usize>,
    pub resources: HashMap<String, f64>,
    pub memory: Option<u64>,
    pub object_store_memory: Option<u64>,
    pub session_dir: PathBuf,
    pub python: String,
    pub cwd: PathBuf,
    pub worker_env: Vec<(String, String)>,
    pub host: String,
    pub token: Option<String>,
    pub forward_output: bool,
    /// Other nodes may join (`oxray start`): a request no live node can meet
    /// waits for one instead of failing at once. Always so for a joining node.
    pub nodes_may_join: bool,
    /// The head's HTTP server (Ray's REST API, the dashboard): `(host,
    /// port)`, port 0 picking a free one. Ignored by a joining node.
    pub dashboard: Option<(String, u16)>,
    /// This node's Prometheus endpoint (`--metrics-export-port`): `(host, port)`,
    /// port 0 picking a free one; None serves none.
    pub metrics: Option<(String, u16)>,
    /// Ray's node labels (`--labels`, `init(labels=)`), matched by label selectors.
    pub labels: HashMap<String, String>,
}

pub struct RunningCluster {
    pub head_address: String,
    pub agent_address: String,
    pub token: String,
    pub node_id: NodeId,
    pub session_dir: PathBuf,
    pub shm_dir: PathBuf,
    pub agent: Arc<AgentShared>,
    /// `host:port` of the head's HTTP server, when it runs one.
    pub dashboard_address: Option<String>,
    /// `host:port` of this node's Prometheus endpoint, when it serves one.
    pub metrics_address: Option<String>,
    http: Option<HttpServer>,
    /// Set on a head node: what a later `serve_http` builds its server from.
    http_context: Option<HttpContext>,
    metrics: Option<MetricsServer>,
    stop: Vec<oneshot::Sender<()>>,
    background: Vec<tokio::task::JoinHandle<()>>,
}

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("invalid cluster option: {0}")]
    Config(String),
    #[error("cannot bind {what} on {addr}: {source}")]
    Bind { what: &'static str, addr: String, source: std::io::Error },
    #[error("cannot prepare {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{0}")]
    Auth(String),
    #[error(transparent)]
    Token(#[from] crate::auth::TokenError),
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    #[error("the head's HTTPS server cannot use OXRAY_TLS_CERT and OXRAY_TLS_KEY (--tls-cert, --tls-key): {0}")]
    Https(#[source] oxray_http::HttpsError),
    #[error(
        "cannot serve TLS: {0}. Check that OXRAY_TLS_CERT and OXRAY_TLS_KEY are a matching PEM certificate and key"
    )]
    TlsServer(tonic::transport::Error),
    #[error("cannot start the head: {0}")]
    Head(#[from] crate::head::HeadError),
    #[error("cannot start the head's HTTP server: {0}")]
    Http(#[from] oxray_http::HttpError),
    #[error(
        "cannot reach the head at {address}: {reason}. Is `oxray start --head` running there, and is the port right?"
    )]
    HeadUnreachable { address: String, reason: String },
    #[error("node registration with the head at {address} failed: {reason}")]
    Registration { address: String, reason: String },
}

fn read_meminfo(key: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with(key))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Free bytes on the filesystem holding `path`.
fn free_space(path: &Path) -> Option<u64> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: statvfs is plain old data; all-zero bytes are a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid C string and out-pointer.
    (unsafe { libc::statvfs(c.as_ptr(), &mut st) } == 0).then(|| st.f_bavail as u64 * st.f_frsize as u64)
}

/// GPUs visible to this host: CUDA_VISIBLE_DEVICES when set, else the NVIDIA driver's list.
pub fn detect_gpus() -> usize {
    if let Ok(v) = std::env::var("CUDA_VISIBLE_DEVICES") {
        return v.split(',').filter(|s| !s.trim().is_empty()).count();
    }
    std::fs::read_dir("/proc/driver/nvidia/gpus").map(|d| d.count()).unwrap_or(0)
}

/// The model of this host's first NVIDIA GPU under Ray's accelerator type name
/// ("NVIDIA H100 80GB HBM3" is `H100`), from the driver's `/proc` files.
pub fn detect_accelerator_type() -> Option<String> {
    let gpus = std::fs::read_dir("/proc/driver/nvidia/gpus").ok()?;
    let mut dirs: Vec<_> = gpus.flatten().map(|e| e.path()).collect();
    dirs.sort();
    let info = std::fs::read_to_string(dirs.first()?.join("information")).ok()?;
    let model = info.lines().find_map(|l| l.strip_prefix("Model:"))?;
    accelerator_type_of(model.trim())
}

/// Ray's rule: the word after the vendor, up to its first character that is not
/// an upper-case letter or a digit ("Tesla V100-SXM2-16GB" is `V100`).
pub fn accelerator_type_of(model: &str) -> Option<String> {
    let word = model.split_whitespace().nth(1)?;
    let name: String = word.chars().take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit()).collect();
    (!name.is_empty()).then_some(name)
}

/// This process as `<pid>-<start ticks>`, the owner recorded on its arena and session.
fn owner_tag() -> String {
    let pid = std::process::id();
    format!("{pid}-{}", process_start_ticks(pid).unwrap_or(0))
}

/// Whether the process an owner tag (`<pid>-<start ticks>`, or a bare pid from
/// older versions) names is still running; a reused pid is not it.
fn owner_alive(tag: &str) -> bool {
    let (pid, ticks) = match tag.trim().split_once('-') {
        Some((pid, ticks)) => (pid, Some(ticks)),
        None => (tag.trim(), None),
    };
    let Ok(pid) = pid.parse::<u32>() else { return true }; // not ours to judge
    match ticks.map(str::parse::<u64>) {
        Some(Ok(ticks)) => process_start_ticks(pid) == Some(ticks),
        Some(Err(_)) => true,
        None => Path::new(&format!("/proc/{pid}")).exists(),
    }
}

fn owned_by_me(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions.
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir() && m.uid() == unsafe { libc::geteuid() })
}

/// Removes the shared-memory directories (`oxray-<pid>-<start ticks>-<node>`) of
/// oxray processes that died without cleaning up.
fn remove_stale_shm(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("oxray-") else { continue };
        let Some((owner, _node)) = rest.rsplit_once('-') else { continue };
        if !owner_alive(owner) && owned_by_me(&entry.path()) {
            let _ = oxray_object_store::remove_dir_if_exists(&entry.path());
        }
    }
}

/// The file in a session directory that names the process owning it.
const SESSION_OWNER_FILE: &str = "owner";

/// Removes the spilled objects of sessions under `root` whose owner died without
/// cleaning up; their logs stay for a post-mortem.
fn remove_stale_spill(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else { return };
    for entry in entries.flatten() {
        let session = entry.path();
        if !entry.file_name().to_string_lossy().starts_with("session_") || !owned_by_me(&session) {
            continue;
        }
        let Ok(owner) = std::fs::read_to_string(session.join(SESSION_OWNER_FILE)) else { continue };
        if !owner_alive(&owner) {
            let _ = oxray_object_store::remove_dir_if_exists(&session.join("spill"));
        }
    }
}

/// How often work that no live node can run is reported (Ray: 30 s);
/// `OXRAY_INFEASIBLE_WARNING_INTERVAL_S` overrides it.
fn infeasible_warning_interval() -> Result<Duration, ClusterError> {
    const VAR: &str = "OXRAY_INFEASIBLE_WARNING_INTERVAL_S";
    let Ok(text) = std::env::var(VAR) else { return Ok(Duration::from_secs(30)) };
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0)
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| ClusterError::Config(format!("{VAR}={text:?}: expected a number of seconds > 0")))
}

/// The most GPUs one node may declare.
const MAX_GPUS: usize = 65_536;

fn build_resources(cfg: &ClusterConfig, ip: &str, is_head: bool) -> Result<(ResourceSet, usize, u64), ClusterError> {
    let cpus =
        cfg.num_cpus.unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) as f64);
    let gpus = cfg.num_gpus.unwrap_or_else(detect_gpus);
    // One slot is kept per GPU: an absurd count would abort on allocation.
    if gpus > MAX_GPUS {
        return Err(ClusterError::Config(format!(
            "num_gpus={gpus} is more than the {MAX_GPUS} GPUs one node may have"
        )));
    }
    let system_memory = read_meminfo("MemAvailable:").unwrap_or(8 << 30);
    let shm_free = free_space(Path::new("/dev/shm")).unwrap_or(system_memory / 2);
    let store =
        cfg.object_store_memory.unwrap_or_else(|| (system_memory * 3 / 10).min(shm_free * 9 / 10).max(64 << 20));
    // The arena is a sparse tmpfs file: writing past what /dev/shm can hold would fault.
    if store > shm_free {
        return Err(ClusterError::Config(format!(
            "object_store_memory={store} bytes is more than the {shm_free} bytes free in /dev/shm; \
             pass a smaller object_store_memory or enlarge /dev/shm"
        )));
    }
    let memory = cfg.memory.unwrap_or_else(|| system_memory.saturating_sub(store) * 7 / 10);
    let mut set = ResourceSet::new();
    let cfg_err = |e: crate::resources::ResourceError| ClusterError::Config(e.to_string());
    set.set("CPU", cpus).map_err(cfg_err)?;
    set.set("GPU", gpus as f64).map_err(cfg_err)?;
    set.set("memory", memory as f64).map_err(cfg_err)?;
    set.set("object_store_memory", store as f64).map_err(cfg_err)?;
    set.set(&format!("node:{ip}"), 1.0).map_err(cfg_err)?;
    if is_head {
        set.set("node:__internal_head__", 1.0).map_err(cfg_err)?;
    }
    // Ray's: a node with GPUs advertises their model, so `accelerator_type=` requests can be met.
    let declared = cfg.resources.keys().any(|k| k.starts_with("accelerator_type:"));
    if gpus > 0
        && !declared
        && let Some(model) = detect_accelerator_type()
    {
        set.set(&format!("accelerator_type:{model}"), 1.0).map_err(cfg_err)?;
    }
    for (name, value) in &cfg.resources {
        if matches!(name.as_str(), "CPU" | "GPU") {
            return Err(ClusterError::Config(format!("use num_cpus/num_gpus instead of resources={{{name:?}: ...}}")));
        }
        set.set(name, *value).map_err(cfg_err)?;
    }
    Ok((set, gpus, store))
}

/// The node's labels: those given, plus Ray's `ray.io/node-id` and, with GPUs,
/// `ray.io/accelerator-type` (given ones win).
fn node_labels(
    cfg: &ClusterConfig,
    node_id: NodeId,
    total: &ResourceSet,
) -> Result<HashMap<String, String>, ClusterError> {
    crate::labels::check_node_labels(&cfg.labels).map_err(ClusterError::Config)?;
    let mut labels = HashMap::from([(crate::labels::NODE_ID_LABEL.to_string(), node_id.to_string())]);
    if let Some(model) = total.names().find_map(|name| name.strip_prefix("accelerator_type:")) {
        labels.insert(crate::labels::ACCELERATOR_LABEL.to_string(), model.to_string());
    }
    labels.extend(cfg.labels.clone());
    Ok(labels)
}

/// Accepted connections with Nagle off: the builder's `tcp_nodelay` does not
/// apply to an incoming stream we provide, and small RPCs would stall on delayed ACKs.
fn incoming_nodelay(listener: TcpListener) -> impl tokio_stream::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    use tokio_stream::StreamExt;
    TcpListenerStream::new(listener).map(|conn| {
        if let Ok(stream) = &conn {
            let _ = stream.set_nodelay(true);
        }
        conn
    })
}

/// Whether `host` only accepts connections from this machine.
fn is_loopback(host: &str) -> bool {
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

async fn bind(host: &str, port: u16, what: &'static str) -> Result<TcpListener, ClusterError> {
    let addr = format!("{host}:{port}");
    TcpListener::bind(&addr).await.map_err(|source| ClusterError::Bind { what, addr, source })
}

/// Starts the node agent, and the head too when `cfg.head` says so.
pub async fn start_node(cfg: ClusterConfig) -> Result<RunningCluster, ClusterError> {
    let node_id = NodeId::random();
    let is_head = matches!(cfg.head, HeadRole::Local { .. });
    let token = match (&cfg.token, is_head) {
        (Some(t), _) => t.clone(),
        (None, true) => crate::auth::generate_token(),
        (None, false) => return Err(ClusterError::Config("joining a cluster needs its token".into())),
    };
    let (total, num_gpus, store_bytes) = build_resources(&cfg, &cfg.host, is_head)?;
    let warn_every = infeasible_warning_interval()?;
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| ClusterError::Io { path, source }
    };
    let owner = owner_tag();
    oxray_object_store::create_private_dir_all(&cfg.session_dir.join("logs")).map_err(io(&cfg.session_dir))?;
    oxray_object_store::create_private_dir_all(&cfg.session_dir).map_err(io(&cfg.session_dir))?;
    let owner_file = cfg.session_dir.join(SESSION_OWNER_FILE);
    oxray_object_store::write_private_file(&owner_file, owner.as_bytes()).map_err(io(&owner_file))?;
    if let Some(root) = cfg.session_dir.parent() {
        remove_stale_spill(root);
    }
    let shm_root = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { cfg.session_dir.clone() };
    remove_stale_shm(&shm_root);
    let shm_dir = shm_root.join(format!("oxray-{owner}-{}", node_id.short()));
    let store =
        ObjectStore::new(shm_dir.clone(), cfg.session_dir.join("spill"), store_bytes as usize).map_err(io(&shm_dir))?;
    let cpus = total.get("CPU").ceil().max(1.0) as usize;
    let labels = node_labels(&cfg, node_id, &total)?;
    let state = AgentState::new(
        AgentConfig {
            node_id,
            total,
            num_gpus,
            max_starting_workers: cpus,
            worker_env: cfg.worker_env.clone(),
            inherited_env: crate::task_env::WorkerStartEnv::of_this_process(),
            dead_actors_kept: crate::head::dead_actor_limit(),
            labels,
        },
        store,
    );
    let agent = AgentShared::new(state);

    let listener = match &cfg.head {
        HeadRole::Local { port, .. } => bind(&cfg.host, *port, "the head").await?,
        HeadRole::Join { .. } => bind(&cfg.host, cfg.agent_port, "the node agent").await?,
    };
    let agent_address = listener.local_addr().map_err(io(&cfg.session_dir))?.to_string();
    let head = match &cfg.head {
        HeadRole::Local { state_dir: Some(dir), .. } => Some(Head::persistent(dir)?),
        HeadRole::Local { state_dir: None, .. } => Some(Head::default()),
        HeadRole::Join { .. } => None,
    };
    if let Some(head) = &head {
        // Before the HTTP server starts: the Jobs API re-attaches to jobs a previous head placed on
        // other nodes at once, and those calls carry this token (an empty one was refused).
        head.set_token(&token);
    }
    // What the head's HTTP server needs, kept so one can be started later (`serve_http`).
    let http_context = head.clone().map(|head| HttpContext {
        head,
        node_id,
        agent_address: agent_address.clone(),
        token: token.clone(),
        session_dir: cfg.session_dir.clone(),
        data_dir: match &cfg.head {
            HeadRole::Local { state_dir: Some(dir), .. } => dir.clone(),
            _ => cfg.session_dir.clone(),
        },
        python: cfg.python.clone(),
    });
    let http = match (&http_context, &cfg.dashboard) {
        (Some(context), Some((host, port))) => match context.start(host, *port).await {
            Ok(server) => Some(server),
            Err(e) => {
                agent.state.lock().store_mut().destroy();
                return Err(e);
            }
        },
        _ => None,
    };
    let dashboard_address = http.as_ref().map(|h| h.local_addr().to_string());
    let head_address = match &cfg.head {
        HeadRole::Local { .. } => agent_address.clone(),
        HeadRole::Join { address } => address.clone(),
    };
    {
        let mut st = agent.state.lock();
        st.address = agent_address.clone();
        if cfg.nodes_may_join || !is_head {
            st.expect_joining_nodes();
        }
    }
    *agent.spawn.lock() = Some(SpawnConfig {
        python: cfg.python.clone(),
        agent_address: agent_address.clone(),
        token: token.clone(),
        node_id,
        session_dir: cfg.session_dir.clone(),
        cwd: cfg.cwd.clone(),
        forward_output: cfg.forward_output,
    });
    agent.warm_worker_template(&[]);
    agent.serve_proxy.on_head.store(is_head, std::sync::atomic::Ordering::Relaxed);

    let mut background = Vec::new();
    let service = AgentService { shared: agent.clone(), address: agent_address.clone() };
    let guard = RequireToken::new(&token);
    // A generated server that checks the token and takes messages of any size
    // (objects stream through these services).
    macro_rules! guarded {
        ($server:ident, $service:expr) => {
            tonic::service::interceptor::InterceptedService::new(
                $server::new($service).max_decoding_message_size(usize::MAX).max_encoding_message_size(usize::MAX),
                guard.clone(),
            )
        };
    }
    // One port serves every caller's service: drivers, workers, peers, the head's bundle admin.
    let tls = TlsSettings::from_env()?;
    let mut server = tonic::transport::Server::builder();
    match &tls {
        Some(tls) => server = server.tls_config(tls.server_config()?).map_err(ClusterError::TlsServer)?,
        None if !is_loopback(&cfg.host) => tracing::warn!(
            host = %cfg.host,
            "serving on a non-loopback address without TLS: the token and all data travel in cleartext; \
             pass --tls-cert/--tls-key/--tls-ca to `oxray start` (or set OXRAY_TLS_CERT/KEY/CA)"
        ),
        None => {}
    }
    let mut router = server
        .initial_stream_window_size(Some(8 << 20))
        .initial_connection_window_size(Some(16 << 20))
        .add_service(guarded!(DriverServiceServer, service.clone()))
        .add_service(guarded!(WorkerServiceServer, service.clone()))
        .add_service(guarded!(PeerServiceServer, service.clone()))
        .add_service(guarded!(BundleServiceServer, service.clone()))
        .add_service(guarded!(NodeJobServiceServer, service.clone()))
        .add_service(guarded!(NodeStateServiceServer, service));
    if let Some(head) = &head {
        background.push(head.spawn_placement_loop());
        // Messages of any size here too: a Serve checkpoint carries deployments' pickled code and arguments.
        router = router.add_service(guarded!(HeadServiceServer, head.clone()));
    }
    let (server_stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(router.serve_with_incoming_shutdown(incoming_nodelay(listener), async {
        let _ = stopped.await;
    }));
    let stop = vec![server_stop];

    let unreachable = |reason: String| ClusterError::HeadUnreachable { address: head_address.clone(), reason };
    // The head's calls never wait on purpose; creating a placement group may queue
    // behind others whose bundle calls each have `RPC_DEADLINE`, hence twice that.
    let channel =
        connect_control_channel(&head_address, 2 * RPC_DEADLINE).await.map_err(|e| unreachable(e.to_string()))?;
    let mut head = HeadServiceClient::with_interceptor(channel, AttachToken::new(&token)?)
        .max_decoding_message_size(usize::MAX)
        .max_encoding_message_size(usize::MAX);
    let mut info: NodeInfo = agent.node_info(&agent_address);
    let latest_stats: Arc<parking_lot::Mutex<Option<NodeStats>>> = Arc::default();
    let metrics = match &cfg.metrics {
        Some((host, port)) => {
            let source = LatestStats {
                node_id: node_id.to_string(),
                ip: info.ip.clone(),
                latest: latest_stats.clone(),
                agent: Arc::downgrade(&agent),
            };
            let started = async {
                let listener =
                    TcpListener::bind(format!("{host}:{port}")).await.map_err(|source| ClusterError::Bind {
                        what: "the metrics port (pick another: --metrics-export-port)",
                        addr: format!("{host}:{port}"),
                        source,
                    })?;
                MetricsServer::start(listener, &token, Arc::new(source)).map_err(ClusterError::Http)
            };
            match started.await {
                Ok(server) => Some(server),
                Err(e) => {
                    for s in stop {
                        let _ = s.send(());
                    }
                    agent.state.lock().store_mut().destroy();
                    return Err(e);
                }
            }
        }
        None => None,
    };
    info.metrics_address = metrics.as_ref().map(|m| m.local_addr().to_string()).unwrap_or_default();
    info.is_head = is_head;
    info.session_dir = cfg.session_dir.display().to_string();
    info.start_time_ms = clock::now_ms();
    if let Err(status) = head.register_node(RegisterNodeRequest { node: Some(info.clone()) }).await {
        for s in stop {
            let _ = s.send(());
        }
        agent.state.lock().store_mut().destroy();
        return Err(match status.code() {
            tonic::Code::Unauthenticated | tonic::Code::PermissionDenied => ClusterError::Auth(format!(
                "the head at {head_address} refused this node: {}. Pass the cluster's token with --token or OXRAY_TOKEN",
                status.message()
            )),
            tonic::Code::Unavailable => unreachable(status.message().to_string()),
            _ => ClusterError::Registration { address: head_address.clone(), reason: status.message().to_string() },
        });
    }
    agent.attach_head(head.clone());
    if let Some(http) = &http {
        http.recover_serve(); // after a restart, Serve comes back through this node
    }
    let warn_agent = agent.clone();
    background.push(tokio::spawn(async move {
        let mut tick = tokio::time::interval(warn_every);
        tick.tick().await;
        loop {
            tick.tick().await;
            warn_agent.with_state(|st| st.warn_infeasible());
        }
    }));
    let beat_agent = agent.clone();
    let mut sampler = StatsSampler::new(&cfg.session_dir, num_gpus > 0);
    let beat_latest = latest_stats.clone();
    background.push(tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            let sample = sampler.sample(&beat_agent).await;
            *beat_latest.lock() = Some(sample.clone());
            let stats = Some(sample);
            let (available, demand) = beat_agent.with_state(|st| {
                st.age_reservations(clock::now_ms());
                let demand = st
                    .pending_demand()
                    .into_iter()
                    .map(|(shape, count)| ResourceDemand { shape: shape.to_map(), count })
                    .collect::<Vec<_>>();
                (st.reported_available().to_map(), demand)
            });
            match head.heartbeat(HeartbeatRequest { node_id: node_id.to_vec(), available, stats, demand }).await {
                Ok(reply) => beat_agent.with_state(|st| st.update_peers(&reply.into_inner().nodes, clock::now_ms())),
                Err(s) if s.code() == tonic::Code::NotFound => {
                    // A head that restarted without this node on record: register again.
                    let _ = head.register_node(RegisterNodeRequest { node: Some(info.clone()) }).await;
                }
                Err(_) => {}
            }
        }
    }));

    Ok(RunningCluster {
        head_address,
        agent_address,
        token,
        node_id,
        session_dir: cfg.session_dir,
        shm_dir,
        agent,
        dashboard_address,
        metrics_address: metrics.as_ref().map(|m| m.local_addr().to_string()),
        http,
        http_context,
        metrics,
        stop,
        background,
    })
}

/// The head's state and settings its HTTP server (Jobs API, State API, dashboard) is built from.
struct HttpContext {
    head: Head,
    node_id: NodeId,
    agent_address: String,
    token: String,
    session_dir: PathBuf,
    data_dir: PathBuf,
    python: String,
}

impl HttpContext {
    async fn start(&self, host: &str, port: u16) -> Result<HttpServer, ClusterError> {
        let listener = TcpListener::bind(format!("{host}:{port}")).await.map_err(|source| ClusterError::Bind {
            what: "the dashboard port (pick another: --dashboard-port, or init(dashboard_port=...))",
            addr: format!("{host}:{port}"),
            source,
        })?;
        let session_name = self.session_dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let head = &self.head;
        let jobs = JobsConfig {
            head_address: self.agent_address.clone(),
            token: self.token.clone(),
            data_dir: self.data_dir.clone(),
            session_dir: self.session_dir.clone(),
            python: self.python.clone(),
            resources: Some(
                Arc::new(HeadEntrypointResources::new(head.clone(), self.node_id)) as Arc<dyn EntrypointResources>
            ),
            drivers: Some(Arc::new(HeadDrivers(head.clone())) as Arc<dyn DriverTable>),
            remote: Some(Arc::new(HeadRemoteJobs::new(head.clone(), self.agent_address.clone())) as Arc<dyn RemoteJobs>),
        };
        let cluster = Some(Arc::new(HeadClusterState(head.clone())) as Arc<dyn ClusterState>);
        let metrics_window_ms = crate::head::metrics_window_ms();
        let https = https_identity()?;
        if https.is_none() && !is_loopback(host) {
            tracing::warn!(
                host = %host,
                "the dashboard and Jobs API listen on a non-loopback address over plain HTTP: the token \
                 and sessions travel in cleartext; pass --tls-cert/--tls-key/--tls-ca to `oxray start` for HTTPS"
            );
        }
        let config = HttpConfig {
            token: self.token.clone(),
            session_name,
            jobs: Some(jobs),
            cluster,
            metrics_window_ms,
            limits: oxray_http::ConnectionLimits::default(),
            https,
        };
        HttpServer::start(listener, config).map_err(ClusterError::Http)
    }
}

/// The HTTPS identity of the head's HTTP server: the node's own TLS certificate and key when the
/// cluster runs TLS (`--tls-*`), so the Jobs API, the dashboard and `/metrics` are never cleartext
/// on a TLS cluster; None (plain HTTP) without TLS.
fn https_identity() -> Result<Option<oxray_http::HttpsIdentity>, ClusterError> {
    let Some(settings) = TlsSettings::from_env()? else { return Ok(None) };
    let Some((cert, key)) = settings.identity() else { return Ok(None) };
    oxray_http::HttpsIdentity::from_pem(cert, key).map(Some).map_err(ClusterError::Https)
}

/// What this node's metrics server shows: the sample its heartbeat last sent.
struct LatestStats {
    node_id: String,
    ip: String,
    latest: Arc<parking_lot::Mutex<Option<NodeStats>>>,
    /// The node's agent, for its Serve proxy's series.
    agent: std::sync::Weak<AgentShared>,
}

impl NodeMetricsSource for LatestStats {
    fn latest(&self) -> Option<(String, String, NodeSample)> {
        let latest = self.latest.lock();
        latest.as_ref().map(|s| (self.node_id.clone(), self.ip.clone(), crate::head::cluster_state::sample_of(s)))
    }

    fn extra(&self) -> String {
        let Some(agent) = self.agent.upgrade() else { return String::new() };
        let user = agent.user_metrics.lock().render(&self.ip, std::time::Instant::now());
        agent.serve_proxy_metrics(&self.node_id, &self.ip) + &user
    }
}

impl RunningCluster {
    /// Stops the head's jobs and its HTTP server, then the jobs the head placed
    /// on this node, kills every worker, waits for
    /// them to be reaped, removes the object store's files and stops the gRPC server.
    /// Starts the head's HTTP server now, if it has none yet, and returns its `host:port`
    /// (Ray serves its State API from every head; this one serves it once a caller asks).
    pub async fn serve_http(&mut self, host: &str, port: u16) -> Result<String, ClusterError> {
        if let Some(address) = &self.dashboard_address {
            return Ok(address.clone());
        }
        let Some(context) = &self.http_context else {
            return Err(ClusterError::Config("only a head node serves the HTTP API".to_string()));
        };
        let server = context.start(host, port).await?;
        let address = server.local_addr().to_string();
        self.http = Some(server);
        self.dashboard_address = Some(address.clone());
        Ok(address)
    }

    pub async fn shutdown(mut self) {
        if let Some(http) = self.http.take() {
            http.shutdown().await;
        }
        self.agent.stop_serve_proxy().await;
        // Stops serving this node's metrics (the server ends when dropped).
        drop(self.metrics.take());
        self.agent.jobs.stop_all().await;
        self.agent.stop_actor_updates();
        let pids = self.agent.state.lock().begin_shutdown();
        for pid in &pids {
            crate::agent::signal_worker(*pid, libc::SIGKILL);
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while tokio::time::Instant::now() < deadline && !self.agent.state.lock().worker_pids().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.agent.templates.stop_all();
        self.agent.state.lock().store_mut().destroy();
        for task in self.background.drain(..) {
            task.abort();
        }
        for s in self.stop.drain(..) {
            let _ = s.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_is_alive_only_with_its_own_start_time() {
        assert!(owner_alive(&owner_tag()));
        let pid = std::process::id();
        let ticks = process_start_ticks(pid).unwrap();
        assert!(!owner_alive(&format!("{pid}-{}", ticks + 1)), "a reused pid is another process");
        assert!(!owner_alive(&format!("{}-1", u32::MAX)));
        assert!(owner_alive(&pid.to_string()));
        assert!(owner_alive("not-an-owner"), "names we did not write are left alone");
    }

    #[test]
    fn gpu_models_get_rays_accelerator_type_names() {
        assert_eq!(accelerator_type_of("NVIDIA H100 80GB HBM3").as_deref(), Some("H100"));
        assert_eq!(accelerator_type_of("NVIDIA A100-SXM4-40GB").as_deref(), Some("A100"));
        assert_eq!(accelerator_type_of("Tesla V100-SXM2-16GB").as_deref(), Some("V100"));
        assert_eq!(accelerator_type_of("NVIDIA L4").as_deref(), Some("L4"));
        assert_eq!(accelerator_type_of("NVIDIA"), None);
    }
}
