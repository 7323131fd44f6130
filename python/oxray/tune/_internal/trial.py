"""A trial as the driver loop and callbacks see it (Ray's `Trial`): its id,
name, config, directory, status and results."""

from __future__ import annotations

import os
from typing import Optional

from oxray.train._checkpoint import Checkpoint


class Trial:
    def __init__(self, index, trial_id, trainable_name, config, evaluated_params, experiment_tag, resources):
        self.index = index
        self.trial_id = trial_id
        self.trainable_name = trainable_name
        self.config = config
        self.evaluated_params = evaluated_params
        self.experiment_tag = experiment_tag
        self.resources = resources
        self.status = "PENDING"
        self.custom_trial_name: Optional[str] = None
        self.local_path: Optional[str] = None
        self.last_result: dict = {}
        self.results: list = []
        self.checkpoints: list = []  # (Checkpoint, metrics), oldest first
        self.checkpoint_index = 0
        self.num_failures = 0
        self.error = None
        self.error_file: Optional[str] = None
        self.actor = None
        self.future = None
        self.run_started = 0.0

    @property
    def path(self) -> Optional[str]:
        return self.local_path

    @property
    def iteration(self) -> int:
        return int(self.last_result.get("training_iteration", 0) or 0)

    @property
    def time_total(self) -> float:
        return float(self.last_result.get("time_total_s", 0.0) or 0.0)

    @property
    def checkpoint(self) -> Optional[Checkpoint]:
        return self.checkpoints[-1][0] if self.checkpoints else None

    @property
    def trial_name(self) -> str:
        return self.custom_trial_name or f"{self.trainable_name}_{self.trial_id}"

    def __str__(self):
        return self.trial_name

    def __repr__(self):
        return self.trial_name

    def to_state(self) -> dict:
        """What the experiment state file keeps of it."""
        from oxray.tune.callback import _jsonable

        return {
            "trial_id": self.trial_id,
            "trainable_name": self.trainable_name,
            "trial_name": self.trial_name,
            "config": _jsonable(self.config),
            "evaluated_params": _jsonable({"/".join(map(str, k)): v for k, v in self.evaluated_params.items()}),
            "experiment_tag": self.experiment_tag,
            "status": self.status,
            "resources": self.resources,
            "local_path": self.local_path,
            "relative_logdir": os.path.basename(self.local_path or ""),
            "num_failures": self.num_failures,
            "error_file": self.error_file,
            "checkpoint_dir_names": [os.path.basename(c.path) for c, _ in self.checkpoints],
            "checkpoint_index": self.checkpoint_index,
            "last_result": _jsonable(self.last_result),
        }
