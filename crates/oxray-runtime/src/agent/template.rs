//! Worker templates: warm Python processes (`oxray/_private/worker_template.py`) that fork
//! this node's workers, so a worker costs one `fork()` instead of an interpreter's start and
//! its imports.
//!
//! One template serves each import setup: the environment variables read while Python starts
//! and imports (`PYTHON*`, `LD_*`, the allocators' and thread pools' settings, `HOME`, and
//! `OXRAY_TEMPLATE_PRELOAD`, the extra modules it imports: torch for Train workers). A worker
//! whose setup differs gets (and warms) a template of its own. The forked child's environment
//! is then set to what a process started now would get: the agent's own environment at this
//! moment (a driver's embedded agent passes on what the driver set since), every worker's
//! variables, then the worker's own. The agent keeps the pipes of the worker's output, as for a worker it
//! started itself; the template reaps its children and reports their exit statuses, since
//! only a parent can.
//!
//! A template is started, and watched, by a thread of its own: its parent-death signal fires
//! when that thread ends, which is when the template's socket closed.

use super::workers::{SpawnConfig, worker_base_env};
use crate::ids::WorkerId;
use parking_lot::Mutex;
use rustix::net::{
    AddressFamily, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{IoSlice, PipeReader};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt as _;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::sync::Arc;
use tokio::sync::oneshot;

/// The node setting that turns templates off (`0`): each worker then starts a fresh interpreter.
const TEMPLATE_SETTING: &str = "OXRAY_WORKER_TEMPLATE";
/// The descriptor the template reads its requests on.
const CONTROL_FD: i32 = 3;
/// A reply or exit report is one small JSON object.
const MAX_MESSAGE: usize = 4096;
/// How long a worker waits for its template's answer (a template still importing torch, cold,
/// takes seconds) before the agent starts it itself.
pub(super) const REPLY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
/// Templates of other setups than the node's own, at most (each holds its imports' memory).
const MAX_EXTRA_TEMPLATES: usize = 8;
/// A template of another setup with no worker left is stopped after this long unused.
const IDLE_TEMPLATE: std::time::Duration = std::time::Duration::from_secs(120);

/// The variables that shape what a Python process imports, or how, before its first task.
fn shapes_imports(name: &str) -> bool {
    const PREFIXES: [&str; 7] = ["PYTHON", "LD_", "MIMALLOC_", "OMP_", "MKL_", "OPENBLAS_", "MALLOC_"];
    PREFIXES.iter().any(|p| name.starts_with(p)) || name == "HOME" || name == PRELOAD
}

/// The extra modules a template imports (comma-separated), part of its setup.
const PRELOAD: &str = "OXRAY_TEMPLATE_PRELOAD";

/// The whole environment of a worker started with `env`, as a process this agent starts would
/// have it: the agent's own environment now (its UTF-8 entries), every worker's variables, then
/// `env`.
fn process_env(cfg: &SpawnConfig, env: &[(String, String)]) -> Vec<(String, String)> {
    let own = std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)));
    own.chain(worker_base_env(cfg)).chain(env.iter().cloned()).collect()
}

/// The variables of an import setup, sorted by name: a template's key.
type Setup = Vec<(String, String)>;
/// Where a template's answer to a request goes: the forked pid (or why not), then its exit.
type Waiting = (oneshot::Sender<Result<u32, String>>, oneshot::Sender<String>);

