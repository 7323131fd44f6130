"""`Checkpoint`: a directory of files, local or in S3."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from typing import Iterator, Optional

from oxray.train._internal.storage import (
    is_remote,
    open_storage,
    options_for,
    pyarrow_filesystem,
    resolve,
)

_METADATA_FILE = ".metadata.json"


class Checkpoint:
    """A reference to a checkpoint directory: `Checkpoint(path)` with a local
    path or an `s3://bucket/key` URI."""

    def __init__(self, path, filesystem=None):
        path = resolve(path, filesystem, "Checkpoint(filesystem=...)")
        if path.startswith("file://"):
            path = path[len("file://") :]
        self.path = path if is_remote(path) else os.path.abspath(path)
        self._storage_options = options_for(self.path)

    @property
    def filesystem(self):
        """The pyarrow filesystem the checkpoint is on (Ray's)."""
        return pyarrow_filesystem(self.path)

    @classmethod
    def from_directory(cls, path) -> "Checkpoint":
        path = os.fspath(path)
        if not is_remote(path) and not os.path.isdir(path):
            raise ValueError(f"Checkpoint.from_directory({path!r}): not a directory")
        return cls(path)

    @property
    def _is_remote(self) -> bool:
        return is_remote(self.path)

    def to_directory(self, path: Optional[str] = None) -> str:
        """Copies the checkpoint's files into `path` (a new temporary directory by default)."""
        dest = os.fspath(path) if path is not None else tempfile.mkdtemp(prefix="oxray-checkpoint-")
        os.makedirs(dest, exist_ok=True)
        if self._is_remote:
            open_storage(self.path).download_dir("", dest)
        elif os.path.abspath(dest) != self.path:
            shutil.copytree(self.path, dest, dirs_exist_ok=True)
        return dest

    @contextlib.contextmanager
    def as_directory(self) -> Iterator[str]:
        """A local directory with the files: the checkpoint itself when it is
        local, else a temporary download removed afterwards."""
        if not self._is_remote:
            yield self.path
            return
        tmp = self.to_directory()
        try:
            yield tmp
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def get_metadata(self) -> dict:
        if self._is_remote:
            data = open_storage(self.path).read_bytes(_METADATA_FILE)
            return json.loads(data) if data else {}
        try:
            with open(os.path.join(self.path, _METADATA_FILE)) as f:
                return json.load(f)
        except FileNotFoundError:
            return {}

    def set_metadata(self, metadata: dict) -> None:
        data = json.dumps(metadata).encode()
        if self._is_remote:
            open_storage(self.path).write_bytes(_METADATA_FILE, data)
        else:
            with open(os.path.join(self.path, _METADATA_FILE), "wb") as f:
                f.write(data)

    def update_metadata(self, metadata: dict) -> None:
        merged = self.get_metadata()
        merged.update(metadata)
        self.set_metadata(merged)

    def __eq__(self, other):
        return isinstance(other, Checkpoint) and other.path == self.path

    def __hash__(self):
        return hash(self.path)

    def __repr__(self):
        fs = "s3" if self._is_remote else "local"
        return f"Checkpoint(filesystem={fs}, path={self.path})"

    def __reduce__(self):
        # Its S3 options travel with it, as a ?query (a worker may not have seen its run's storage).
        query = self._storage_options
        return (Checkpoint, (f"{self.path}?{query}" if query else self.path,))
