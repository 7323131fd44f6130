"""A trial as the driver loop and callbacks see it (Ray's `Trial`): its id,
name, config, directory, status and results."""

from __future__ import annotations

import os
from typing import Optional

from oxray.train._checkpoint import Checkpoint


class Trial:
    # Ray's statuses, as schedulers of the user's own compare them (`trial.status == Trial.PAUSED`).
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    TERMINATED = "TERMINATED"
    ERROR = "ERROR"

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
        # The driver's copy of its directory, and where its files end up (the same unless the
        # experiment is remote: then its s3:// prefix, where its checkpoints are too).
        self.local_path: Optional[str] = None
        self.fs_path: Optional[str] = None
        self.last_result: dict = {}
        self.results: list = []
        self.checkpoints: list = []  # (Checkpoint, metrics), oldest first
        self.checkpoint_index = 0
        self.num_failures = 0
        self.error = None
        self.error_file: Optional[str] = None
        self.actor = None
        self.actor_key: Optional[str] = None
        self.future = None
        # Whether its resources are Tune's default, its placement group's (bundles, strategy) when it
        # asks for several bundles, and that group while it runs.
        self.learns_demand = False
        self.placement = None
        self.group = None
        self.run_started = 0.0
        self._pickled = None
        self._state_json = None

    @classmethod
    def from_state(cls, state: dict, storage) -> "Trial":
        """The trial as a restored experiment's state file and directory say; its results are read
        back from its `result.json` (a line cut short by a kill is dropped)."""
        import base64
        import json

        from oxray import cloudpickle

        pickled = cloudpickle.loads(base64.b64decode(state["pickled"]))
        trial = cls(
            state["index"],
            state["trial_id"],
            state["trainable_name"],
            pickled["config"],
            pickled["evaluated_params"],
            state["experiment_tag"],
            state["resources"],
        )
        if state["trial_name"] != f"{trial.trainable_name}_{trial.trial_id}":
            trial.custom_trial_name = state["trial_name"]
        trial.local_path = os.path.join(storage.local_path, state["relative_logdir"])
        trial.fs_path = storage.trial_path(state["relative_logdir"])
        trial.status = state["status"]
        trial.num_failures = state["num_failures"]
        trial.error_file = state["error_file"]
        results_file = os.path.join(trial.local_path, "result.json")
        if os.path.exists(results_file):
            with open(results_file) as f:
                for line in f:
                    try:
                        trial.results.append(json.loads(line))
                    except ValueError:
                        break
        # Its results may be ahead of the state file: they say what it reported last, and which
        # checkpoints it has (those still on disk; num_to_keep removed the others).
        trial.last_result = trial.results[-1] if trial.results else {}
        for result in trial.results:
            name = result.get("checkpoint_dir_name")
            if name:
                trial.checkpoint_index += 1
                path = storage.checkpoint_path(state["relative_logdir"], name)
                if storage.checkpoint_exists(path):
                    trial.checkpoints.append((Checkpoint(path), {k: v for k, v in result.items() if k != "config"}))
        return trial

    @property
    def path(self) -> Optional[str]:
        """Ray's `Trial.path`: where its files end up."""
        return self.fs_path or self.local_path

    @property
    def iteration(self) -> int:
        return int(self.last_result.get("training_iteration", 0) or 0)

    @property
    def time_total(self) -> float:
        return float(self.last_result.get("time_total_s", 0.0) or 0.0)

    def has_checkpoint(self) -> bool:
        return bool(self.checkpoints)

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

    def state_json(self) -> str:
        """`to_state()` as JSON, made again only when the trial changed: the experiment state is
        written at every trial's end, and most trials have not changed since the last write."""
        import json

        key = (
            self.status,
            len(self.results),
            id(self.last_result),
            self.last_result.get("done"),
            self.num_failures,
            self.checkpoint_index,
            len(self.checkpoints),
            self.error_file,
            id(self.config),
            self.custom_trial_name,
        )
        if self._state_json is None or self._state_json[0] != key:
            self._state_json = (key, json.dumps(self.to_state()))
        return self._state_json[1]

    def to_state(self) -> dict:
        """What the experiment state file keeps of it (the config also pickled, for a restore)."""
        import base64

        from oxray import cloudpickle
        from oxray.tune.callback import _jsonable

        # Pickled once per config (a PBT exploit changes it): the state is written at every trial's end.
        if self._pickled is None or self._pickled[0] is not self.config:
            blob = cloudpickle.dumps({"config": self.config, "evaluated_params": self.evaluated_params})
            self._pickled = (self.config, base64.b64encode(blob).decode(), _jsonable(self.config))
        return {
            "index": self.index,
            "pickled": self._pickled[1],
            "trial_id": self.trial_id,
            "trainable_name": self.trainable_name,
            "trial_name": self.trial_name,
            "config": self._pickled[2],
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
