//! Where a training run keeps its checkpoints and snapshot: a local (or NFS)
//! directory, or an S3 prefix through `object_store`. Paths given to the
//! methods are relative to the run storage root and use `/` separators.
//! TensorBoard's event files are written by [`tensorboard`].

pub mod tensorboard;

use futures::StreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::buffered::BufWriter;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::io::AsyncWriteExt;

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("invalid storage path {uri:?}: {reason}")]
    InvalidUri { uri: String, reason: String },
    #[error(
        "{rel:?} is not a relative path inside the storage root {root}: it must not start with '/' or contain '..'"
    )]
    OutsideRoot { rel: String, root: String },
    #[error("{op} {target}: {source}")]
    Io {
        op: &'static str,
        target: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{op} {target}: {source}")]
    Remote {
        op: &'static str,
        target: String,
        #[source]
        source: object_store::Error,
    },
}

type Result<T> = std::result::Result<T, StorageError>;

/// The object store behind an `s3://bucket/key` URI and the key (without
/// leading or trailing `/`), built the same way for Train's run storage and
/// Data's readers and writers: the standard AWS variables (`AWS_ENDPOINT_URL`,
/// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, ...), plain HTTP
/// allowed for an `http://` endpoint, `us-east-1` when no region is set, and
/// bounded retries. pyarrow's S3 options in the URI's query override them, as
/// Ray accepts them: `s3://bucket/key?region=...&endpoint_override=host:port&scheme=http`.
pub fn object_store_for_uri(uri: &str) -> Result<(Arc<dyn ObjectStore>, String)> {
    let (uri, query) = split_query(uri);
    let invalid = |reason: &str| StorageError::InvalidUri { uri: uri.to_string(), reason: reason.to_string() };
    let Some(rest) = uri.strip_prefix("s3://") else {
        return Err(invalid("expected s3://<bucket>/<key>"));
    };
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(invalid("expected s3://<bucket>/<prefix>"));
    }
    let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
    let endpoint = std::env::var("AWS_ENDPOINT_URL_S3").or_else(|_| std::env::var("AWS_ENDPOINT_URL")).ok();
    if endpoint.as_deref().is_some_and(|e| e.starts_with("http://")) {
        builder = builder.with_allow_http(true);
    }
    if std::env::var("AWS_REGION").is_err() && std::env::var("AWS_DEFAULT_REGION").is_err() {
        builder = builder.with_region("us-east-1");
    }
    if let Some(query) = query {
        builder = with_query_options(builder, query).map_err(|reason| invalid(&reason))?;
    }
    // Bounded retries: a dead endpoint fails in seconds, not minutes.
    let retry = object_store::RetryConfig {
        max_retries: 3,
        retry_timeout: std::time::Duration::from_secs(20),
        ..Default::default()
    };
    // Set through the config key: `with_client_options` would drop what
    // `from_env` and `with_allow_http` already set.
    let connect_timeout = object_store::aws::AmazonS3ConfigKey::Client(object_store::ClientConfigKey::ConnectTimeout);
    let store =
        builder.with_retry(retry).with_config(connect_timeout, "5s").build().map_err(|e| invalid(&e.to_string()))?;
    Ok((Arc::new(store), prefix.trim_matches('/').to_string()))
}

/// The URI without its `?query`, and the query.
pub fn split_query(uri: &str) -> (&str, Option<&str>) {
    match uri.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (uri, None),
    }
}

/// The S3 options pyarrow takes in a URI's query (those Ray users pass).
const QUERY_OPTIONS: &str = "region, endpoint_override, scheme, access_key, secret_key, session_token, anonymous";

fn with_query_options(mut builder: AmazonS3Builder, query: &str) -> std::result::Result<AmazonS3Builder, String> {
    let mut scheme = "https".to_string();
    let mut endpoint = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, raw) = pair.split_once('=').unwrap_or((pair, ""));
        let value =
            percent_decode(raw).ok_or_else(|| format!("the query value {raw:?} of {key:?} is not valid UTF-8"))?;
        builder = match key {
            "region" => builder.with_region(value),
            "endpoint_override" => {
                endpoint = Some(value);
                builder
            }
            "scheme" if value == "http" || value == "https" => {
                scheme = value;
                builder
            }
            "scheme" => return Err(format!("scheme={value:?} in the query: expected http or https")),
            "access_key" => builder.with_access_key_id(value),
            "secret_key" => builder.with_secret_access_key(value),
            "session_token" => builder.with_token(value),
            "anonymous" => builder.with_skip_signature(matches!(value.as_str(), "true" | "1" | "True")),
            other => {
                return Err(format!("unsupported S3 option {other:?} in the query: supported are {QUERY_OPTIONS}"));
            }
        };
    }
    if let Some(endpoint) = endpoint {
        let url = if endpoint.contains("://") { endpoint } else { format!("{scheme}://{endpoint}") };
        builder = builder.with_allow_http(url.starts_with("http://")).with_endpoint(url);
    }
    Ok(builder)
}