/// The import setup of a worker started with `env` (later entries win, as for a process).
fn setup_of(env: &[(String, String)]) -> Setup {
    let last: BTreeMap<&str, &str> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    last.into_iter().filter(|(k, _)| shapes_imports(k)).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// A worker forked by a template: its pid comes once the template answered.
pub(super) struct Forked {
    pub pid: oneshot::Receiver<Result<u32, String>>,
    pub exit: oneshot::Receiver<String>,
    pub stdout: PipeReader,
    pub stderr: PipeReader,
}

/// This node's templates, by import setup.
pub(crate) struct Templates {
    enabled: bool,
    by_setup: Mutex<HashMap<Setup, Arc<Template>>>,
    /// The setup of the node's own workers, whose template stays.
    node_setup: Mutex<Option<Setup>>,
    /// Setups whose template ended without forking a worker (it cannot import the runtime):
    /// their workers start as fresh interpreters, which report what fails.
    broken: Mutex<std::collections::HashSet<Setup>>,
}

impl Default for Templates {
    fn default() -> Self {
        Templates {
            enabled: std::env::var(TEMPLATE_SETTING).map_or(true, |v| v != "0"),
            by_setup: Mutex::default(),
            node_setup: Mutex::default(),
            broken: Mutex::default(),
        }
    }
}

impl Templates {
    /// Starts the template for workers started with `env`, unless it runs already; the one of
    /// `node_own` setup (the node's usual workers') stays for the node's life.
    pub(super) fn warm(&self, cfg: &SpawnConfig, env: &[(String, String)], node_own: bool) {
        if self.enabled {
            let env = process_env(cfg, env);
            if node_own {
                *self.node_setup.lock() = Some(setup_of(&env));
            }
            self.template_for(cfg, &env);
        }
    }

    /// Asks the template of `env`'s setup for a worker; None when templates are off or that
    /// template cannot take requests (the caller starts the worker itself).
    pub(super) fn fork(&self, cfg: &SpawnConfig, worker_id: WorkerId, env: &[(String, String)]) -> Option<Forked> {
        if !self.enabled {
            return None;
        }
        let env = process_env(cfg, env);
        let template = self.template_for(cfg, &env)?;
        match template.request(worker_id, &env) {
            Ok(forked) => Some(forked),
            Err(e) => {
                let pid = *template.pid.lock();
                tracing::warn!("worker template pid={pid} cannot take a request ({e}): starting the worker itself");
                None
            }
        }
    }

    /// Kills every template (the agent is shutting down); their workers die with them.
    pub(crate) fn stop_all(&self) {
        for template in self.by_setup.lock().drain().map(|(_, t)| t) {
            template.kill();
        }
    }

    fn template_for(&self, cfg: &SpawnConfig, env: &[(String, String)]) -> Option<Arc<Template>> {
        let setup = setup_of(env);
        let node_setup = self.node_setup.lock().clone();
        let mut by_setup = self.by_setup.lock();
        let mut broken = self.broken.lock();
        // Templates of other setups that ended, or have had no worker for a while, go.
        by_setup.retain(|s, t| {
            let keep = Some(s) == node_setup.as_ref() || s == &setup || !t.idle_for(IDLE_TEMPLATE);
            if !keep {
                t.kill();
            }
            let inflight = t.inflight.lock();
            if inflight.ended && !inflight.forked_any {
                broken.insert(s.clone());
            }
            keep && !inflight.ended
        });
        if broken.contains(&setup) {
            return None;
        }
        if let Some(t) = by_setup.get(&setup) {
            *t.last_used.lock() = std::time::Instant::now();
            return Some(t.clone());
        }
        if by_setup.keys().filter(|s| Some(*s) != node_setup.as_ref()).count() >= MAX_EXTRA_TEMPLATES {
            return None; // its workers start as fresh interpreters
        }
        match Template::start(cfg, env) {
            Ok(t) => {
                by_setup.insert(setup, t.clone());
                Some(t)
            }
            Err(e) => {
                tracing::warn!("cannot start a worker template ({e}): workers start without one");
                None
            }
        }
    }
}

/// Requests a template has not answered, and the exits it has yet to report.
#[derive(Default)]
struct Inflight {
    /// Requests handed to the sending thread, not sent yet.
    queued: usize,
    replies: VecDeque<Waiting>,
    exits: HashMap<u32, oneshot::Sender<String>>,
    ended: bool,
    /// It forked a worker once: it can import the runtime.
    forked_any: bool,
}

/// A fork request on its way to the sending thread.
struct Outgoing {
    message: String,
    pipes: [std::io::PipeWriter; 2],
    waiting: Waiting,
}

struct Template {
    control: OwnedFd,
    pid: Mutex<u32>,
    inflight: Arc<Mutex<Inflight>>,
    last_used: Mutex<std::time::Instant>,
    /// The environment it started with: a request carries only what differs.
    start_env: HashMap<String, String>,
    /// To the thread that sends requests, in order, waiting while the template is busy.
    outgoing: Mutex<Option<std::sync::mpsc::Sender<Outgoing>>>,
}

impl Template {
    /// No worker of its own is alive or coming, and none was asked for within `idle`.
    fn idle_for(&self, idle: std::time::Duration) -> bool {
        let inflight = self.inflight.lock();
        inflight.queued == 0
            && inflight.replies.is_empty()
            && inflight.exits.is_empty()
            && self.last_used.lock().elapsed() >= idle
    }

    fn kill(&self) {
        let pid = self.pid.lock();
        if *pid > 1 {
            // SAFETY: kill(2) of a template process this agent started and has not reaped yet
            // (its thread reaps it under this lock).
            unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
        }
    }

    fn start(cfg: &SpawnConfig, env: &[(String, String)]) -> std::io::Result<Arc<Template>> {
        let (ours, theirs) =
            rustix::net::socketpair(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None)?;
        let sending = ours.try_clone()?;
        let (outgoing, requests) = std::sync::mpsc::channel();
        let inflight = Arc::new(Mutex::new(Inflight::default()));
        let template = Arc::new(Template {
            control: ours,
            pid: Mutex::new(0),
            inflight: inflight.clone(),
            last_used: Mutex::new(std::time::Instant::now()),
            start_env: env.iter().cloned().collect(),
            outgoing: Mutex::new(Some(outgoing)),
        });
        let mut cmd = std::process::Command::new(&cfg.python);
        cmd.args(["-m", "oxray._private.worker_template"])
            .env_clear()
            .envs(template.start_env.iter())
            .current_dir(&cfg.cwd)
            .stdin(std::process::Stdio::null());
        let _ = oxray_object_store::create_private_dir_all(&cfg.log_dir());
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(cfg.log_dir().join(format!("worker-template-{}.log", WorkerId::random().short())))?;
        cmd.stdout(log.try_clone()?).stderr(log);
        let control = theirs.as_raw_fd();
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                // The control socket on fd 3, open across exec (dup2 clears close-on-exec; on fd 3
                // already, the flag is cleared by hand).
                if control == CONTROL_FD {
                    libc::fcntl(CONTROL_FD, libc::F_SETFD, 0);
                } else if libc::dup2(control, CONTROL_FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::setsid();
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        std::thread::Builder::new()
            .name("oxray-template-send".into())
            .spawn(move || send_requests(&sending, &requests, &inflight))?;
        let watched = template.clone();
        std::thread::Builder::new().name("oxray-template".into()).spawn(move || {
            match cmd.spawn() {
                Ok(mut child) => {
                    drop(theirs);
                    *watched.pid.lock() = child.id();
                    watched.read_replies();
                    // The socket closed: the template is gone (or going: it was killed). Reaped
                    // under the pid's lock, so `kill` never signals a reused pid.
                    let mut pid = watched.pid.lock();
                    let _ = child.kill();
                    let _ = child.wait();
                    *pid = 0;
                }
                Err(e) => {
                    drop(theirs);
                    let python = cmd.get_program().to_string_lossy();
                    tracing::warn!("cannot start a worker template ({python}: {e}): workers start without one");
                    watched.end(&format!("the worker template did not start: {e}"));
                }
            }
        })?;
        Ok(template)
    }

    /// Queues one fork request for a worker whose whole environment is `env`; its output pipes
    /// go with it.
    fn request(&self, worker_id: WorkerId, env: &[(String, String)]) -> std::io::Result<Forked> {
        let (stdout, stdout_w) = std::io::pipe()?;
        let (stderr, stderr_w) = std::io::pipe()?;
        let wanted: HashMap<&str, &str> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let set: serde_json::Map<String, serde_json::Value> = wanted
            .iter()
            .filter(|(k, v)| self.start_env.get(**k).map(String::as_str) != Some(**v))
            .map(|(k, v)| (k.to_string(), serde_json::Value::String(v.to_string())))
            .collect();
        let unset: Vec<&str> = self.start_env.keys().map(String::as_str).filter(|k| !wanted.contains_key(k)).collect();
        let message = serde_json::json!({"worker_id": worker_id.hex(), "set": set, "unset": unset}).to_string();
        let (pid_tx, pid) = oneshot::channel();
        let (exit_tx, exit) = oneshot::channel();
        let request = Outgoing { message, pipes: [stdout_w, stderr_w], waiting: (pid_tx, exit_tx) };
        let mut inflight = self.inflight.lock();
        let queue = self.outgoing.lock();
        match queue.as_ref() {
            Some(queue) if !inflight.ended && queue.send(request).is_ok() => inflight.queued += 1,
            _ => return Err(std::io::Error::other("the template has ended")),
        }
        Ok(Forked { pid, exit, stdout, stderr })
    }

    /// Reads the template's answers and exit reports until its socket closes.
    fn read_replies(&self) {
        let mut buf = vec![0u8; MAX_MESSAGE];
        loop {
            let n = match rustix::net::recv(&self.control, &mut buf[..], RecvFlags::empty()) {
                Ok((_, 0)) => break,
                Ok((_, n)) => n,
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => break,
            };
            let Ok(reply) = serde_json::from_slice::<serde_json::Value>(&buf[..n]) else { continue };
            let mut inflight = self.inflight.lock();
            if let Some(exited) = reply.get("exited").and_then(|p| p.as_u64()) {
                let status = reply.get("status").and_then(|s| s.as_i64()).unwrap_or(0) as i32;
                if let Some(tx) = inflight.exits.remove(&(exited as u32)) {
                    let _ = tx.send(super::describe_exit(std::process::ExitStatus::from_raw(status)));
                }
            } else if let Some((pid_tx, exit_tx)) = inflight.replies.pop_front() {
                match reply.get("pid").and_then(|p| p.as_u64()) {
                    Some(pid) => {
                        inflight.forked_any = true;
                        if pid_tx.send(Ok(pid as u32)).is_ok() {
                            inflight.exits.insert(pid as u32, exit_tx);
                        } else {
                            // Its caller gave up waiting and started the worker itself: this one
                            // has nobody to serve (the template reaps it).
                            super::signal_worker(pid as u32, libc::SIGKILL);
                        }
                    }
                    None => {
                        let error = reply.get("error").and_then(|e| e.as_str()).unwrap_or("no pid in its answer");
                        let _ = pid_tx.send(Err(error.to_string()));
                    }
                }
            }
        }
        let pid = *self.pid.lock();
        self.end(&format!("killed by signal {} (its worker template, pid={pid}, ended)", libc::SIGTERM));
    }

    /// The template is gone: requests it did not answer fail (their callers start the workers
    /// themselves), and its workers, which their parent-death signal ends, are reported ended.
    fn end(&self, status: &str) {
        self.outgoing.lock().take();
        let mut inflight = self.inflight.lock();
        inflight.ended = true;
        for (pid_tx, _) in inflight.replies.drain(..) {
            let _ = pid_tx.send(Err(status.to_string()));
        }
        for (_, exit_tx) in inflight.exits.drain() {
            let _ = exit_tx.send(status.to_string());
        }
    }
}

/// The sending thread: each request in turn, waiting while the template's socket is full (it is
/// still importing, or forking the ones before). A request that cannot be sent fails back to its
/// caller, which starts the worker itself.
fn send_requests(control: &OwnedFd, requests: &std::sync::mpsc::Receiver<Outgoing>, inflight: &Mutex<Inflight>) {
    for Outgoing { message, pipes, waiting } in requests.iter() {
        let sent = {
            let mut inflight = inflight.lock();
            inflight.queued -= 1;
            if inflight.ended {
                Err(std::io::Error::other("the template has ended"))
            } else {
                // Expected before it is sent, so that its answer always finds it.
                inflight.replies.push_back(waiting);
                Ok(())
            }
        };
        let sent = sent.and_then(|()| {
            let fds = [pipes[0].as_fd(), pipes[1].as_fd()];
            let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
            let mut ancillary = SendAncillaryBuffer::new(&mut space);
            ancillary.push(SendAncillaryMessage::ScmRights(&fds));
            loop {
                match rustix::net::sendmsg(
                    control,
                    &[IoSlice::new(message.as_bytes())],
                    &mut ancillary,
                    SendFlags::empty(),
                ) {
                    Err(rustix::io::Errno::INTR) => continue,
                    done => return done.map(drop).map_err(std::io::Error::from),
                }
            }
        });
        if let Err(e) = sent {
            let mut inflight = inflight.lock();
            // Ours is the newest expected answer, unless it was never queued (the template ended).
            let waiting = if inflight.ended { None } else { inflight.replies.pop_back() };
            if let Some((pid_tx, _)) = waiting {
                let _ = pid_tx.send(Err(format!("could not send the request: {e}")));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn a_setup_is_the_variables_that_shape_imports_with_later_entries_winning() {
        let setup = setup_of(&env(&[
            ("PYTHONPATH", "/a"),
            ("MY_FLAG", "1"),
            ("OXRAY_JOB_ID", "01"),
            ("PYTHONPATH", "/b"),
            (PRELOAD, "torch"),
            ("LD_LIBRARY_PATH", "/lib"),
        ]));
        assert_eq!(setup, env(&[("LD_LIBRARY_PATH", "/lib"), (PRELOAD, "torch"), ("PYTHONPATH", "/b")]));
        assert_eq!(setup_of(&env(&[("MY_FLAG", "1")])), setup_of(&env(&[("MY_FLAG", "2")])));
    }
}
