"""What an experiment tells the head, for the dashboard's Tune pages and the
`oxray_tune_*` series of `/metrics`: its state (status, search settings, every
trial with the parameters it tries, its status, last metrics and error) and
each trial result's numeric metrics. Sent at most once a second while the
experiment runs (a change is sent within the second: the driver loop's wait
ends when it is due), and once when it ends; a failure to reach the head is logged
once and never stops the experiment."""

from __future__ import annotations

import json
import math
import os
import sys
import time

from oxray.tune.callback import _jsonable
from oxray.tune.search.variant_generator import flatten

SEND_PERIOD_S = 1.0
# Metrics kept per result at most: what the charts can offer, and a bound on what one result costs.
MAX_METRICS = 100
# Results held while the head cannot be reached, the newest kept.
MAX_UNSENT = 20_000
# Bookkeeping in every result that no chart needs.
_NOT_METRICS = ("pid", "timestamp", "done", "trial_id")


def _metrics(flat: dict) -> dict:
    """A flattened result's finite numbers, its config left out."""
    out = {}
    for key, value in flat.items():
        if key.startswith("config/") or key in _NOT_METRICS or isinstance(value, bool):
            continue
        if isinstance(value, (int, float)) and math.isfinite(value):
            out[key] = value
            if len(out) == MAX_METRICS:
                break
    return out


def _params(trial) -> dict:
    """The values the trial tries, by `/`-joined path: what its config holds now (PBT changes it)."""
    out = {}
    for path, sampled in trial.evaluated_params.items():
        value = trial.config
        for part in path:
            value = value.get(part, sampled) if isinstance(value, dict) else sampled
        value = _jsonable(value)
        out["/".join(map(str, path))] = value if isinstance(value, (int, float, str, bool)) else json.dumps(value)
    return out


def _error(trial) -> str:
    if trial.error is None:
        return ""
    return f"{type(trial.error).__name__}: {trial.error}"[:2000]


class ExperimentReport:
    def __init__(self, runner, experiment_id: str):
        import oxray

        self.runner = runner
        self.state = {
            "id": experiment_id,
            "name": runner.experiment_name,
            "path": runner.storage.experiment_path,
            "job_id": oxray.get_runtime_context().get_job_id(),
            "status": "RUNNING",
            "status_detail": "",
            "start_time_ns": time.time_ns(),
            "end_time_ns": None,
            "metric": runner.metric,
            "mode": runner.mode,
            "scheduler": type(runner.scheduler).__name__,
            "search_alg": type(runner.search).__name__,
            "trials": [],
        }
        self._new_results: list = []
        self._last_metrics: dict = {}
        self._last_sent = 0.0
        self._unsent = False
        self._warned = False

    def result(self, trial, result: dict, flat: dict) -> None:
        """A trial's result, and the same flattened (the driver loop flattens it once)."""
        metrics = _metrics(flat)
        self._last_metrics[trial.trial_id] = metrics
        self._new_results.append(
            {
                "trial_id": trial.trial_id,
                "iteration": result.get("training_iteration"),
                "time_ms": int(time.time() * 1000),
                "metrics": metrics,
            }
        )

    def _last(self, trial) -> dict:
        """The metrics of the trial's last result, kept from `result` (a restored trial's, once)."""
        metrics = self._last_metrics.get(trial.trial_id)
        if metrics is None:
            metrics = self._last_metrics[trial.trial_id] = _metrics(flatten(trial.last_result))
        return metrics

    def maybe_send(self) -> None:
        """Sends what changed, or leaves it for `due_in` when the last send was under a period ago."""
        if time.monotonic() - self._last_sent >= SEND_PERIOD_S:
            self.send()
        else:
            self._unsent = True

    def due_in(self):
        """Seconds until what changed is due to be sent; None when nothing waits."""
        if not self._unsent:
            return None
        return max(0.0, SEND_PERIOD_S - (time.monotonic() - self._last_sent))

    def ended(self, status: str, detail: str = "") -> None:
        self.state["status"] = status
        self.state["status_detail"] = detail
        self.state["end_time_ns"] = time.time_ns()
        self.send()

    def send(self) -> None:
        from oxray._private.api import _client

        self.state["trials"] = [
            {
                "trial_id": t.trial_id,
                "trial_name": t.trial_name,
                "status": t.status,
                "config": _params(t),
                "iterations": t.iteration,
                "last_result": self._last(t),
                "error": _error(t),
                "path": t.path,
            }
            for t in self.runner.trials
        ]
        self._last_sent = time.monotonic()
        self._unsent = False
        try:
            results = [json.dumps(r) for r in self._new_results]
            _client().update_experiment(self.state["id"], json.dumps(self.state, default=str), results)
            self._new_results.clear()
        except Exception as e:  # noqa: BLE001 - the dashboard's view must never stop an experiment
            del self._new_results[:-MAX_UNSENT]
            if not self._warned:
                self._warned = True
                print(
                    f"could not tell the head about experiment {self.state['name']!r} "
                    f"(the dashboard will lag; pid {os.getpid()}): {e}",
                    file=sys.stderr,
                    flush=True,
                )