/// `%XX` escapes and `+` (a space) of a query value.
fn percent_decode(raw: &str) -> Option<String> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// A storage root: `/abs/path`, `file:///abs/path` or `s3://bucket/prefix`.
pub enum Storage {
    Local(PathBuf),
    S3 { store: Arc<dyn ObjectStore>, prefix: String, uri: String },
}

fn io_err(op: &'static str, target: impl std::fmt::Display) -> impl FnOnce(std::io::Error) -> StorageError {
    let target = target.to_string();
    move |source| StorageError::Io { op, target, source }
}

impl Storage {
    /// Opens a root. S3 reads the standard AWS variables (`AWS_ENDPOINT_URL`,
    /// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, ...).
    pub fn open(uri: &str) -> Result<Storage> {
        let invalid = |reason: &str| StorageError::InvalidUri { uri: uri.to_string(), reason: reason.to_string() };
        if uri.starts_with("s3://") {
            let (store, prefix) = object_store_for_uri(uri)?;
            // Shown in paths and errors without its query, which may hold credentials.
            let root = split_query(uri).0.trim_end_matches('/').to_string();
            return Ok(Storage::S3 { store, prefix, uri: root });
        }
        let path = uri.strip_prefix("file://").unwrap_or(uri);
        if path.contains("://") {
            return Err(invalid("supported schemes are a local path, file:// and s3://"));
        }
        if !Path::new(path).is_absolute() {
            return Err(invalid("a local storage path must be absolute"));
        }
        Ok(Storage::Local(PathBuf::from(path)))
    }

