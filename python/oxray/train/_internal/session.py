"""What a training worker's code sees: `report`, `get_checkpoint`, `get_context`."""

from __future__ import annotations

import datetime
import enum
import json
import threading
from dataclasses import dataclass
from typing import Any, Optional

from oxray._private import worker_devices
from oxray.train._checkpoint import Checkpoint
from oxray.train._internal.storage import RunStorage


@dataclass
class WorkerInfo:
    world_rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int


class TrainContext:
    """`oxray.train.get_context()`."""

    def __init__(self, info: WorkerInfo, experiment_name: str, storage: RunStorage):
        self._info = info
        self._experiment_name = experiment_name
        self._storage = storage

    def get_world_size(self) -> int:
        return self._info.world_size

    def get_world_rank(self) -> int:
        return self._info.world_rank

    def get_local_rank(self) -> int:
        return self._info.local_rank

    def get_local_world_size(self) -> int:
        return self._info.local_world_size

    def get_node_rank(self) -> int:
        return self._info.node_rank

    def get_experiment_name(self) -> str:
        return self._experiment_name

    def get_trial_dir(self) -> str:
        return self._storage.experiment_fs_path

    def get_storage(self) -> RunStorage:
        return self._storage

    def __repr__(self):
        i = self._info
        return (
            f"TrainContext(world_rank={i.world_rank}, world_size={i.world_size}, "
            f"local_rank={i.local_rank}, node_rank={i.node_rank})"
        )


class Session:
    def __init__(self, context: TrainContext, sync, latest_checkpoint: Optional[Checkpoint], datasets: dict):
        self.context = context
        self.sync = sync
        self.latest_checkpoint = latest_checkpoint
        self.datasets = datasets
        self.reports = 0  # report() calls this attempt


@dataclass
class ReportedCheckpoint:
    """A reported checkpoint that retention kept, with the metrics rank 0 reported with it."""

    checkpoint: Checkpoint
    metrics: dict


_SESSION: Optional[Session] = None
_LOCK = threading.Lock()


def set_session(session: Optional[Session]) -> None:
    global _SESSION
    with _LOCK:
        _SESSION = session
        worker_devices.set_in_train_loop(session is not None)


def in_session() -> bool:
    """Whether this process is a training worker running its loop."""
    return _SESSION is not None


def get_session(fn_name: str) -> Session:
    if _SESSION is None:
        from oxray.tune import session as tune_session

        if tune_session._session is not None:
            # Ray raises here too: a Tune trial reports through Tune.
            raise RuntimeError(
                f"oxray.train.{fn_name}() was called in a Tune trial, outside a training worker: in the trial "
                f"function call ray.tune.{fn_name}() instead, or forward a Train run's reports with "
                "TuneReportCallback"
            )
        raise RuntimeError(
            f"oxray.train.{fn_name}() was called outside a training worker; call it inside train_loop_per_worker"
        )
    return _SESSION


def _plain(value: Any):
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item) and getattr(value, "ndim", 1) == 0:
        return item()
    return repr(value)


def _check_metrics(metrics) -> dict:
    if not isinstance(metrics, dict):
        raise TypeError(f"report(metrics=...) expects a dict of metrics, got {type(metrics).__name__}")
    if contains_torch_tensor(metrics):
        raise ValueError(
            "Passing objects containing Torch tensors as metrics is not supported as it will throw an exception on "
            "deserialization. Pass Python numbers instead (tensor.item(), or tensor.tolist())."
        )
    return json.loads(json.dumps(metrics, default=_plain))


def contains_torch_tensor(value, depth: int = 0) -> bool:
    """Whether a torch tensor is anywhere in `value` (through dicts, lists, tuples and sets)."""
    if type(value).__module__.startswith("torch") and hasattr(value, "dtype") and hasattr(value, "shape"):
        return True
    if depth > 100:
        return False
    if isinstance(value, dict):
        return any(contains_torch_tensor(v, depth + 1) for v in value.values())
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(contains_torch_tensor(v, depth + 1) for v in value)
    return False


def _default_dir_name() -> str:
    return "checkpoint_" + datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S.%f")


