//! Where data lives: parsing a URI (local path, `file://`, `s3://`) and
//! expanding inputs (files, directories walked recursively, globs) into the
//! files to read with their sizes. S3 stores are built by `oxray_io`, the
//! same way Train's run storage builds them.

use crate::error::{DataError, Result};
use futures::TryStreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// A file (or directory) the engine reads or writes.
pub(crate) enum Location {
    Local(PathBuf),
    S3 {
        store: Arc<dyn ObjectStore>,
        /// `s3://bucket`, to build URIs of listed keys.
        bucket_uri: String,
        key: String,
    },
}

impl Location {
    /// Parses `uri`: an `s3://bucket/key`, a `file://` URI or a local path.
    pub(crate) fn parse(uri: &str) -> Result<Location> {
        if let Some(rest) = uri.strip_prefix("s3://") {
            let (store, key) = s3_store(uri)?;
            let bucket = rest.split('/').next().unwrap_or_default();
            return Ok(Location::S3 { store, bucket_uri: format!("s3://{bucket}"), key });
        }
        let path = uri.strip_prefix("file://").unwrap_or(uri);
        if path.contains("://") {
            return Err(DataError::InvalidUri {
                uri: uri.to_string(),
                reason: "supported are a local path, file:///abs/path and s3://bucket/key".into(),
            });
        }
        if path.is_empty() {
            return Err(DataError::InvalidUri { uri: uri.to_string(), reason: "the path is empty".into() });
        }
        Ok(Location::Local(PathBuf::from(path)))
    }
}

/// The object key of `key`, kept verbatim (not percent-encoded), as `oxray_io` does.
pub(crate) fn object_path(uri: &str, key: &str) -> Result<ObjectPath> {
    ObjectPath::parse(key).map_err(|e| DataError::InvalidUri { uri: uri.to_string(), reason: e.to_string() })
}

/// S3 stores by bucket and AWS settings, kept for the process: reads of many
/// files and fragments share one connection pool per bucket. A changed
/// `AWS_*` variable (another endpoint or key) gets a new store.
static STORES: Mutex<Option<HashMap<String, Arc<dyn ObjectStore>>>> = Mutex::new(None);
static SETTINGS_HASH: std::hash::BuildHasherDefault<std::collections::hash_map::DefaultHasher> =
    std::hash::BuildHasherDefault::new();

/// The store of an `s3://bucket/key` URI and its key.
fn s3_store(uri: &str) -> Result<(Arc<dyn ObjectStore>, String)> {
    let rest = uri.strip_prefix("s3://").unwrap_or(uri);
    let bucket = rest.split('/').next().unwrap_or_default();
    let key = rest[bucket.len()..].trim_matches('/').to_string();
    let mut settings: Vec<(String, String)> = std::env::vars().filter(|(k, _)| k.starts_with("AWS_")).collect();
    settings.sort();
    let cache_key = format!("{bucket}/{:x}", std::hash::BuildHasher::hash_one(&SETTINGS_HASH, &settings));
    if let Some(store) = STORES.lock().get_or_insert_default().get(&cache_key) {
        return Ok((store.clone(), key));
    }
    let (store, key) = oxray_io::object_store_for_uri(uri)
        .map_err(|e| DataError::InvalidUri { uri: uri.to_string(), reason: e.to_string() })?;
    STORES.lock().get_or_insert_default().insert(cache_key, store.clone());
    Ok((store, key))
}

/// Runs remote (S3) I/O to completion from a plain thread. The runtime starts
/// on first use, so local-only work starts no threads.
pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("oxray-data-io")
                .enable_all()
                .build()
                .expect("cannot start the oxray data I/O runtime")
        })
        .block_on(future)
}

fn has_glob(path: &str) -> bool {
    path.contains(['*', '?', '['])
}

/// Names skipped inside a walked directory: `_SUCCESS`, `.crc`, `.ipynb_checkpoints`, ...
fn is_hidden(name: &str) -> bool {
    name.starts_with('.') || name.starts_with('_')
}

