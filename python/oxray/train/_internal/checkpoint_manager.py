"""The run's registered checkpoints: retention and `checkpoint_manager_snapshot.json`."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Optional

from oxray import __version__
from oxray.train._checkpoint import Checkpoint
from oxray.train._internal.storage import SNAPSHOT_FILE, RunStorage, check_name
from oxray.train.config import CheckpointConfig


@dataclass
class CheckpointResult:
    dir_name: str
    metrics: dict
    report_index: int


class CheckpointManager:
    def __init__(self, storage: RunStorage, config: CheckpointConfig):
        self.storage = storage
        self.config = config
        self.results: list[CheckpointResult] = []  # retained, in report order
        self.latest: Optional[CheckpointResult] = None
        self.report_index = 0

    def load_snapshot(self) -> bool:
        """Picks up a previous run with the same name and storage path."""
        raw = self.storage.read_snapshot()
        if not raw:
            return False
        snap = json.loads(raw)
        for r in snap.get("checkpoint_results") or []:
            # A name from the file must not lead outside the run's directory.
            check_name(
                f"checkpoint_dir_name in {self.storage.experiment_fs_path}/{SNAPSHOT_FILE}", r["checkpoint_dir_name"]
            )
        indices = snap.get("checkpoint_report_indices") or []
        self.results = [
            CheckpointResult(r["checkpoint_dir_name"], r["metrics"], indices[i] if i < len(indices) else i)
            for i, r in enumerate(snap.get("checkpoint_results") or [])
        ]
        latest = snap.get("latest_checkpoint_result")
        self.latest = next((r for r in self.results if latest and r.dir_name == latest["checkpoint_dir_name"]), None)
        self.report_index = int(snap.get("current_report_index") or 0)
        return True

    def checkpoint(self, result: Optional[CheckpointResult]) -> Optional[Checkpoint]:
        return Checkpoint(self.storage.checkpoint_path(result.dir_name)) if result else None

    @property
    def latest_checkpoint(self) -> Optional[Checkpoint]:
        return self.checkpoint(self.latest)

    def on_report(self, metrics: dict, dir_name: Optional[str]) -> None:
        """A report from every rank: registers its checkpoint, if any, and applies retention."""
        self.report_index += 1
        if dir_name is None:
            return
        result = CheckpointResult(dir_name, metrics, self.report_index)
        self.results.append(result)
        self.latest = result
        dropped = self._to_delete()
        for r in dropped:
            self.results.remove(r)
        # The snapshot first: it never names a directory that is already gone.
        self.write_snapshot()
        for r in dropped:
            try:
                self.storage.delete_checkpoint(r.dir_name)
            except OSError as e:
                print(f"(oxray.train) could not delete the old checkpoint {r.dir_name}: {e}", flush=True)

    def _score(self, r: CheckpointResult) -> float:
        value = metric_value(r.metrics, self.config.checkpoint_score_attribute)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value):
            return -math.inf  # a checkpoint without the score ranks worst
        return value if self.config.checkpoint_score_order == "max" else -value

    def ranked(self) -> list[CheckpointResult]:
        """Retained results, worst to best."""
        if self.config.checkpoint_score_attribute is None:
            return list(self.results)
        return sorted(self.results, key=lambda r: (self._score(r), r.report_index))

    def _to_delete(self) -> list[CheckpointResult]:
        keep = self.config.num_to_keep
        if keep is None or len(self.results) <= keep:
            return []
        ranked = self.ranked()
        kept = set(id(r) for r in ranked[-keep:])
        kept.add(id(self.latest))  # the latest is never deleted
        return [r for r in ranked if id(r) not in kept]

    def best_checkpoints(self) -> list[tuple[Checkpoint, dict]]:
        return [(self.checkpoint(r), r.metrics) for r in self.ranked()]

    def snapshot(self) -> dict:
        latest = self.latest
        return {
            "ray_version": f"oxray-{__version__}",
            "checkpoint_results": [
                {"version": 0, "checkpoint_dir_name": r.dir_name, "metrics": r.metrics} for r in self.results
            ],
            "checkpoint_report_indices": [r.report_index for r in self.results],
            "latest_checkpoint_result": (
                {"version": 0, "checkpoint_dir_name": latest.dir_name, "metrics": latest.metrics} if latest else None
            ),
            "pending_training_results": [],
            "pending_validation_specs": [],
            "current_report_index": self.report_index,
            "validated_checkpoint_dir_names": [],
            "timed_out_validation_checkpoint_dir_names": [],
            "failed_validation_checkpoint_dir_names": [],
        }

    def write_snapshot(self) -> None:
        # Metrics are plain JSON already: report() normalized them on the worker.
        self.storage.write_snapshot(json.dumps(self.snapshot(), indent=2).encode())


def metric_value(metrics: dict, key: str):
    """A reported metric by name: a flat key, or a path into nested dicts (`"a/b"` reads
    `metrics["a"]["b"]`, as Ray does); None when absent."""
    if key in metrics:
        return metrics[key]
    value = metrics
    for part in key.split("/"):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value
