"""`Result`: what `fit()` returns."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional

from oxray.train._checkpoint import Checkpoint


@dataclass
class Result:
    metrics: Optional[dict]
    checkpoint: Optional[Checkpoint]
    error: Optional[BaseException]
    path: str
    best_checkpoints: list = field(default_factory=list)
    return_value: Any = None
    _metrics_history: list = field(default_factory=list, repr=False)

    @property
    def metrics_dataframe(self):
        """The metrics of the retained checkpointed reports, one row each (pandas)."""
        import pandas as pd

        return pd.DataFrame(self._metrics_history)

    @property
    def filesystem(self):
        """The pyarrow filesystem the run's directory is on (Ray's)."""
        from oxray.train._internal.storage import pyarrow_filesystem

        return pyarrow_filesystem(self.path)

    def get_best_checkpoint(self, metric: str, mode: str) -> Optional[Checkpoint]:
        """The retained checkpoint with the best `metric` (a `/`-separated path reaches into nested
        metrics), by `mode` ("max" or "min"); Ray's errors, in Ray's words."""
        if not self.best_checkpoints:
            raise RuntimeError("No checkpoint exists in the trial directory!")
        if mode not in ("max", "min"):
            raise ValueError(f'Unsupported mode: {mode}. Please choose from ["min", "max"]!')
        from oxray.train._internal.checkpoint_manager import metric_value

        scored = [
            (value, c)
            for c, m in self.best_checkpoints
            if isinstance(value := metric_value(m, metric), (int, float)) and not isinstance(value, bool)
        ]
        if not scored:
            raise RuntimeError(
                f"Invalid metric name {metric}! "
                f"You may choose from the following metrics: {(self.metrics or {}).keys()}."
            )
        pick = max if mode == "max" else min
        return pick(scored, key=lambda t: t[0])[1]

    @classmethod
    def from_path(cls, path, storage_filesystem=None) -> "Result":
        """The result of a finished run, read from its directory: a local path or an s3:// URI
        (str or PathLike; S3 options as a ?query), or a path on `storage_filesystem` (pyarrow)."""
        import os

        from oxray.train._internal.storage import SNAPSHOT_FILE, join, open_storage, resolve

        path = resolve(path, storage_filesystem, "Result.from_path(storage_filesystem=...)")
        if "://" not in path:
            path = os.path.abspath(path)

        storage = open_storage(path)
        raw = storage.read_bytes(SNAPSHOT_FILE)
        if raw is None:
            exists = os.path.isdir(path) if "://" not in path else bool(storage.list(""))
            if not exists:
                raise RuntimeError(f"Trial folder {path} doesn't exist!")  # Ray's error and words
            raise RuntimeError(f"Result.from_path({path!r}): no {SNAPSHOT_FILE} there; is it a train run directory?")
        snap = json.loads(raw)
        results = snap.get("checkpoint_results") or []
        latest = snap.get("latest_checkpoint_result")
        best = [(Checkpoint(join(path, r["checkpoint_dir_name"])), r["metrics"]) for r in results]
        return cls(
            metrics=latest["metrics"] if latest else None,
            checkpoint=Checkpoint(join(path, latest["checkpoint_dir_name"])) if latest else None,
            error=None,
            path=path,
            best_checkpoints=best,
            _metrics_history=[r["metrics"] for r in results],
        )

    def __repr__(self):
        filesystem = "s3" if "://" in self.path else "local"
        return (
            f"Result(metrics={self.metrics}, path={self.path!r}, "
            f"filesystem='{filesystem}', checkpoint={self.checkpoint})"
        )
