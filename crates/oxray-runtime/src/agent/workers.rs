//! Starting Python worker processes and forwarding what they print.

use crate::ids::{NodeId, WorkerId};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::Stdio;
use tokio::process::{Child, Command};

#[derive(Debug, Clone)]
pub struct SpawnConfig {
    pub python: String,
    pub agent_address: String,
    pub token: String,
    pub node_id: NodeId,
    pub session_dir: PathBuf,
    pub cwd: PathBuf,
    pub forward_output: bool,
}

impl SpawnConfig {
    pub fn log_dir(&self) -> PathBuf {
        self.session_dir.join("logs")
    }
}

const MIMALLOC_PURGE_DELAY: &str = "MIMALLOC_PURGE_DELAY";

/// What every worker's environment has, whoever starts it (this agent, or a template).
pub(super) fn worker_base_env(cfg: &SpawnConfig) -> Vec<(String, String)> {
    let mut env = vec![
        ("OXRAY_AGENT_ADDRESS".to_string(), cfg.agent_address.clone()),
        ("OXRAY_TOKEN".to_string(), cfg.token.clone()),
        ("OXRAY_NODE_ID".to_string(), cfg.node_id.hex()),
        ("OXRAY_SESSION_DIR".to_string(), cfg.session_dir.to_string_lossy().into_owned()),
        ("PYTHONUNBUFFERED".to_string(), "1".to_string()),
        ("OXRAY_RUNTIME_THREADS".to_string(), "0".to_string()),
    ];
    // A worker outlives its tasks: memory Arrow (through its mimalloc) frees goes back to the
    // OS at once, not kept for a task that may never come (the node's own setting wins).
    if std::env::var_os(MIMALLOC_PURGE_DELAY).is_none() {
        env.push((MIMALLOC_PURGE_DELAY.to_string(), "0".to_string()));
    }
    env
}

