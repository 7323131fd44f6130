//! A node's session log files for the head's Logs page and `oxray logs`:
//! listing what is under `<session>/logs/` (workers' output), `<session>/logs/serve/`
//! (Serve's replicas, as Ray names them) and `<session>/jobs/` (jobs run on this
//! node), and reading one, by byte range or by the lines holding a text. A name
//! that leaves those directories is refused.

use std::io::{BufRead, Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};

/// The directories of a session whose files may be read.
const LOG_DIRS: [&str; 3] = ["logs", "logs/serve", "jobs"];
/// The most bytes one read returns.
pub(crate) const MAX_READ: u64 = 4 << 20;
/// The most matching lines one search returns.
const MAX_MATCHES: u32 = 10_000;

/// Why a log could not be read.
#[derive(Debug, thiserror::Error, PartialEq)]
pub(crate) enum LogError {
    #[error("{0:?} is not a log file of this node: expected a name ListLogs gave (under logs/, logs/serve/ or jobs/)")]
    NotALog(String),
    #[error("no log file {0:?} on this node")]
    Missing(String),
    #[error("cannot read the log file {name:?}: {reason}")]
    Io { name: String, reason: String },
}

impl From<LogError> for tonic::Status {
    fn from(e: LogError) -> Self {
        match e {
            LogError::NotALog(_) => tonic::Status::invalid_argument(e.to_string()),
            LogError::Missing(_) => tonic::Status::not_found(e.to_string()),
            LogError::Io { .. } => tonic::Status::internal(e.to_string()),
        }
    }
}

/// Every regular file under the log directories: (name relative to the session, size, modified ms).
pub(crate) fn list(session: &Path) -> Vec<(String, u64, u64)> {
    let mut out = Vec::new();
    for dir in LOG_DIRS {
        // A linked log directory is not listed (nor read: `resolve` refuses it).
        if !std::fs::symlink_metadata(session.join(dir)).is_ok_and(|m| m.is_dir()) {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(session.join(dir)) else { continue };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            if !meta.is_file() {
                continue;
            }
            let modified = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0);
            out.push((format!("{dir}/{}", entry.file_name().to_string_lossy()), meta.len(), modified));
        }
    }
    out.sort();
    out
}

/// The file `name` names, checked to be a plain file directly in a log directory.
pub(crate) fn resolve(session: &Path, name: &str) -> Result<PathBuf, LogError> {
    let refuse = || LogError::NotALog(name.to_string());
    let parts: Vec<Component> = Path::new(name).components().collect();
    if parts.len() < 2 || !parts.iter().all(|p| matches!(p, Component::Normal(_))) {
        return Err(refuse());
    }
    let dir = Path::new(name).parent().and_then(Path::to_str);
    if !LOG_DIRS.iter().any(|d| dir == Some(*d)) {
        return Err(refuse());
    }
    // Every directory on the way is a real one: a linked `logs/serve` could point anywhere.
    let mut at = session.to_path_buf();
    for part in Path::new(name).parent().into_iter().flat_map(Path::components) {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => return Err(refuse()),
            Err(_) => return Err(LogError::Missing(name.to_string())),
        }
    }
    let path = session.join(name);
    match std::fs::symlink_metadata(&path) {
        Ok(meta) if meta.is_file() => Ok(path),
        Ok(_) => Err(refuse()),
        Err(_) => Err(LogError::Missing(name.to_string())),
    }
}

/// Up to `length` bytes from `offset` (negative: back from the end); the bytes and where they start.
pub(crate) fn read(session: &Path, name: &str, offset: i64, length: u64) -> Result<(Vec<u8>, u64, u64), LogError> {
    let path = resolve(session, name)?;
    let io = |e: std::io::Error| LogError::Io { name: name.to_string(), reason: e.to_string() };
    let mut file = std::fs::File::open(&path).map_err(io)?;
    let size = file.metadata().map_err(io)?.len();
    let start = if offset < 0 { size.saturating_sub(offset.unsigned_abs()) } else { (offset as u64).min(size) };
    file.seek(SeekFrom::Start(start)).map_err(io)?;
    let mut data = Vec::new();
    file.take(length.min(MAX_READ)).read_to_end(&mut data).map_err(io)?;
    Ok((data, start, size))
}