    /// `rel`, once it is known to stay under the root: not absolute, no `..`.
    fn inside<'a>(&self, rel: &'a str) -> Result<&'a str> {
        if rel.starts_with('/') || rel.contains('\0') || rel.split(['/', '\\']).any(|part| part == "..") {
            return Err(StorageError::OutsideRoot { rel: rel.to_string(), root: self.uri() });
        }
        Ok(rel)
    }

    /// The root as the user sees it.
    pub fn uri(&self) -> String {
        match self {
            Storage::Local(p) => p.display().to_string(),
            Storage::S3 { uri, .. } => uri.clone(),
        }
    }

    /// The object key of `rel`, kept verbatim (`~`, `%`, ... are not
    /// percent-encoded), so it is the key other S3 tools see.
    fn key(&self, rel: &str) -> Result<ObjectPath> {
        let Storage::S3 { prefix, .. } = self else { unreachable!("keys are for object stores") };
        let rel = rel.trim_matches('/');
        let joined = match (prefix.is_empty(), rel.is_empty()) {
            (true, _) => rel.to_string(),
            (false, true) => prefix.clone(),
            (false, false) => format!("{prefix}/{rel}"),
        };
        ObjectPath::parse(&joined)
            .map_err(|e| StorageError::InvalidUri { uri: format!("{}/{rel}", self.uri()), reason: e.to_string() })
    }

    fn target(&self, rel: &str) -> String {
        format!("{}/{}", self.uri(), rel.trim_matches('/'))
    }

    fn remote(&self, op: &'static str, rel: &str) -> impl FnOnce(object_store::Error) -> StorageError {
        let target = self.target(rel);
        move |source| StorageError::Remote { op, target, source }
    }

    pub async fn write_bytes(&self, rel: &str, data: Vec<u8>) -> Result<()> {
        let rel = self.inside(rel)?;
        match self {
            Storage::Local(root) => {
                let path = root.join(rel);
                if let Some(parent) = path.parent() {
                    tokio::fs::create_dir_all(parent).await.map_err(io_err("cannot create", parent.display()))?;
                }
                let shown = path.display().to_string();
                tokio::task::spawn_blocking(move || write_durably(&path, &data))
                    .await
                    .map_err(|e| std::io::Error::other(e.to_string()))
                    .and_then(|written| written)
                    .map_err(io_err("cannot write", shown))
            }
            Storage::S3 { store, .. } => {
                store.put(&self.key(rel)?, PutPayload::from(data)).await.map_err(self.remote("cannot write", rel))?;
                Ok(())
            }
        }
    }

    /// The file's bytes, or `None` when it does not exist.
    pub async fn read_bytes(&self, rel: &str) -> Result<Option<Vec<u8>>> {
        let rel = self.inside(rel)?;
        match self {
            Storage::Local(root) => match tokio::fs::read(root.join(rel)).await {
                Ok(data) => Ok(Some(data)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(io_err("cannot read", root.join(rel).display())(e)),
            },
            Storage::S3 { store, .. } => match store.get(&self.key(rel)?).await {
                Ok(got) => Ok(Some(got.bytes().await.map_err(self.remote("cannot read", rel))?.to_vec())),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(self.remote("cannot read", rel)(e)),
            },
        }
    }

    /// Copies every file under `local` to `rel/`, keeping relative paths and
    /// leaving files already there (other ranks' files merge in).
    pub async fn upload_dir(&self, local: &Path, rel: &str) -> Result<u64> {
        let rel = self.inside(rel)?;
        let files = local_files(local)?;
        let mut total = 0;
        for (path, sub) in files {
            let dest_rel = format!("{}/{}", rel.trim_matches('/'), sub);
            total += match self {
                Storage::Local(root) => copy_replacing(&path, &root.join(&dest_rel)).await?,
                Storage::S3 { store, .. } => {
                    let mut file = tokio::fs::File::open(&path).await.map_err(io_err("cannot open", path.display()))?;
                    let mut writer = BufWriter::new(store.clone(), self.key(&dest_rel)?);
                    match tokio::io::copy(&mut file, &mut writer).await {
                        // A failed shutdown has ended the writer already: it cannot be aborted too.
                        Ok(n) => match writer.shutdown().await {
                            Ok(()) => n,
                            Err(e) => return Err(io_err("cannot upload to", self.target(&dest_rel))(e)),
                        },
                        Err(e) => {
                            // No half-finished multipart upload is left behind.
                            let _ = writer.abort().await;
                            return Err(io_err("cannot upload to", self.target(&dest_rel))(e));
                        }
                    }
                }
            };
        }
        Ok(total)
    }

    /// Copies every file under `rel/` into the local directory `local`.
    pub async fn download_dir(&self, rel: &str, local: &Path) -> Result<u64> {
        let rel = self.inside(rel)?;
        match self {
            Storage::Local(root) => {
                let mut total = 0;
                for (path, sub) in local_files(&root.join(rel))? {
                    total += copy_replacing(&path, &local.join(sub)).await?;
                }
                Ok(total)
            }
            Storage::S3 { store, .. } => {
                let mut total = 0;
                for (meta, sub) in self.list_keys(rel).await? {
                    let dest = sub.split('/').fold(local.to_path_buf(), |acc, p| acc.join(p));
                    if let Some(parent) = dest.parent() {
                        tokio::fs::create_dir_all(parent).await.map_err(io_err("cannot create", parent.display()))?;
                    }
                    let mut stream =
                        store.get(&meta).await.map_err(self.remote("cannot read", meta.as_ref()))?.into_stream();
                    let mut file =
                        tokio::fs::File::create(&dest).await.map_err(io_err("cannot create", dest.display()))?;
                    while let Some(chunk) = stream.next().await {
                        let chunk = chunk.map_err(self.remote("cannot read", meta.as_ref()))?;
                        total += chunk.len() as u64;
                        file.write_all(&chunk).await.map_err(io_err("cannot write", dest.display()))?;
                    }
                    file.flush().await.map_err(io_err("cannot write", dest.display()))?;
                }
                Ok(total)
            }
        }
    }

    /// The keys under `rel/`, each with its `/`-separated path relative to `rel`.
    async fn list_keys(&self, rel: &str) -> Result<Vec<(ObjectPath, String)>> {
        let Storage::S3 { store, .. } = self else { unreachable!("keys are for object stores") };
        let base = self.key(rel)?;
        let mut out = Vec::new();
        let mut listing = store.list(Some(&base));
        while let Some(meta) = listing.next().await {
            let key = meta.map_err(self.remote("cannot list", rel))?.location;
            let Some(parts) = key.prefix_match(&base) else { continue };
            let sub = parts.map(|p| p.as_ref().to_string()).collect::<Vec<_>>().join("/");
            out.push((key, sub));
        }
        Ok(out)
    }

    /// Relative paths of the files under `rel/`.
    pub async fn list(&self, rel: &str) -> Result<Vec<String>> {
        let rel = self.inside(rel)?;
        match self {
            Storage::Local(root) => {
                let dir = root.join(rel);
                if !dir.exists() {
                    return Ok(Vec::new());
                }
                Ok(local_files(&dir)?.into_iter().map(|(_, sub)| sub).collect())
            }
            Storage::S3 { .. } => Ok(self.list_keys(rel).await?.into_iter().map(|(_, sub)| sub).collect()),
        }
    }

    /// Removes `rel/` and everything under it; a missing directory is fine.
    pub async fn delete_dir(&self, rel: &str) -> Result<()> {
        let rel = self.inside(rel)?;
        match self {
            Storage::Local(root) => match tokio::fs::remove_dir_all(root.join(rel)).await {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(io_err("cannot delete", root.join(rel).display())(e))
                }
                _ => Ok(()),
            },
            Storage::S3 { store, .. } => {
                for (key, _) in self.list_keys(rel).await? {
                    store.delete(&key).await.map_err(self.remote("cannot delete", key.as_ref()))?;
                }
                Ok(())
            }
        }
    }
}

