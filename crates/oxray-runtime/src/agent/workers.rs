//! Starting Python worker processes and forwarding what they print.

use crate::ids::{NodeId, WorkerId};
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

pub(super) fn spawn_worker(cfg: &SpawnConfig, worker_id: WorkerId, env: &[(String, String)]) -> std::io::Result<Child> {
    let mut cmd = Command::new(&cfg.python);
    cmd.args(["-m", "oxray._private.worker_main"])
        .env("OXRAY_AGENT_ADDRESS", &cfg.agent_address)
        .env("OXRAY_TOKEN", &cfg.token)
        .env("OXRAY_WORKER_ID", worker_id.hex())
        .env("OXRAY_NODE_ID", cfg.node_id.hex())
        .env("OXRAY_SESSION_DIR", &cfg.session_dir)
        .env("PYTHONUNBUFFERED", "1")
        .env("OXRAY_RUNTIME_THREADS", "0")
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
            // Die with the agent even if it is killed without cleaning up.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
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
    let mut log = tokio::fs::OpenOptions::new().create(true).append(true).open(&log_path).await.ok();
    let mut lines = super::logs::OutputLines::new(stream);
    while let Some(line) = lines.next_line(log.as_mut()).await {
        emit(&line);
    }
}

/// Prints a line of worker output in this process's terminal as `(prefix) line`.
pub fn print_line(prefix: &str, line: &str, to_stderr: bool) {
    use std::io::Write;
    let text = format!("({prefix}) {line}\n");
    if to_stderr {
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
    } else {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
    }
}
