"""Paths inside a run's storage: `<storage_path>/<name>/...`, local or s3://."""

from __future__ import annotations

import functools

from oxray import _native

SNAPSHOT_FILE = "checkpoint_manager_snapshot.json"
VALIDATE_MARKER = ".validate_storage_marker"


def check_name(what: str, name: str) -> None:
    """A run or checkpoint directory name: one plain path component."""
    if (
        not isinstance(name, str)
        or not name
        or name in (".", "..", SNAPSHOT_FILE, VALIDATE_MARKER)
        or any(c in name for c in "/\\\0")
    ):
        raise ValueError(
            f"{what}: {name!r} is not a plain directory name (it must not be '.' or '..' or contain '/' or '\\')"
        )


def join(root: str, *parts: str) -> str:
    return "/".join([root.rstrip("/"), *[p.strip("/") for p in parts if p]])


def is_remote(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


@functools.lru_cache(maxsize=64)
def open_storage(uri: str) -> "_native.Storage":
    """The native storage client for a root (cached: an S3 client keeps its connections)."""
    return _native.Storage(uri)


class RunStorage:
    """The experiment directory of one run and the files in it."""

    def __init__(self, storage_path: str, name: str):
        self.storage_path = storage_path
        self.name = name
        self.root = open_storage(storage_path)

    @property
    def experiment_fs_path(self) -> str:
        return join(self.storage_path, self.name)

    def checkpoint_path(self, dir_name: str) -> str:
        return join(self.storage_path, self.name, dir_name)

    def validate(self) -> None:
        """Writes the marker file, so an unwritable storage path fails before training starts."""
        try:
            self.root.write_bytes(f"{self.name}/{VALIDATE_MARKER}", b"")
        except OSError as e:
            raise ValueError(
                f"RunConfig(storage_path={self.storage_path!r}) cannot be written: {e}. "
                "Pass a writable local/NFS directory or an s3://bucket/prefix the AWS credentials can write."
            ) from None

    def check_shared(self) -> None:
        """In a worker: the driver's marker must be visible, or this node does
        not share the storage path (a local disk instead of NFS)."""
        if self.root.read_bytes(f"{self.name}/{VALIDATE_MARKER}") is None:
            import socket

            raise RuntimeError(
                f"The storage path {self.experiment_fs_path!r} is not shared with this node ({socket.gethostname()}): "
                f"{VALIDATE_MARKER}, written by the driver, is missing here. Use a shared file system (NFS) or s3://."
            )

    def upload_checkpoint(self, local_dir: str, dir_name: str) -> int:
        return self.root.upload_dir(local_dir, f"{self.name}/{dir_name}")

    def delete_checkpoint(self, dir_name: str) -> None:
        self.root.delete_dir(f"{self.name}/{dir_name}")

    def read_snapshot(self) -> bytes | None:
        return self.root.read_bytes(f"{self.name}/{SNAPSHOT_FILE}")

    def write_snapshot(self, data: bytes) -> None:
        self.root.write_bytes(f"{self.name}/{SNAPSHOT_FILE}", data)
