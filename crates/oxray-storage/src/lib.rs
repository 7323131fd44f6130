//! Where a training run keeps its checkpoints and snapshot: a local (or NFS)
//! directory, or an S3 prefix through `object_store`. Paths given to the
//! methods are relative to the run storage root and use `/` separators.

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
        if let Some(rest) = uri.strip_prefix("s3://") {
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
            let store = builder.build().map_err(|e| invalid(&e.to_string()))?;
            let prefix = prefix.trim_matches('/').to_string();
            return Ok(Storage::S3 { store: Arc::new(store), prefix, uri: uri.trim_end_matches('/').to_string() });
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

    /// The root as the user sees it.
    pub fn uri(&self) -> String {
        match self {
            Storage::Local(p) => p.display().to_string(),
            Storage::S3 { uri, .. } => uri.clone(),
        }
    }

    fn key(&self, rel: &str) -> ObjectPath {
        let Storage::S3 { prefix, .. } = self else { unreachable!("keys are for object stores") };
        let rel = rel.trim_matches('/');
        match (prefix.is_empty(), rel.is_empty()) {
            (true, _) => ObjectPath::from(rel),
            (false, true) => ObjectPath::from(prefix.as_str()),
            (false, false) => ObjectPath::from(format!("{prefix}/{rel}")),
        }
    }

    fn target(&self, rel: &str) -> String {
        format!("{}/{}", self.uri(), rel.trim_matches('/'))
    }

    fn remote(&self, op: &'static str, rel: &str) -> impl FnOnce(object_store::Error) -> StorageError {
        let target = self.target(rel);
        move |source| StorageError::Remote { op, target, source }
    }

    pub async fn write_bytes(&self, rel: &str, data: Vec<u8>) -> Result<()> {
        match self {
            Storage::Local(root) => {
                let path = root.join(rel);
                if let Some(parent) = path.parent() {
                    tokio::fs::create_dir_all(parent).await.map_err(io_err("cannot create", parent.display()))?;
                }
                // Write then rename, so a reader never sees half a file.
                let tmp = path.with_extension("tmp-oxray");
                tokio::fs::write(&tmp, data).await.map_err(io_err("cannot write", tmp.display()))?;
                tokio::fs::rename(&tmp, &path).await.map_err(io_err("cannot write", path.display()))
            }
            Storage::S3 { store, .. } => {
                store.put(&self.key(rel), PutPayload::from(data)).await.map_err(self.remote("cannot write", rel))?;
                Ok(())
            }
        }
    }

    /// The file's bytes, or `None` when it does not exist.
    pub async fn read_bytes(&self, rel: &str) -> Result<Option<Vec<u8>>> {
        match self {
            Storage::Local(root) => match tokio::fs::read(root.join(rel)).await {
                Ok(data) => Ok(Some(data)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(io_err("cannot read", root.join(rel).display())(e)),
            },
            Storage::S3 { store, .. } => match store.get(&self.key(rel)).await {
                Ok(got) => Ok(Some(got.bytes().await.map_err(self.remote("cannot read", rel))?.to_vec())),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(self.remote("cannot read", rel)(e)),
            },
        }
    }

    /// Copies every file under `local` to `rel/`, keeping relative paths and
    /// leaving files already there (other ranks' files merge in).
    pub async fn upload_dir(&self, local: &Path, rel: &str) -> Result<u64> {
        let files = local_files(local)?;
        let mut total = 0;
        for (path, sub) in files {
            let dest_rel = format!("{}/{}", rel.trim_matches('/'), sub);
            total += match self {
                Storage::Local(root) => {
                    let dest = root.join(&dest_rel);
                    if let Some(parent) = dest.parent() {
                        tokio::fs::create_dir_all(parent).await.map_err(io_err("cannot create", parent.display()))?;
                    }
                    tokio::fs::copy(&path, &dest).await.map_err(io_err("cannot copy to", dest.display()))?
                }
                Storage::S3 { store, .. } => {
                    let mut file = tokio::fs::File::open(&path).await.map_err(io_err("cannot open", path.display()))?;
                    let mut writer = BufWriter::new(store.clone(), self.key(&dest_rel));
                    let n = tokio::io::copy(&mut file, &mut writer)
                        .await
                        .map_err(io_err("cannot upload to", self.target(&dest_rel)))?;
                    writer.shutdown().await.map_err(io_err("cannot upload to", self.target(&dest_rel)))?;
                    n
                }
            };
        }
        Ok(total)
    }

    /// Copies every file under `rel/` into the local directory `local`.
    pub async fn download_dir(&self, rel: &str, local: &Path) -> Result<u64> {
        match self {
            Storage::Local(root) => {
                let mut total = 0;
                for (path, sub) in local_files(&root.join(rel))? {
                    let dest = local.join(sub);
                    if let Some(parent) = dest.parent() {
                        tokio::fs::create_dir_all(parent).await.map_err(io_err("cannot create", parent.display()))?;
                    }
                    total += tokio::fs::copy(&path, &dest).await.map_err(io_err("cannot copy to", dest.display()))?;
                }
                Ok(total)
            }
            Storage::S3 { store, .. } => {
                let base = self.key(rel);
                let mut total = 0;
                for meta in self.list_keys(rel).await? {
                    let sub: Vec<String> = meta
                        .prefix_match(&base)
                        .map(|parts| parts.map(|p| p.as_ref().to_string()).collect())
                        .unwrap_or_default();
                    let dest = sub.iter().fold(local.to_path_buf(), |acc, p| acc.join(p));
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

    async fn list_keys(&self, rel: &str) -> Result<Vec<ObjectPath>> {
        let Storage::S3 { store, .. } = self else { unreachable!("keys are for object stores") };
        let base = self.key(rel);
        let mut out = Vec::new();
        let mut listing = store.list(Some(&base));
        while let Some(meta) = listing.next().await {
            out.push(meta.map_err(self.remote("cannot list", rel))?.location);
        }
        Ok(out)
    }

    /// Relative paths of the files under `rel/`.
    pub async fn list(&self, rel: &str) -> Result<Vec<String>> {
        match self {
            Storage::Local(root) => {
                let dir = root.join(rel);
                if !dir.exists() {
                    return Ok(Vec::new());
                }
                Ok(local_files(&dir)?.into_iter().map(|(_, sub)| sub).collect())
            }
            Storage::S3 { .. } => {
                let base = self.key(rel);
                Ok(self
                    .list_keys(rel)
                    .await?
                    .iter()
                    .filter_map(|k| {
                        k.prefix_match(&base)
                            .map(|parts| parts.map(|p| p.as_ref().to_string()).collect::<Vec<_>>().join("/"))
                    })
                    .collect())
            }
        }
    }

    /// Removes `rel/` and everything under it; a missing directory is fine.
    pub async fn delete_dir(&self, rel: &str) -> Result<()> {
        match self {
            Storage::Local(root) => match tokio::fs::remove_dir_all(root.join(rel)).await {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(io_err("cannot delete", root.join(rel).display())(e))
                }
                _ => Ok(()),
            },
            Storage::S3 { store, .. } => {
                for key in self.list_keys(rel).await? {
                    store.delete(&key).await.map_err(self.remote("cannot delete", key.as_ref()))?;
                }
                Ok(())
            }
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn rejects_relative_and_unknown_schemes() {
        let relative = Storage::open("results").err().unwrap().to_string();
        assert!(relative.contains("\"results\"") && relative.contains("absolute"), "{relative}");
        let gcs = Storage::open("gs://bucket/x").err().unwrap().to_string();
        assert!(gcs.contains("s3://"), "{gcs}");
    }
}