/// Copies `src` to `dest` through a temporary file and a rename, so ranks
/// writing the same name never interleave and a reader never sees half a file.
/// Copying a file onto itself is a no-op.
async fn copy_replacing(src: &Path, dest: &Path) -> Result<u64> {
    if let Some(parent) = dest.parent() {
        tokio::fs::create_dir_all(parent).await.map_err(io_err("cannot create", parent.display()))?;
    }
    if let (Ok(a), Ok(b)) = (tokio::fs::canonicalize(src).await, tokio::fs::canonicalize(dest).await)
        && a == b
    {
        return Ok(0);
    }
    let name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dest.with_file_name(format!(".{name}.{}-{:x}.tmp", std::process::id(), unique_suffix()));
    let copied = tokio::fs::copy(src, &tmp).await.map_err(io_err("cannot copy to", tmp.display()));
    let renamed = match copied {
        Ok(n) => tokio::fs::rename(&tmp, dest).await.map(|_| n).map_err(io_err("cannot write", dest.display())),
        Err(e) => Err(e),
    };
    if renamed.is_err() {
        let _ = tokio::fs::remove_file(&tmp).await;
    }
    renamed
}

fn unique_suffix() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(std::time::SystemTime::now())
}

/// Every regular file under `dir`, with its `/`-separated path relative to `dir`.
fn local_files(dir: &Path) -> Result<Vec<(PathBuf, String)>> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    while let Some((path, rel)) = stack.pop() {
        let entries = std::fs::read_dir(&path).map_err(io_err("cannot read directory", path.display()))?;
        for entry in entries {
            let entry = entry.map_err(io_err("cannot read directory", path.display()))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let sub = if rel.is_empty() { name } else { format!("{rel}/{name}") };
            let kind = entry.file_type().map_err(io_err("cannot stat", entry.path().display()))?;
            if kind.is_dir() {
                stack.push((entry.path(), sub));
            } else {
                out.push((entry.path(), sub));
            }
        }
    }
    out.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(out)
}

