//! Starting a head and a node agent inside the current process (the embedded
//! cluster that `oxray.init()` uses), and tearing them down without leftovers.

use crate::agent::{AgentConfig, AgentService, AgentShared, AgentState, SpawnConfig};
use crate::auth::{AttachToken, RequireToken};
use crate::client::connect_channel;
use crate::head::HeadService;
use crate::ids::{Id, new_id};
use crate::resources::ResourceSet;
use oxray_proto::head_client::HeadClient;
use oxray_proto::head_server::HeadServer;
use oxray_proto::node_agent_server::NodeAgentServer;
use oxray_proto::{HeartbeatRequest, NodeInfo, RegisterNodeRequest};
use oxray_store::ObjectStore;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio_stream::wrappers::TcpListenerStream;

#[derive(Debug, Clone)]
pub struct ClusterConfig {
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
}

pub struct RunningCluster {
    pub head_address: String,
    pub agent_address: String,
    pub token: String,
    pub node_id: Id,
    pub session_dir: PathBuf,
    pub shm_dir: PathBuf,
    pub agent: Arc<AgentShared>,
    stop: Vec<oneshot::Sender<()>>,
    heartbeat: tokio::task::JoinHandle<()>,
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
    Other(String),
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

fn pid_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::kill(pid, 0) == 0 || *libc::__errno_location() == libc::EPERM }
}

/// Removes shared-memory directories left by oxray processes that died without cleanup.
fn remove_stale_shm(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("oxray-") else { continue };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else { continue };
        if !pid_alive(pid) {
            let _ = oxray_store::remove_dir_if_exists(&entry.path());
        }
    }
}

fn build_resources(cfg: &ClusterConfig, ip: &str) -> Result<(ResourceSet, usize, u64), ClusterError> {
    let cpus =
        cfg.num_cpus.unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) as f64);
    let gpus = cfg.num_gpus.unwrap_or_else(detect_gpus);
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
    set.set("node:__internal_head__", 1.0).map_err(cfg_err)?;
    for (name, value) in &cfg.resources {
        if matches!(name.as_str(), "CPU" | "GPU") {
            return Err(ClusterError::Config(format!("use num_cpus/num_gpus instead of resources={{{name:?}: ...}}")));
        }
        set.set(name, *value).map_err(cfg_err)?;
    }
    Ok((set, gpus, store))
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

async fn bind(host: &str, what: &'static str) -> Result<TcpListener, ClusterError> {
    let addr = format!("{host}:0");
    TcpListener::bind(&addr).await.map_err(|source| ClusterError::Bind { what, addr, source })
}

pub async fn start_embedded(cfg: ClusterConfig) -> Result<RunningCluster, ClusterError> {
    let node_id = new_id();
    let token = cfg.token.clone().unwrap_or_else(crate::auth::generate_token);
    let (total, num_gpus, store_bytes) = build_resources(&cfg, &cfg.host)?;
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| ClusterError::Io { path, source }
    };
    std::fs::create_dir_all(cfg.session_dir.join("logs")).map_err(io(&cfg.session_dir))?;
    let shm_root = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { cfg.session_dir.clone() };
    remove_stale_shm(&shm_root);
    let shm_dir = shm_root.join(format!("oxray-{}-{}", std::process::id(), &hex::encode(node_id)[..8]));
    let store =
        ObjectStore::new(shm_dir.clone(), cfg.session_dir.join("spill"), store_bytes as usize).map_err(io(&shm_dir))?;
    let cpus = total.get("CPU").ceil().max(1.0) as usize;
    let state = AgentState::new(
        AgentConfig { node_id, total, num_gpus, max_starting_workers: cpus, worker_env: cfg.worker_env.clone() },
        store,
    );
    let agent = AgentShared::new(state);

    let head_listener = bind(&cfg.host, "the head service").await?;
    let agent_listener = bind(&cfg.host, "the node agent").await?;
    let head_address = head_listener.local_addr().map_err(io(&cfg.session_dir))?.to_string();
    let agent_address = agent_listener.local_addr().map_err(io(&cfg.session_dir))?.to_string();
    *agent.spawn.lock() = Some(SpawnConfig {
        python: cfg.python.clone(),
        agent_address: agent_address.clone(),
        token: token.clone(),
        node_id,
        session_dir: cfg.session_dir.clone(),
        cwd: cfg.cwd.clone(),
        forward_output: cfg.forward_output,
    });

    let mut stop = Vec::new();
    let (head_stop, head_stopped) = oneshot::channel::<()>();
    stop.push(head_stop);
    let head_service = HeadServer::with_interceptor(HeadService::default(), RequireToken::new(&token));
    tokio::spawn(tonic::transport::Server::builder().add_service(head_service).serve_with_incoming_shutdown(
        incoming_nodelay(head_listener),
        async {
            let _ = head_stopped.await;
        },
    ));
    let (agent_stop, agent_stopped) = oneshot::channel::<()>();
    stop.push(agent_stop);
    let service = AgentService { shared: agent.clone(), address: agent_address.clone() };
    let agent_service = tonic::service::interceptor::InterceptedService::new(
        NodeAgentServer::new(service).max_decoding_message_size(usize::MAX).max_encoding_message_size(usize::MAX),
        RequireToken::new(&token),
    );
    tokio::spawn(tonic::transport::Server::builder().add_service(agent_service).serve_with_incoming_shutdown(
        incoming_nodelay(agent_listener),
        async {
            let _ = agent_stopped.await;
        },
    ));

    let channel = connect_channel(&head_address).await.map_err(|e| ClusterError::Other(e.to_string()))?;
    let mut head = HeadClient::with_interceptor(channel, AttachToken::new(&token).map_err(ClusterError::Other)?);
    let mut info: NodeInfo = agent.node_info(&agent_address);
    info.session_dir = cfg.session_dir.display().to_string();
    info.start_time_ms = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    head.register_node(RegisterNodeRequest { node: Some(info.clone()) })
        .await
        .map_err(|e| ClusterError::Other(format!("node registration with the head failed: {}", e.message())))?;
    agent.attach_head(head.clone());
    let beat_agent = agent.clone();
    let heartbeat = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            let available = beat_agent.state.lock().available().to_map();
            let beat = head.heartbeat(HeartbeatRequest { node_id: node_id.to_vec(), available }).await;
            if beat.is_err_and(|s| s.code() == tonic::Code::NotFound) {
                // A head that restarted without this node on record: register again.
                let _ = head.register_node(RegisterNodeRequest { node: Some(info.clone()) }).await;
            }
        }
    });

    Ok(RunningCluster {
        head_address,
        agent_address,
        token,
        node_id,
        session_dir: cfg.session_dir,
        shm_dir,
        agent,
        stop,
        heartbeat,
    })
}

impl RunningCluster {
    /// Kills every worker, waits for them to be reaped, removes the object
    /// store's files and stops both servers.
    pub async fn shutdown(mut self) {
        let pids = self.agent.state.lock().begin_shutdown();
        for pid in &pids {
            // SAFETY: kill(2) on worker pids this agent started.
            unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while tokio::time::Instant::now() < deadline && !self.agent.state.lock().worker_pids().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.agent.state.lock().store.destroy();
        self.heartbeat.abort();
        for s in self.stop.drain(..) {
            let _ = s.send(());
        }
    }
}