/// The extensions filter, normalized to lower case with a leading dot.
fn normalize_extensions(extensions: Option<&[String]>) -> Vec<String> {
    extensions
        .unwrap_or_default()
        .iter()
        .map(|e| format!(".{}", e.trim_start_matches('.').to_ascii_lowercase()))
        .collect()
}

fn matches_extension(name: &str, extensions: &[String]) -> bool {
    extensions.is_empty() || extensions.iter().any(|e| name.to_ascii_lowercase().ends_with(e.as_str()))
}

/// Expands each input (a file, a directory walked recursively, or a glob;
/// local or S3) into `(uri, size in bytes)`, inputs in the given order and
/// each directory's files sorted by path. Inside a walked directory, names
/// starting with `.` or `_` are skipped, and with `extensions` only files with
/// one of them are kept; files named explicitly are always kept.
pub fn expand_paths(paths: &[String], extensions: Option<&[String]>) -> Result<Vec<(String, u64)>> {
    let extensions = normalize_extensions(extensions);
    let mut out = Vec::new();
    for uri in paths {
        match Location::parse(uri)? {
            Location::Local(path) => expand_local(uri, &path, &extensions, &mut out)?,
            Location::S3 { store, bucket_uri, key } => {
                block_on(expand_s3(uri, store.as_ref(), &bucket_uri, &key, &extensions, &mut out))?
            }
        }
    }
    Ok(out)
}

fn expand_local(uri: &str, path: &Path, extensions: &[String], out: &mut Vec<(String, u64)>) -> Result<()> {
    let text = path.to_string_lossy();
    if has_glob(&text) && std::fs::metadata(path).is_err() {
        let options = glob::MatchOptions { require_literal_leading_dot: true, ..Default::default() };
        let entries = glob::glob_with(&text, options)
            .map_err(|e| DataError::InvalidUri { uri: uri.to_string(), reason: format!("bad glob pattern: {e}") })?;
        let mut matched = Vec::new();
        for entry in entries {
            let found = entry.map_err(|e| {
                let path = e.path().display().to_string();
                DataError::io("cannot read", path)(e.into())
            })?;
            let hidden = found.file_name().is_some_and(|n| is_hidden(&n.to_string_lossy()));
            if hidden {
                continue;
            }
            if found.is_dir() {
                walk_local(&found, extensions, &mut matched)?;
            } else {
                let size = std::fs::metadata(&found).map_err(DataError::io("cannot stat", found.display()))?.len();
                matched.push((found.display().to_string(), size));
            }
        }
        // `**` matches a directory and the files under it: each file once (deduplicated there).
        return add_matches(out, matched, uri, "glob", extensions);
    }
    let meta = std::fs::metadata(path).map_err(DataError::io("cannot stat", uri))?;
    if meta.is_dir() {
        let mut found = Vec::new();
        walk_local(path, extensions, &mut found)?;
        add_matches(out, found, uri, "directory", extensions)?;
    } else {
        out.push((path.display().to_string(), meta.len()));
    }
    Ok(())
}

