//! A job's entrypoint as a process: started through a wrapper shell in its own
//! process group, writing straight into its log file and leaving its exit code
//! in a file, so neither needs its supervisor alive; and waited for, signalled
//! and adopted by pid. Shared by the head and the node agents that run jobs.

use crate::runtime_env::Prepared;
use oxray_object_store::process_start_ticks;
use serde_json::{Map, Value};
use std::path::Path;

/// The environment variables that mark a job's processes (for finding them after a restart).
pub const JOB_ID_VAR: &str = "OXRAY_JOB_SUBMISSION_ID";
pub const JOB_STORE_VAR: &str = "OXRAY_JOB_STORE";

/// Time between SIGTERM and SIGKILL when a job is stopped (Ray's `RAY_JOB_STOP_WAIT_TIME_S`).
pub const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

/// Runs `$1` through the shell and writes its exit code to `$2`. With builtins
/// only (no `mv`: one process less per job); the file is read only once the
/// wrapper has exited, so the write needs no rename to be whole.
const EXIT_CODE_WRAPPER: &str = r#"/bin/sh -c "$1"; code=$?; printf '%s' "$code" > "$2"; exit "$code""#;

/// What a job's process is started with.
pub struct Entrypoint<'a> {
    pub submission_id: &'a str,
    /// The shell command.
    pub command: &'a str,
    pub runtime_env: &'a Map<String, Value>,
    pub metadata: &'a Map<String, Value>,
    /// The head's address: a bare `init()` in the job joins it.
    pub head_address: &'a str,
    pub token: &'a str,
    /// The cluster's Python: its directory goes first on PATH.
    pub python: &'a str,
    /// The supervisor's job directory, marked in the environment so a restarted
    /// supervisor finds the job's processes (and never another's).
    pub store: &'a Path,
}

impl Entrypoint<'_> {
    /// Starts it in its prepared runtime_env, its output into `log`, its exit
    /// code into `exit_file` when it ends.
    pub fn spawn(
        &self,
        prepared: &Prepared,
        log: std::fs::File,
        exit_file: &Path,
    ) -> std::io::Result<tokio::process::Child> {
        let _ = std::fs::remove_file(exit_file);
        let mut command = tokio::process::Command::new("/bin/sh");
        let cwd = &prepared.cwd;
        command.args(["-c", EXIT_CODE_WRAPPER, "oxray-job"]).arg(self.command).arg(exit_file);
        command.current_dir(cwd).process_group(0).kill_on_drop(false);
        command.stdin(std::process::Stdio::null()).stdout(log.try_clone()?).stderr(log);
        let python_dir = Path::new(self.python).parent().map(Path::to_path_buf).unwrap_or_default();
        let mut path = format!("{}:{}", python_dir.display(), std::env::var("PATH").unwrap_or_default());
        if let Some(venv) = &prepared.venv {
            path = format!("{}:{path}", venv.join("bin").display());
            command.env("VIRTUAL_ENV", venv);
        }
        let mut python_path: Vec<String> =
            std::iter::once(cwd).chain(&prepared.python_path).map(|p| p.display().to_string()).collect();
        python_path.extend(std::env::var("PYTHONPATH").ok().filter(|p| !p.is_empty()));
        let job_config = serde_json::json!({"runtime_env": self.runtime_env, "metadata": self.metadata});
        command
            .env("PATH", path)
            .env("PYTHONPATH", python_path.join(":"))
            .env("PYTHONUNBUFFERED", "1")
            .env("RAY_ADDRESS", self.head_address)
            .env("OXRAY_ADDRESS", self.head_address)
            .env("OXRAY_TOKEN", self.token)
            .env("RAY_JOB_CONFIG_JSON_ENV_VAR", job_config.to_string());
        if let Some(Value::Object(vars)) = self.runtime_env.get("env_vars") {
            for (key, value) in vars {
                command.env(key, value.as_str().unwrap_or_default());
            }
        }
        // Last, so env_vars cannot hide the job's processes from a restarted supervisor.
        command.env(JOB_ID_VAR, self.submission_id).env(JOB_STORE_VAR, self.store);
        command.spawn()
    }
}

/// A shell's exit status as Ray reports a process's: 128+N (killed by signal N) is -N.
pub fn shell_exit_code(code: i32) -> i32 {
    if (129..=128 + 64).contains(&code) { -(code - 128) } else { code }
}

/// The exit code a wrapper shell left in `exit_file`, if it got to write one.
pub fn read_exit_code(exit_file: &Path) -> Option<i32> {
    std::fs::read_to_string(exit_file).ok()?.trim().parse().ok().map(shell_exit_code)
}

/// The exit code of a child that was waited for.
pub fn child_exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status.code().map(shell_exit_code).unwrap_or_else(|| -status.signal().unwrap_or(0))
}

/// Sends `signal` to the process group `pid` leads.
pub fn signal_group(pid: u32, signal: i32) -> bool {
    // SAFETY: killpg only sends a signal; a stale pid group fails with ESRCH.
    unsafe { libc::killpg(pid as libc::pid_t, signal) == 0 }
}

/// Stops a job's process group: SIGTERM now, SIGKILL once [`STOP_GRACE`] has
/// passed unless `ended` (the job's end, when it can be awaited) came first.
pub fn stop_group<F>(pid: u32, ended: Option<F>)
where
    F: Future + Send + 'static,
{
    signal_group(pid, libc::SIGTERM);
    tokio::spawn(async move {
        if let Some(ended) = ended
            && tokio::time::timeout(STOP_GRACE, ended).await.is_ok()
        {
            return;
        }
        signal_group(pid, libc::SIGKILL);
    });
}

/// Returns once process `pid` (started at `start`) has exited: it is not this
/// process's child, so it is watched through a pidfd.
pub async fn wait_for_exit(pid: u32, start: u64) {
    let waited = tokio::task::spawn_blocking(move || {
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        if raw < 0 {
            return; // already gone
        }
        // SAFETY: `raw` is a descriptor just opened here, owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw as i32) };
        // Opened first, then checked: a pid reused meanwhile is not waited for.
        if process_start_ticks(pid) != Some(start) {
            return;
        }
        let mut poll = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        loop {
            // SAFETY: one valid pollfd for the duration of the call.
            let ready = unsafe { libc::poll(&mut poll, 1, -1) };
            if ready > 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                return;
            }
        }
    });
    let _ = waited.await;
}