class CheckpointUploadMode(enum.Enum):
    """How `report` gets a checkpoint into storage: copied before `report`
    returns (SYNC), or already written to `<storage>/<name>/<checkpoint_dir_name>`
    by the loop itself (NO_UPLOAD). ASYNC is not supported yet."""

    SYNC = "SYNC"
    ASYNC = "ASYNC"
    NO_UPLOAD = "NO_UPLOAD"


def report(
    metrics: dict,
    checkpoint: Optional[Checkpoint] = None,
    checkpoint_dir_name: Optional[str] = None,
    checkpoint_upload_mode: CheckpointUploadMode = CheckpointUploadMode.SYNC,
    delete_local_checkpoint_after_upload: Optional[bool] = None,
    checkpoint_upload_fn=None,
    validation=False,
) -> None:
    """Reports metrics (and optionally a checkpoint) from this rank. A barrier:
    every rank calls it the same number of times."""
    from oxray._private.api import get

    session = get_session("report")
    plain = _check_metrics(metrics)
    if checkpoint is not None and not isinstance(checkpoint, Checkpoint):
        raise TypeError(f"report(checkpoint=...) expects an oxray.train.Checkpoint, got {type(checkpoint).__name__}")
    if checkpoint_dir_name is not None:
        from oxray.train._internal.storage import check_name

        check_name("report(checkpoint_dir_name=...)", checkpoint_dir_name)
    mode = CheckpointUploadMode(getattr(checkpoint_upload_mode, "value", checkpoint_upload_mode) or "SYNC")
    if mode is CheckpointUploadMode.ASYNC:
        raise ValueError("report(checkpoint_upload_mode=ASYNC) is not supported by oxray yet; use SYNC (the default)")
    if mode is CheckpointUploadMode.NO_UPLOAD and checkpoint_dir_name is None:
        raise ValueError(
            "report(checkpoint_upload_mode=NO_UPLOAD) needs checkpoint_dir_name: "
            "the directory the loop wrote under the run"
        )
    if checkpoint_upload_fn is not None or validation:
        raise ValueError("report(checkpoint_upload_fn=..., validation=...) are not supported by oxray yet")
    rank = session.context.get_world_rank()
    # Rank 0 names the directory that every rank's files go into.
    proposed = (checkpoint_dir_name or _default_dir_name()) if rank == 0 else None
    dir_name = get(session.sync.barrier.remote(rank, proposed))[0]
    if checkpoint is not None and mode is CheckpointUploadMode.SYNC:
        storage = session.context.get_storage()
        with checkpoint.as_directory() as local:
            storage.upload_checkpoint(local, dir_name)
        if delete_local_checkpoint_after_upload and not checkpoint._is_remote:
            import shutil

            shutil.rmtree(checkpoint.path, ignore_errors=True)
    # Second barrier: all files are in place; the controller registers the report.
    gave = get(session.sync.report.remote(rank, plain, dir_name, checkpoint is not None))
    session.reports += 1
    if gave:
        session.latest_checkpoint = Checkpoint(session.context.get_storage().checkpoint_path(dir_name))


def get_checkpoint() -> Optional[Checkpoint]:
    """The latest checkpoint reported in this run (or the run it resumes), or None."""
    return get_session("get_checkpoint").latest_checkpoint


def get_all_reported_checkpoints(consistency_mode=None) -> list:
    """Every checkpoint reported so far in this run (earlier attempts', and a resumed
    run's, included) that retention still keeps, oldest first, as `ReportedCheckpoint`s.
    Waits until the controller has registered every report this worker made."""
    from oxray._private.api import get

    if consistency_mode is not None:
        raise NotImplementedError(
            f"get_all_reported_checkpoints(consistency_mode={consistency_mode!r}) is not supported by oxray: "
            "checkpoints are returned once the controller has registered them"
        )
    session = get_session("get_all_reported_checkpoints")
    storage = session.context.get_storage()
    kept = get(session.sync.reported_checkpoints.remote(session.reports))
    return [ReportedCheckpoint(Checkpoint(storage.checkpoint_path(name)), metrics) for name, metrics in kept]


def get_context() -> TrainContext:
    return get_session("get_context").context


def get_dataset_shard(dataset_name: Optional[str] = None):
    session = get_session("get_dataset_shard")
    if dataset_name not in session.datasets:
        raise KeyError(
            f"get_dataset_shard({dataset_name!r}): no such dataset; the trainer was given {sorted(session.datasets)}"
        )
    return session.datasets[dataset_name]