/// The lines (numbered from 1) holding `text`, without case; and whether it stopped at `max`.
pub(crate) fn search(session: &Path, name: &str, text: &str, max: u32) -> Result<(Vec<(u64, String)>, bool), LogError> {
    let path = resolve(session, name)?;
    let io = |e: std::io::Error| LogError::Io { name: name.to_string(), reason: e.to_string() };
    let needle = text.to_lowercase();
    let max = if max == 0 { MAX_MATCHES } else { max.min(MAX_MATCHES) } as usize;
    let mut out = Vec::new();
    let reader = std::io::BufReader::new(std::fs::File::open(&path).map_err(io)?);
    for (n, line) in reader.split(b'\n').enumerate() {
        let line = String::from_utf8_lossy(&line.map_err(io)?).into_owned();
        if line.to_lowercase().contains(&needle) {
            if out.len() == max {
                return Ok((out, true));
            }
            out.push((n as u64 + 1, line));
        }
    }
    Ok((out, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("logs")).unwrap();
        std::fs::write(dir.path().join("logs/worker-1-42.log"), "alpha\nBeta line\ngamma beta\n").unwrap();
        std::fs::write(dir.path().join("secret"), "no").unwrap();
        dir
    }

    #[test]
    fn only_files_in_the_log_directories_are_read() {
        let dir = session();
        assert_eq!(list(dir.path()).iter().map(|f| f.0.as_str()).collect::<Vec<_>>(), vec!["logs/worker-1-42.log"]);
        for bad in ["secret", "../secret", "logs/../secret", "/etc/passwd", "logs", "other/x.log", "logs/a/b"] {
            assert!(matches!(resolve(dir.path(), bad), Err(LogError::NotALog(_))), "{bad} was accepted");
        }
        std::os::unix::fs::symlink(dir.path().join("secret"), dir.path().join("logs/link.log")).unwrap();
        assert!(matches!(resolve(dir.path(), "logs/link.log"), Err(LogError::NotALog(_))), "a symlink is refused");
        assert_eq!(resolve(dir.path(), "logs/none.log"), Err(LogError::Missing("logs/none.log".into())));
    }

    #[test]
    fn serves_replica_logs_are_listed_and_read_but_a_linked_serve_directory_is_not() {
        let dir = session();
        std::fs::create_dir_all(dir.path().join("logs/serve")).unwrap();
        std::fs::write(dir.path().join("logs/serve/replica_app_Model_abcd1234.log"), "INFO -- GET / 200\n").unwrap();
        let names: Vec<String> = list(dir.path()).into_iter().map(|f| f.0).collect();
        assert_eq!(names, vec!["logs/serve/replica_app_Model_abcd1234.log", "logs/worker-1-42.log"]);
        let (data, _, _) = read(dir.path(), "logs/serve/replica_app_Model_abcd1234.log", 0, 100).unwrap();
        assert_eq!(data, b"INFO -- GET / 200\n");
        for bad in ["logs/serve/../../secret", "logs/serve", "jobs/serve/x.log", "logs/serve/a/b.log"] {
            assert!(matches!(resolve(dir.path(), bad), Err(LogError::NotALog(_))), "{bad} was accepted");
        }
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.log"), "no").unwrap();
        std::fs::remove_dir_all(dir.path().join("logs/serve")).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("logs/serve")).unwrap();
        assert!(matches!(resolve(dir.path(), "logs/serve/secret.log"), Err(LogError::NotALog(_))));
        assert_eq!(list(dir.path()).len(), 1, "nor listed");
    }

    #[test]
    fn reads_by_range_and_searches_by_line() {
        let dir = session();
        let (tail, start, size) = read(dir.path(), "logs/worker-1-42.log", -5, 100).unwrap();
        assert_eq!((tail.as_slice(), start, size), (b"beta\n".as_slice(), 22, 27));
        let (head, start, _) = read(dir.path(), "logs/worker-1-42.log", 0, 5).unwrap();
        assert_eq!((head.as_slice(), start), (b"alpha".as_slice(), 0));
        let (matches, cut) = search(dir.path(), "logs/worker-1-42.log", "BETA", 0).unwrap();
        assert_eq!(matches, vec![(2, "Beta line".to_string()), (3, "gamma beta".to_string())]);
        assert!(!cut);
        let (matches, cut) = search(dir.path(), "logs/worker-1-42.log", "beta", 1).unwrap();
        assert_eq!((matches.len(), cut), (1, true));
    }
}
