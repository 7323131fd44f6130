//! Files that hold one object each, in the node's shared-memory directory
//! (tmpfs) or, once spilled, on disk. Readers map them read-only, so a reader
//! keeps its pages even after the store unlinks the file.

use memmap2::{Mmap, MmapMut, MmapOptions};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    #[error("cannot create object file {path}: {source}")]
    Create { path: String, source: io::Error },
    #[error("no room for a {size}-byte object in {path}: {source}")]
    NoSpace { path: String, size: usize, source: io::Error },
    #[error("cannot map object file {path}: {source}")]
    Map { path: String, source: io::Error },
}

/// Creates `path` with `size` bytes reserved up front (so a full tmpfs is an
/// error here, not a SIGBUS later) and maps it writable.
pub fn create_object_file(path: &Path, size: usize) -> Result<MmapMut, ShmError> {
    let shown = || path.display().to_string();
    let file = crate::private_file_options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|source| ShmError::Create { path: shown(), source })?;
    if size == 0 {
        return MmapOptions::new().len(0).map_anon().map_err(|source| ShmError::Map { path: shown(), source });
    }
    // SAFETY: fd is valid for the call; posix_fallocate only reserves blocks.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, size as libc::off_t) };
    if rc != 0 {
        let _ = std::fs::remove_file(path);
        return Err(ShmError::NoSpace { path: shown(), size, source: io::Error::from_raw_os_error(rc) });
    }
    // SAFETY: the file was created by us with create_new and is not truncated
    // while mapped; other processes only map it after it is sealed.
    unsafe { MmapOptions::new().len(size).map_mut(&file) }.map_err(|source| ShmError::Map { path: shown(), source })
}

/// A read-only view of a sealed object file.
pub struct MappedObject {
    map: Option<Mmap>,
}

impl MappedObject {
    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }
}

pub fn map_object_file(path: &Path) -> Result<MappedObject, ShmError> {
    let shown = || path.display().to_string();
    let file = File::open(path).map_err(|source| ShmError::Map { path: shown(), source })?;
    let len = file.metadata().map_err(|source| ShmError::Map { path: shown(), source })?.len();
    if len == 0 {
        return Ok(MappedObject { map: None });
    }
    // SAFETY: sealed object files are never written again; the store only unlinks them.
    let map = unsafe { Mmap::map(&file) }.map_err(|source| ShmError::Map { path: shown(), source })?;
    Ok(MappedObject { map: Some(map) })
}

/// Maps a node's whole arena read-write and shared; each process does this once.
pub fn map_arena(path: &Path) -> Result<memmap2::MmapRaw, ShmError> {
    let shown = || path.display().to_string();
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|source| ShmError::Map { path: shown(), source })?;
    MmapOptions::new().map_raw(&file).map_err(|source| ShmError::Map { path: shown(), source })
}

pub fn remove_dir_if_exists(path: &Path) -> io::Result<()> {
    match std::fs::remove_dir_all(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_bytes_are_visible_through_a_read_mapping() {
        let dir = std::env::temp_dir().join(format!("oxray-shm-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("obj");
        let mut map = create_object_file(&path, 4096).unwrap();
        map[..5].copy_from_slice(b"hello");
        map.flush().unwrap();
        drop(map);
        let ro = map_object_file(&path).unwrap();
        assert_eq!(&ro.bytes()[..5], b"hello");
        // Unlinking keeps an existing mapping readable.
        std::fs::remove_file(&path).unwrap();
        assert_eq!(&ro.bytes()[..5], b"hello");
        assert!(create_object_file(&path, 1).is_ok());
        assert!(create_object_file(&path, 1).is_err(), "create_new refuses an existing file");
        remove_dir_if_exists(&dir).unwrap();
    }
}
