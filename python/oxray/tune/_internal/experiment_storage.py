"""Where an experiment's files live (Ray's `StorageContext`, for Tune): a local
or shared directory, or an s3:// prefix. With S3 the driver writes its own
files (experiment state, `tuner.pkl`, the searcher's state, each trial's
`params.json`, `result.json`, `progress.csv`) in a private staging directory
and uploads what changed at each state write (every 10 s, at each trial's end)
and at the end; a trial uploads its checkpoints straight to the bucket from
its own node, so trials on other nodes need no shared file system."""

from __future__ import annotations

import datetime
import os
import shutil
import tempfile

from oxray.train._checkpoint import Checkpoint
from oxray.train._internal.storage import VALIDATE_MARKER, is_remote, join, open_storage
from oxray.tune._internal.files import make_private_dirs, write_atomically


def _staging_root() -> str:
    """A fresh private directory for a remote experiment's driver files: in the session's directory
    when there is one (it goes with the session, as Ray's driver staging does)."""
    from oxray._private.api import STATE

    session_dir = (getattr(STATE, "address_info", None) or {}).get("session_dir")
    if session_dir and os.path.isdir(session_dir):
        root = os.path.join(session_dir, "artifacts", datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S_%f"))
        make_private_dirs(root)
        return root
    return tempfile.mkdtemp(prefix="oxray-tune-")


def _is_checkpoint(rel: str) -> bool:
    return any(part.startswith("checkpoint_") for part in rel.split("/")[:-1])


class ExperimentStorage:
    def __init__(self, storage_path: str, name: str):
        self.name = name
        if is_remote(storage_path):
            self.uri = join(storage_path, name)
            self.local_path = os.path.join(_staging_root(), name)
        else:
            self.uri = None
            self.local_path = os.path.join(os.path.abspath(os.path.expanduser(storage_path)), name)
        # rel path -> (mtime_ns, size) of what was last uploaded.
        self._uploaded: dict = {}

    @property
    def remote(self) -> bool:
        return self.uri is not None

    @property
    def experiment_path(self) -> str:
        """Where users find the experiment (Ray's `experiment_fs_path`)."""
        return self.uri or self.local_path

    def trial_path(self, trial_dir_name: str) -> str:
        """Where a trial's files and checkpoints end up."""
        return join(self.uri, trial_dir_name) if self.remote else os.path.join(self.local_path, trial_dir_name)

    def checkpoint_path(self, trial_dir_name: str, checkpoint_dir_name: str) -> str:
        return join(self.trial_path(trial_dir_name), checkpoint_dir_name)

    def prepare(self) -> None:
        """Makes the directories and the storage marker: a storage path that cannot be written fails
        here, before any trial starts, naming the path."""
        make_private_dirs(self.local_path)
        marker = os.path.join(self.local_path, VALIDATE_MARKER)
        os.close(os.open(marker, os.O_CREAT | os.O_WRONLY, 0o600))
        if self.remote:
            try:
                open_storage(self.uri).write_bytes(VALIDATE_MARKER, b"")
            except OSError as e:
                raise ValueError(
                    f"RunConfig(storage_path=...) {self.uri!r} cannot be written: {e}. Pass a writable local/NFS "
                    "directory or an s3://bucket/prefix the AWS credentials can write."
                ) from None

    def sync_up(self) -> None:
        """Uploads the driver's files that changed since the last upload (nothing for a local experiment)."""
        if not self.remote:
            return
        storage = open_storage(self.uri)
        for directory, _, files in os.walk(self.local_path):
            for name in files:
                if name.startswith(".") and name.endswith(".tmp"):  # an atomic write under way
                    continue
                path = os.path.join(directory, name)
                rel = os.path.relpath(path, self.local_path).replace(os.sep, "/")
                try:
                    stat = os.stat(path)
                except FileNotFoundError:  # replaced between the walk and now; the next sync takes it
                    continue
                seen = (stat.st_mtime_ns, stat.st_size)
                if self._uploaded.get(rel) == seen:
                    continue
                with open(path, "rb") as f:
                    storage.write_bytes(rel, f.read())
                self._uploaded[rel] = seen

    def checkpoint_exists(self, path: str) -> bool:
        if is_remote(path):
            return bool(open_storage(path).list(""))
        return os.path.isdir(path)

    def delete_checkpoint(self, path: str) -> None:
        if is_remote(path):
            open_storage(path).delete_dir("")
        else:
            shutil.rmtree(path, ignore_errors=True)

    def copy_checkpoint(self, source: str, target: str) -> None:
        """PBT's clone: `source`'s files become `target` (both in this experiment)."""
        if not is_remote(target):
            shutil.copytree(source, target, dirs_exist_ok=True)
            return
        with Checkpoint(source).as_directory() as local:
            open_storage(target).upload_dir(local, "")

    @staticmethod
    def exists(uri: str) -> bool:
        """Whether a remote experiment has its `tuner.pkl`."""
        return open_storage(uri).read_bytes("tuner.pkl") is not None

    def download(self) -> None:
        """Fetches a remote experiment's driver files (not its checkpoints, which stay in the bucket)
        into the staging directory, for a restore."""
        storage = open_storage(self.uri)
        make_private_dirs(self.local_path)
        for rel in storage.list(""):
            if _is_checkpoint(rel):
                continue
            data = storage.read_bytes(rel)
            if data is None:  # deleted since the listing
                continue
            path = os.path.join(self.local_path, *rel.split("/"))
            make_private_dirs(os.path.dirname(path))
            write_atomically(path, data)
            stat = os.stat(path)
            self._uploaded[rel] = (stat.st_mtime_ns, stat.st_size)
