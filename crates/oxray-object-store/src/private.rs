//! Directories and files only their owner can read: object data, spill files and
//! logs must not be readable by other local users, whatever the process's umask.

use std::fs::{DirBuilder, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Creates `path` and any missing parents as 0700, and makes `path` itself 0700
/// if it already existed.
pub fn create_private_dir_all(path: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(path)?;
    std::fs::set_permissions(path, Permissions::from_mode(0o700))
}

/// Options that create a file as 0600 (the umask can only narrow that).
pub fn private_file_options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.mode(0o600);
    options
}

/// Writes `data` to a new or truncated 0600 file at `path`.
pub fn write_private_file(path: &Path, data: &[u8]) -> io::Result<()> {
    use std::io::Write;
    private_file_options().write(true).create(true).truncate(true).open(path)?.write_all(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn dirs_and_files_get_no_group_or_other_bits_under_any_umask() {
        let root = std::env::temp_dir().join(format!("oxray-private-test-{}", std::process::id()));
        // SAFETY: umask only changes this process's file creation mask.
        let old = unsafe { libc::umask(0) };
        let nested = root.join("a/b");
        create_private_dir_all(&nested).unwrap();
        write_private_file(&nested.join("f"), b"x").unwrap();
        // SAFETY: as above, restoring the previous mask.
        unsafe { libc::umask(old) };
        for path in [root.clone(), root.join("a"), nested.clone(), nested.join("f")] {
            let mode = std::fs::metadata(&path).unwrap().mode() & 0o777;
            assert_eq!(mode & 0o077, 0, "{} is {mode:o}", path.display());
        }
        std::fs::set_permissions(&nested, Permissions::from_mode(0o755)).unwrap();
        create_private_dir_all(&nested).unwrap();
        assert_eq!(std::fs::metadata(&nested).unwrap().mode() & 0o777, 0o700);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