/// Writes `data` to `path` so that a reader, or a crash at any moment, sees the old file or the
/// new one whole: a temp file of this writer's own (two writers never share one), flushed to
/// disk, renamed over `path`, and the directory flushed so the rename itself survives a crash.
fn write_durably(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
    let unique = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let count = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.{}-{unique:x}-{count}.tmp", std::process::id()));
    let written = (|| {
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        file.write_all(data)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s3_query_options_are_read_and_kept_out_of_the_root() {
        let storage =
            Storage::open("s3://bucket/runs?region=eu-west-1&endpoint_override=127.0.0.1%3A9000&scheme=http").unwrap();
        assert_eq!(storage.uri(), "s3://bucket/runs");
        let refused = Storage::open("s3://bucket/runs?allow_bucket_creation=true").err().unwrap().to_string();
        assert!(refused.contains("allow_bucket_creation") && refused.contains("endpoint_override"), "{refused}");
        let bad_scheme = Storage::open("s3://bucket/runs?scheme=ftp").err().unwrap().to_string();
        assert!(bad_scheme.contains("scheme=\"ftp\""), "{bad_scheme}");
        assert_eq!(percent_decode("a%2Fb+c").as_deref(), Some("a/b c"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_writers_of_one_file_never_share_a_temp_file() {
        // Two controllers of one run (a restart racing the old one) writing its snapshot at once.
        let dir = tempfile::tempdir().unwrap();
        let storage = Arc::new(Storage::Local(dir.path().to_path_buf()));
        let contents: Vec<Vec<u8>> = (0..8u8).map(|i| vec![b'a' + i; 256 * 1024]).collect();
        let writers = contents.iter().cloned().map(|data| {
            let storage = storage.clone();
            tokio::spawn(async move {
                for _ in 0..20 {
                    storage.write_bytes("run/checkpoint_manager_snapshot.json", data.clone()).await?;
                }
                Ok::<_, StorageError>(())
            })
        });
        for writer in futures::future::join_all(writers).await {
            writer.unwrap().expect("every write succeeds");
        }
        let written = std::fs::read(dir.path().join("run/checkpoint_manager_snapshot.json")).unwrap();
        assert!(contents.contains(&written), "the file is one writer's whole content");
        let names: Vec<_> =
            std::fs::read_dir(dir.path().join("run")).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["checkpoint_manager_snapshot.json"], "no temp file is left");
    }

    #[tokio::test]
    async fn paths_that_leave_the_root_are_refused() {
        let outer = tempfile::tempdir().unwrap();
        let root = outer.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let storage = Storage::open(root.to_str().unwrap()).unwrap();
        let absolute = outer.path().join("abs").display().to_string();
        for rel in ["../x", "a/../../x", "a/..", absolute.as_str()] {
            let refused = storage.write_bytes(rel, b"x".to_vec()).await;
            assert!(matches!(refused, Err(StorageError::OutsideRoot { .. })), "{rel}: {refused:?}");
            assert!(matches!(storage.delete_dir(rel).await, Err(StorageError::OutsideRoot { .. })), "{rel}");
        }
        storage.write_bytes("a/b..c/ok", b"x".to_vec()).await.unwrap();
        assert_eq!(storage.read_bytes("a/b..c/ok").await.unwrap().as_deref(), Some(&b"x"[..]));
        assert_eq!(std::fs::read_dir(outer.path()).unwrap().count(), 1, "nothing was written outside the root");
    }

    #[tokio::test]
    async fn local_round_trip_merges_and_deletes() {
        let root = tempfile::tempdir().unwrap();
        let storage = Storage::open(root.path().to_str().unwrap()).unwrap();
        let rank0 = tempfile::tempdir().unwrap();
        let rank1 = tempfile::tempdir().unwrap();
        std::fs::write(rank0.path().join("model.pt"), b"weights").unwrap();
        std::fs::create_dir(rank1.path().join("shard")).unwrap();
        std::fs::write(rank1.path().join("shard/part-1"), b"one").unwrap();
        storage.upload_dir(rank0.path(), "run/ckpt").await.unwrap();
        storage.upload_dir(rank1.path(), "run/ckpt").await.unwrap();
        assert_eq!(storage.list("run/ckpt").await.unwrap(), vec!["model.pt", "shard/part-1"]);
        let out = tempfile::tempdir().unwrap();
        assert_eq!(storage.download_dir("run/ckpt", out.path()).await.unwrap(), 10);
        assert_eq!(std::fs::read(out.path().join("shard/part-1")).unwrap(), b"one");
        storage.write_bytes("run/snapshot.json", b"{}".to_vec()).await.unwrap();
        assert_eq!(storage.read_bytes("run/snapshot.json").await.unwrap().unwrap(), b"{}");
        assert!(storage.read_bytes("run/missing").await.unwrap().is_none());
        storage.delete_dir("run/ckpt").await.unwrap();
        assert!(storage.list("run/ckpt").await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn same_name_from_two_ranks_is_replaced_whole_and_self_copy_is_kept() {
        let root = tempfile::tempdir().unwrap();
        let storage = Storage::open(root.path().to_str().unwrap()).unwrap();
        let a = tempfile::tempdir().unwrap();
        std::fs::write(a.path().join("model~1.pt"), vec![1u8; 4096]).unwrap();
        storage.upload_dir(a.path(), "run/ckpt").await.unwrap();
        storage.upload_dir(a.path(), "run/ckpt").await.unwrap();
        let stored = root.path().join("run/ckpt");
        assert_eq!(storage.list("run/ckpt").await.unwrap(), vec!["model~1.pt"]);
        // Re-uploading the stored directory onto itself must not truncate it.
        storage.upload_dir(&stored, "run/ckpt").await.unwrap();
        assert_eq!(std::fs::read(stored.join("model~1.pt")).unwrap().len(), 4096);
    }

    #[test]
    fn rejects_relative_and_unknown_schemes() {
        let relative = Storage::open("results").err().unwrap().to_string();
        assert!(relative.contains("\"results\"") && relative.contains("absolute"), "{relative}");
        let gcs = Storage::open("gs://bucket/x").err().unwrap().to_string();
        assert!(gcs.contains("s3://"), "{gcs}");
    }
}