/// Starts a worker as a fresh interpreter (when no template serves it).
pub(super) fn spawn_worker(cfg: &SpawnConfig, worker_id: WorkerId, env: &[(String, String)]) -> std::io::Result<Child> {
    let mut cmd = Command::new(&cfg.python);
    cmd.args(["-m", "oxray._private.worker_main"])
        .envs(worker_base_env(cfg))
        .env("OXRAY_WORKER_ID", worker_id.hex())
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .current_dir(&cfg.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            // Own session: Ctrl-C in the driver's terminal goes to the driver only.
            libc::setsid();
            // Die with the agent even if it is killed without cleaning up: SIGTERM,
            // which the worker turns into a SIGKILL of its whole process group
            // (`kill_group_when_orphaned`), so a task's own children die too.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    cmd.spawn()
}

/// Copies one output stream of a worker to its log file, and hands each line
/// to `emit` (which prints and publishes it).
pub(super) async fn forward_output<R, F>(stream: R, log_path: PathBuf, mut emit: F)
where
    R: tokio::io::AsyncRead + Unpin,
    F: FnMut(&str),
{
    let mut log = tokio::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(&log_path).await.ok();
    let mut lines = super::logs::OutputLines::new(stream);
    while let Some(line) = lines.next_line(log.as_mut()).await {
        emit(&line);
    }
}

/// Where this process prints worker output, set before the first line is printed (the Python
/// module sets sinks that write through `sys.stdout`/`sys.stderr`, so notebooks and captures see
/// it); this process's own stdout and stderr when none was set.
static OUTPUT_SINKS: std::sync::Mutex<Option<(Sink, Sink)>> = std::sync::Mutex::new(None);

/// Sets where worker output is printed (stdout, stderr); only before the first line is printed.
pub fn set_output_sinks(out: Sink, err: Sink) {
    if let Ok(mut sinks) = OUTPUT_SINKS.lock() {
        *sinks = Some((out, err));
    }
}

/// Prints a line of worker output in this process's terminal as `(prefix) line`.
/// Never blocks the caller (a runtime thread): a printer thread does the writes,
/// and while the terminal does not keep up (a paused pager, a full pipe) lines
/// past `PRINT_BACKLOG` are dropped and counted; the worker logs keep them all.
pub fn print_line(prefix: &str, line: &str, to_stderr: bool) {
    static PRINTER: std::sync::OnceLock<Printer> = std::sync::OnceLock::new();
    PRINTER
        .get_or_init(|| {
            let set = OUTPUT_SINKS.lock().ok().and_then(|mut sinks| sinks.take());
            let (out, err) = set.unwrap_or_else(|| (Box::new(std::io::stdout()), Box::new(std::io::stderr())));
            Printer::spawn(out, err, PRINT_BACKLOG)
        })
        .print(format!("({prefix}) {line}\n"), to_stderr);
}

/// Lines waiting for the terminal before new ones are dropped.
const PRINT_BACKLOG: usize = 8192;

pub type Sink = Box<dyn std::io::Write + Send>;

/// Hands lines to a thread that writes them, so a blocked terminal never blocks the caller.
pub(super) struct Printer {
    lines: std::sync::mpsc::SyncSender<(String, bool)>,
    dropped: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Printer {
    pub(super) fn spawn(mut out: Sink, mut err: Sink, backlog: usize) -> Printer {
        use std::sync::atomic::Ordering;
        let (lines, rx) = std::sync::mpsc::sync_channel::<(String, bool)>(backlog);
        let dropped = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let seen = dropped.clone();
        let spawned = std::thread::Builder::new().name("oxray-output".into()).spawn(move || {
            while let Ok(first) = rx.recv() {
                let missed = seen.swap(0, Ordering::Relaxed);
                if missed > 0 {
                    let _ = writeln!(
                        err,
                        "(oxray) {missed} lines of worker output were not shown here: see the worker logs"
                    );
                }
                // What else is queued goes in the same writes: one flush per sink and batch (a sink
                // that writes through Python takes the GIL once per flush, not once per line).
                let (mut wrote_out, mut wrote_err) = (false, false);
                for (text, to_stderr) in
                    std::iter::once(first).chain(std::iter::from_fn(|| rx.try_recv().ok())).take(256)
                {
                    let sink = if to_stderr { &mut err } else { &mut out };
                    let _ = sink.write_all(text.as_bytes());
                    if to_stderr {
                        wrote_err = true;
                    } else {
                        wrote_out = true;
                    }
                }
                if wrote_out {
                    let _ = out.flush();
                }
                if wrote_err {
                    let _ = err.flush();
                }
            }
        });
        if let Err(e) = spawned {
            tracing::warn!("cannot start the thread that prints worker output: {e}");
        }
        Printer { lines, dropped }
    }

    pub(super) fn print(&self, text: String, to_stderr: bool) {
        if self.lines.try_send((text, to_stderr)).is_err() {
            self.dropped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    #[cfg(test)]
    pub(super) fn dropped(&self) -> u64 {
        self.dropped.load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::FromRawFd;
    use std::time::{Duration, Instant};

    /// The write end of a pipe nobody reads: writes block once its buffer is full.
    fn stuck_terminal() -> (std::fs::File, std::fs::File) {
        let mut fds = [0; 2];
        // SAFETY: pipe(2) fills the two descriptors, which the Files then own.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: fresh descriptors from pipe(2), owned by nobody else.
        unsafe { (std::fs::File::from_raw_fd(fds[0]), std::fs::File::from_raw_fd(fds[1])) }
    }

    #[test]
    fn a_terminal_that_does_not_read_never_blocks_the_printing_thread() {
        let (_reader, writer) = stuck_terminal();
        let err = writer.try_clone().unwrap();
        let printer = Printer::spawn(Box::new(writer), Box::new(err), 64);
        let started = Instant::now();
        // 20 MB: far past the pipe's buffer, which a direct write would block on.
        for i in 0..20_000 {
            printer.print(format!("line {i} {}\n", "x".repeat(1000)), i % 2 == 0);
        }
        assert!(started.elapsed() < Duration::from_secs(5), "printing blocked for {:?}", started.elapsed());
        assert!(printer.dropped() > 0, "lines past the backlog are dropped and counted");
    }
}
