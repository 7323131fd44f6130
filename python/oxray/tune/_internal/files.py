"""Writing the experiment directory: state files atomically (a unique temp
file, fsync, rename, fsync of the directory), so a killed driver never leaves
a truncated `tuner.pkl` or experiment state; everything private to the user."""

from __future__ import annotations

import os
import uuid


def make_private_dirs(path: str) -> None:
    os.makedirs(path, mode=0o700, exist_ok=True)


def write_atomically(path: str, data: bytes) -> None:
    directory = os.path.dirname(path) or "."
    temp = os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_private(path: str, data: bytes) -> None:
    """A file only the user can read, written in place (no state: nothing reads it back to resume)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def append_private(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "ab") as f:
        f.write(data)
