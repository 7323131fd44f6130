//! Uploaded `working_dir` packages (`PUT /api/packages/gcs/<name>`): stored
//! under the head's state directory, and unpacked once per package into the
//! session's `runtime_resources/working_dir_files/`, refusing entries that
//! would land outside it (absolute paths, `..`, symlinks) and archives that
//! unpack to more than [`MAX_UNPACKED_BYTES`].

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use zip::result::ZipError;

/// The biggest upload accepted (Ray's HTTP limit).
pub const MAX_PACKAGE_BYTES: usize = 100 << 20;
/// The most an archive may unpack to.
pub const MAX_UNPACKED_BYTES: u64 = 4 << 30;

/// Why an uploaded package's name or archive is refused, or could not be unpacked.
#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    #[error("package protocol {protocol:?} is not supported: expected \"gcs\"")]
    Protocol { protocol: String },
    #[error("package name {name:?} is invalid: expected a file name such as _ray_pkg_<hash>.zip")]
    Name { name: String },
    #[error("working_dir {uri:?}: expected an uploaded package (gcs://...) or a directory")]
    NotAPackage { uri: String },
    #[error("the package is not a valid zip archive: {0}")]
    NotAZip(#[source] ZipError),
    #[error("the package is corrupt: {0}")]
    Corrupt(#[source] ZipError),
    #[error("package entry {name:?} is a symlink: refused (it could point outside the working_dir)")]
    Symlink { name: String },
    #[error("package entry {name:?} would unpack outside the working_dir: refused")]
    Escapes { name: String },
    #[error("the package unpacks to more than {} GiB: refused", MAX_UNPACKED_BYTES >> 30)]
    TooLarge,
    #[error("cannot open package {}: {source}", .path.display())]
    Open { path: PathBuf, source: std::io::Error },
    #[error("cannot create {}: {source}", .path.display())]
    Create { path: PathBuf, source: std::io::Error },
    #[error("package entry {name:?} is corrupt: {source}")]
    EntryCorrupt { name: String, source: std::io::Error },
    #[error("cannot write {}: {source}", .path.display())]
    Write { path: PathBuf, source: std::io::Error },
    #[error("cannot move the unpacked package: {0}")]
    Move(#[source] std::io::Error),
}

/// Checks `protocol`/`name` from the URL: Ray's clients upload to `gcs`, with a plain file name.
pub fn package_key(protocol: &str, name: &str) -> Result<String, PackageError> {
    if protocol != "gcs" {
        return Err(PackageError::Protocol { protocol: protocol.to_string() });
    }
    let plain = !name.is_empty()
        && !name.starts_with('.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if !plain {
        return Err(PackageError::Name { name: name.to_string() });
    }
    Ok(format!("gcs_{name}"))
}

/// The package file a `gcs://<name>` URI names.
pub fn package_path(dir: &Path, uri: &str) -> Result<PathBuf, PackageError> {
    let name = uri.strip_prefix("gcs://").ok_or_else(|| PackageError::NotAPackage { uri: uri.to_string() })?;
    Ok(dir.join(package_key("gcs", name)?))
}

/// Checks an uploaded archive before it is stored: a zip whose every entry
/// stays inside its directory, with no symlinks, unpacking to at most
/// [`MAX_UNPACKED_BYTES`] (as its entries declare; unpacking counts again).
pub fn check_zip(data: &[u8]) -> Result<(), PackageError> {
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(data)).map_err(PackageError::NotAZip)?;
    let mut declared = 0u64;
    for i in 0..zip.len() {
        let entry = zip.by_index(i).map_err(PackageError::Corrupt)?;
        let name = entry.name().to_string();
        if entry.is_symlink() {
            return Err(PackageError::Symlink { name });
        }
        if entry.enclosed_name().is_none() {
            return Err(PackageError::Escapes { name });
        }
        declared += entry.size();
        if declared > MAX_UNPACKED_BYTES {
            return Err(PackageError::TooLarge);
        }
    }
    Ok(())
}

/// Unpacks the zip `archive` into `target` (made here; its parent must exist).
/// Unpacks into a temporary directory first, so a failed unpack leaves nothing.
pub fn unpack_zip(archive: &Path, target: &Path) -> Result<(), PackageError> {
    let file =
        std::fs::File::open(archive).map_err(|source| PackageError::Open { path: archive.to_path_buf(), source })?;
    let mut zip = zip::ZipArchive::new(file).map_err(PackageError::NotAZip)?;
    let staging = target.with_extension("unpacking");
    let _ = std::fs::remove_dir_all(&staging);
    oxray_object_store::create_private_dir_all(&staging)
        .map_err(|source| PackageError::Create { path: staging.clone(), source })?;
    let result = (|| {
        let mut written = 0u64;
        for i in 0..zip.len() {
            let mut entry = zip.by_index(i).map_err(PackageError::Corrupt)?;
            let name = entry.name().to_string();
            if entry.is_symlink() {
                return Err(PackageError::Symlink { name });
            }
            let Some(relative) = entry.enclosed_name() else { return Err(PackageError::Escapes { name }) };
            let path = staging.join(relative);
            if entry.is_dir() {
                std::fs::create_dir_all(&path).map_err(|source| PackageError::Create { path: path.clone(), source })?;
                continue;
            }
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|source| PackageError::Create { path: parent.to_path_buf(), source })?;
            }
            let mut out =
                std::fs::File::create(&path).map_err(|source| PackageError::Create { path: path.clone(), source })?;
            let mut buf = vec![0u8; 64 << 10];
            loop {
                let n =
                    entry.read(&mut buf).map_err(|source| PackageError::EntryCorrupt { name: name.clone(), source })?;
                if n == 0 {
                    break;
                }
                written += n as u64;
                if written > MAX_UNPACKED_BYTES {
                    return Err(PackageError::TooLarge);
                }
                out.write_all(&buf[..n]).map_err(|source| PackageError::Write { path: path.clone(), source })?;
            }
            if let Some(mode) = entry.unix_mode() {
                use std::os::unix::fs::PermissionsExt;
                let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode & 0o700));
            }
        }
        Ok(())
    })();
    match result {
        Ok(()) => std::fs::rename(&staging, target).map_err(PackageError::Move),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zip::write::SimpleFileOptions;

    fn archive(dir: &Path, entries: &[(&str, &[u8])]) -> PathBuf {
        let path = dir.join("pkg.zip");
        let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
        for (name, data) in entries {
            zip.start_file(*name, SimpleFileOptions::default()).unwrap();
            zip.write_all(data).unwrap();
        }
        zip.finish().unwrap();
        path
    }

    #[test]
    fn a_package_unpacks_into_its_own_directory() {
        let dir = tempfile::tempdir().unwrap();
        let zip = archive(dir.path(), &[("script.py", b"print(1)"), ("sub/data.txt", b"x")]);
        let target = dir.path().join("out");
        unpack_zip(&zip, &target).unwrap();
        assert_eq!(std::fs::read(target.join("script.py")).unwrap(), b"print(1)");
        assert_eq!(std::fs::read(target.join("sub/data.txt")).unwrap(), b"x");
    }

    #[test]
    fn entries_escaping_the_directory_are_refused_and_nothing_is_left() {
        let dir = tempfile::tempdir().unwrap();
        for evil in ["../escape.txt", "/etc/evil.txt"] {
            let zip = archive(dir.path(), &[("ok.txt", b"1"), (evil, b"bad")]);
            let target = dir.path().join("out");
            let err = unpack_zip(&zip, &target).unwrap_err().to_string();
            assert!(err.contains("outside the working_dir"), "{err}");
            assert!(!target.exists() && !target.with_extension("unpacking").exists());
        }
        assert!(!dir.path().parent().unwrap().join("escape.txt").exists());
    }

    #[test]
    fn symlinks_and_garbage_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("link.zip");
        let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
        zip.add_symlink("link", "/etc/passwd", SimpleFileOptions::default()).unwrap();
        zip.finish().unwrap();
        assert!(unpack_zip(&path, &dir.path().join("out")).unwrap_err().to_string().contains("symlink"));
        let garbage = dir.path().join("garbage.zip");
        std::fs::write(&garbage, b"not a zip").unwrap();
        assert!(unpack_zip(&garbage, &dir.path().join("out2")).unwrap_err().to_string().contains("not a valid zip"));
    }

    #[test]
    fn uploads_are_checked_before_they_are_stored() {
        let dir = tempfile::tempdir().unwrap();
        let good = std::fs::read(archive(dir.path(), &[("a.py", b"1")])).unwrap();
        assert!(check_zip(&good).is_ok());
        let evil = std::fs::read(archive(dir.path(), &[("../../x", b"1")])).unwrap();
        assert!(check_zip(&evil).unwrap_err().to_string().contains("outside the working_dir"));
        assert!(check_zip(b"PK not really").unwrap_err().to_string().contains("not a valid zip"));
    }

    #[test]
    fn package_names_are_plain_file_names() {
        assert_eq!(package_key("gcs", "_ray_pkg_abc.zip").unwrap(), "gcs__ray_pkg_abc.zip");
        assert!(package_key("gcs", "../x").is_err());
        assert!(package_key("s3", "x.zip").is_err());
        assert!(package_path(Path::new("/d"), "s3://bucket/x.zip").is_err());
    }
}