/// Every file under `dir` (following links), skipping hidden names and, with
/// `extensions`, files without one of them.
fn walk_local(dir: &Path, extensions: &[String], out: &mut Vec<(String, u64)>) -> Result<()> {
    let entries = std::fs::read_dir(dir).map_err(DataError::io("cannot read directory", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(DataError::io("cannot read directory", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if is_hidden(&name) {
            continue;
        }
        let path = entry.path();
        let meta = std::fs::metadata(&path).map_err(DataError::io("cannot stat", path.display()))?;
        if meta.is_dir() {
            walk_local(&path, extensions, out)?;
        } else if matches_extension(&name, extensions) {
            out.push((path.display().to_string(), meta.len()));
        }
    }
    Ok(())
}

async fn expand_s3(
    uri: &str,
    store: &dyn ObjectStore,
    bucket_uri: &str,
    key: &str,
    extensions: &[String],
    out: &mut Vec<(String, u64)>,
) -> Result<()> {
    if has_glob(key) {
        // List under the part of the key before the first wildcard component.
        let literal: Vec<&str> = key.split('/').take_while(|part| !has_glob(part)).collect();
        let base = literal.join("/");
        let pattern = glob::Pattern::new(key)
            .map_err(|e| DataError::InvalidUri { uri: uri.to_string(), reason: format!("bad glob pattern: {e}") })?;
        let options = glob::MatchOptions {
            require_literal_separator: true,
            require_literal_leading_dot: true,
            ..Default::default()
        };
        let mut matched = Vec::new();
        for (found, size) in list_s3(uri, store, &base).await? {
            let name = found.rsplit('/').next().unwrap_or_default();
            if is_hidden(name) {
                continue;
            }
            if pattern.matches_with(&found, options) {
                matched.push((format!("{bucket_uri}/{found}"), size));
            } else if found.match_indices('/').any(|(end, _)| pattern.matches_with(&found[..end], options)) {
                // A key under a "directory" the pattern matches is walked like a directory.
                let rest_hidden = found.split('/').any(is_hidden);
                if !rest_hidden && matches_extension(name, extensions) {
                    matched.push((format!("{bucket_uri}/{found}"), size));
                }
            }
        }
        return add_matches(out, matched, uri, "glob", extensions);
    }
    if !key.is_empty() {
        match store.head(&object_path(uri, key)?).await {
            Ok(meta) => {
                out.push((format!("{bucket_uri}/{key}"), meta.size));
                return Ok(());
            }
            Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(DataError::remote("cannot stat", uri)(e)),
        }
    }
    let mut found = Vec::new();
    let mut any = false;
    for (file, size) in list_s3(uri, store, key).await? {
        any = true;
        let relative = file[key.len()..].trim_start_matches('/');
        if relative.split('/').any(is_hidden)
            || !matches_extension(relative.rsplit('/').next().unwrap_or_default(), extensions)
        {
            continue;
        }
        found.push((format!("{bucket_uri}/{file}"), size));
    }
    if !any {
        return Err(DataError::NotFound { path: uri.to_string() });
    }
    add_matches(out, found, uri, "directory", extensions)
}

/// Appends what a glob or a directory matched, sorted and each file once; matching
/// nothing is an error naming the pattern and the extensions looked for.
fn add_matches(
    out: &mut Vec<(String, u64)>,
    mut matched: Vec<(String, u64)>,
    uri: &str,
    what: &'static str,
    extensions: &[String],
) -> Result<()> {
    if matched.is_empty() {
        return Err(DataError::NothingMatched { pattern: uri.to_string(), what, extensions: extensions.to_vec() });
    }
    matched.sort();
    matched.dedup();
    out.extend(matched);
    Ok(())
}

/// Every key under the "directory" `prefix` with its size, skipping the
/// zero-byte "directory marker" keys some tools create.
async fn list_s3(uri: &str, store: &dyn ObjectStore, prefix: &str) -> Result<Vec<(String, u64)>> {
    let base = if prefix.is_empty() { None } else { Some(object_path(uri, prefix)?) };
    let listed: Vec<_> =
        store.list(base.as_ref()).try_collect().await.map_err(DataError::remote("cannot list", uri))?;
    Ok(listed
        .into_iter()
        .map(|meta| (meta.location.as_ref().to_string(), meta.size))
        .filter(|(key, _)| !key.ends_with('/'))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(path: &Path, bytes: usize) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, vec![b'x'; bytes]).unwrap();
    }

    fn names(found: &[(String, u64)], root: &Path) -> Vec<String> {
        let root = format!("{}/", root.display());
        found.iter().map(|(uri, _)| uri.strip_prefix(&root).unwrap().to_string()).collect()
    }

    #[test]
    fn directories_are_walked_sorted_skipping_hidden_names() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        touch(&root.join("b/2.parquet"), 2);
        touch(&root.join("a.parquet"), 1);
        touch(&root.join("b/1.parquet"), 3);
        touch(&root.join("_SUCCESS"), 0);
        touch(&root.join(".a.parquet.crc"), 4);
        touch(&root.join(".hidden/x.parquet"), 4);
        touch(&root.join("notes.txt"), 5);
        let all = expand_paths(&[root.display().to_string()], None).unwrap();
        assert_eq!(names(&all, root), ["a.parquet", "b/1.parquet", "b/2.parquet", "notes.txt"]);
        assert_eq!(all[1].1, 3, "sizes are the files'");

        let only = expand_paths(&[root.display().to_string()], Some(&["parquet".to_string()])).unwrap();
        assert_eq!(names(&only, root), ["a.parquet", "b/1.parquet", "b/2.parquet"]);

        // Named files are kept whatever their name; inputs keep their order; file:// works.
        let named = vec![
            root.join("notes.txt").display().to_string(),
            format!("file://{}", root.join("_SUCCESS").display()),
            root.join("b").display().to_string(),
        ];
        let found = expand_paths(&named, Some(&[".parquet".to_string()])).unwrap();
        assert_eq!(names(&found, root), ["notes.txt", "_SUCCESS", "b/1.parquet", "b/2.parquet"]);
    }

    #[test]
    fn globs_match_files_and_walk_matched_directories() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        touch(&root.join("x/part-1.parquet"), 1);
        touch(&root.join("x/part-2.parquet"), 1);
        touch(&root.join("x/other.csv"), 1);
        touch(&root.join("y/deep/part-3.parquet"), 1);
        touch(&root.join("x/_part-0.parquet"), 1);
        let glob = |pattern: &str| expand_paths(&[format!("{}/{pattern}", root.display())], None);
        assert_eq!(names(&glob("x/part-*.parquet").unwrap(), root), ["x/part-1.parquet", "x/part-2.parquet"]);
        assert_eq!(names(&glob("*/part-?.parquet").unwrap(), root), ["x/part-1.parquet", "x/part-2.parquet"]);
        assert_eq!(
            names(&glob("**/*.parquet").unwrap(), root),
            ["x/part-1.parquet", "x/part-2.parquet", "y/deep/part-3.parquet"]
        );
        assert_eq!(names(&glob("[y]").unwrap(), root), ["y/deep/part-3.parquet"]);
        let every = ["x/other.csv", "x/part-1.parquet", "x/part-2.parquet", "y/deep/part-3.parquet"];
        assert_eq!(names(&glob("**").unwrap(), root), every, "each file once");
        let err = glob("x/*.json").unwrap_err();
        assert!(matches!(err, DataError::NothingMatched { what: "glob", .. }), "{err:?}");
        assert!(err.to_string().contains("x/*.json"), "{err}");
    }

    #[test]
    fn missing_paths_and_empty_directories_are_not_found() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope").display().to_string();
        let err = expand_paths(std::slice::from_ref(&missing), None).unwrap_err();
        assert!(err.is_not_found() && err.to_string().contains(&missing), "{err}");

        std::fs::create_dir(dir.path().join("empty")).unwrap();
        touch(&dir.path().join("empty/_SUCCESS"), 0);
        let empty = dir.path().join("empty").display().to_string();
        let err = expand_paths(std::slice::from_ref(&empty), None).unwrap_err();
        assert!(err.is_not_found() && err.to_string().contains(&empty), "{err}");
        touch(&dir.path().join("empty/notes.txt"), 1);
        let err = expand_paths(std::slice::from_ref(&empty), Some(&["parquet".to_string()])).unwrap_err().to_string();
        assert!(err.contains("holds no files to read with one of the extensions [\".parquet\"]"), "{err}");

        let err = expand_paths(&["gs://bucket/x".to_string()], None).unwrap_err();
        assert!(matches!(err, DataError::InvalidUri { .. }) && err.to_string().contains("s3://"), "{err}");
    }
}
