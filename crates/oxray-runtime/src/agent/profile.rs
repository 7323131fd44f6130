//! Live profiling of this node's workers with py-spy (from PyPI, next to the
//! node's Python or on PATH): a stack dump now, or a CPU flame graph over a
//! few seconds. Only this node's worker processes may be profiled, and the
//! errors say what to install or which permission to grant.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// A flame graph lasts at most this long.
pub(crate) const MAX_DURATION_S: u32 = 60;

#[derive(Debug, thiserror::Error, PartialEq)]
pub(crate) enum ProfileError {
    #[error("pid {0} is not a worker of this node: only workers (tasks' and actors' processes) can be profiled")]
    NotAWorker(u32),
    #[error("duration_s={0}: expected 1 to {MAX_DURATION_S} seconds")]
    Duration(u32),
    #[error("py-spy is not installed on this node: `pip install py-spy` into the Python the node runs ({0})")]
    Missing(String),
    #[error(
        "py-spy may not attach to pid {0}: the node needs ptrace permission. Run the node as the workers' user with \
         CAP_SYS_PTRACE (docker/podman: --cap-add SYS_PTRACE; Kubernetes: securityContext.capabilities.add: \
         [SYS_PTRACE]), or allow it host-wide with `sysctl kernel.yama.ptrace_scope=0`"
    )]
    Permission(u32),
    #[error("py-spy failed on pid {pid}: {output}")]
    Failed { pid: u32, output: String },
}

impl From<ProfileError> for tonic::Status {
    fn from(e: ProfileError) -> Self {
        match e {
            ProfileError::NotAWorker(_) | ProfileError::Duration(_) => tonic::Status::invalid_argument(e.to_string()),
            ProfileError::Missing(_) => tonic::Status::failed_precondition(e.to_string()),
            ProfileError::Permission(_) => tonic::Status::permission_denied(e.to_string()),
            ProfileError::Failed { .. } => tonic::Status::internal(e.to_string()),
        }
    }
}

/// `py-spy` beside the node's Python (a venv's `bin/`), else on PATH.
fn py_spy(python: &str) -> Result<PathBuf, ProfileError> {
    let beside = Path::new(python).parent().map(|dir| dir.join("py-spy"));
    if let Some(path) = beside.filter(|p| p.is_file()) {
        return Ok(path);
    }
    std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|dir| dir.join("py-spy")).find(|p| p.is_file()))
        .ok_or_else(|| ProfileError::Missing(python.to_string()))
}

fn classify(pid: u32, output: String) -> ProfileError {
    let lowered = output.to_lowercase();
    if lowered.contains("permission denied") || lowered.contains("operation not permitted") {
        ProfileError::Permission(pid)
    } else {
        ProfileError::Failed { pid, output: output.trim().to_string() }
    }
}

/// What a failed py-spy run said, classified.
fn failure(pid: u32, out: &std::process::Output) -> ProfileError {
    classify(pid, format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// `py-spy dump`: every thread's Python stack, as text.
pub(crate) async fn dump(python: &str, pid: u32) -> Result<Vec<u8>, ProfileError> {
    let out = tokio::process::Command::new(py_spy(python)?)
        .args(["dump", "--pid", &pid.to_string()])
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| ProfileError::Failed { pid, output: e.to_string() })?;
    if out.status.success() { Ok(out.stdout) } else { Err(failure(pid, &out)) }
}

/// `py-spy record --format flamegraph` over `duration_s`: an SVG.
pub(crate) async fn flamegraph(python: &str, pid: u32, duration_s: u32) -> Result<Vec<u8>, ProfileError> {
    if duration_s == 0 || duration_s > MAX_DURATION_S {
        return Err(ProfileError::Duration(duration_s));
    }
    let dir = tempfile::tempdir().map_err(|e| ProfileError::Failed { pid, output: e.to_string() })?;
    let svg = dir.path().join("profile.svg");
    let run = tokio::process::Command::new(py_spy(python)?)
        .args(["record", "--pid", &pid.to_string(), "--duration", &duration_s.to_string(), "--format", "flamegraph"])
        .arg("--output")
        .arg(&svg)
        .arg("--nonblocking")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(u64::from(duration_s) + 30), run)
        .await
        .map_err(|_| ProfileError::Failed { pid, output: "py-spy did not finish in time".into() })?
        .map_err(|e| ProfileError::Failed { pid, output: e.to_string() })?;
    if !out.status.success() {
        return Err(failure(pid, &out));
    }
    std::fs::read(&svg).map_err(|e| ProfileError::Failed { pid, output: format!("no flame graph written: {e}") })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptrace_refusals_name_the_permission_to_grant() {
        let e = classify(7, "Error: Permission denied (os error 13)".into());
        assert_eq!(e, ProfileError::Permission(7));
        assert!(e.to_string().contains("SYS_PTRACE") && e.to_string().contains("ptrace_scope"));
        assert!(matches!(classify(7, "no such process".into()), ProfileError::Failed { .. }));
    }

    #[tokio::test]
    async fn a_duration_out_of_range_is_refused() {
        assert_eq!(flamegraph("/nowhere/python", 1, 0).await, Err(ProfileError::Duration(0)));
        assert_eq!(flamegraph("/nowhere/python", 1, 61).await, Err(ProfileError::Duration(61)));
    }
}
