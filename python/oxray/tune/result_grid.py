"""What `Tuner.fit()` returns: a `ResultGrid` of one `Result` per trial,
errored trials included, as Ray's."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from oxray.train._checkpoint import Checkpoint

AUTO_KEYS = (
    "timestamp",
    "checkpoint_dir_name",
    "done",
    "training_iteration",
    "trial_id",
    "date",
    "time_this_iter_s",
    "time_total_s",
    "pid",
    "hostname",
    "node_ip",
    "config",
    "time_since_restore",
    "iterations_since_restore",
)


@dataclass
class Result:
    metrics: Optional[dict]
    checkpoint: Optional[Checkpoint]
    error: Optional[BaseException]
    path: str
    best_checkpoints: list = field(default_factory=list)
    _metrics_history: list = field(default_factory=list, repr=False)

    @property
    def config(self) -> Optional[dict]:
        return (self.metrics or {}).get("config")

    @property
    def metrics_dataframe(self):
        """Every result the trial reported, one row each (pandas), config keys flattened."""
        import pandas as pd

        from oxray.tune.search.variant_generator import flatten

        return pd.DataFrame([flatten(r) for r in self._metrics_history])

    def get_best_checkpoint(self, metric: str, mode: str) -> Optional[Checkpoint]:
        if mode not in ("max", "min"):
            raise ValueError(f"get_best_checkpoint(mode={mode!r}): expected 'max' or 'min'")
        scored = [(c, m[metric]) for c, m in self.best_checkpoints if isinstance(m.get(metric), (int, float))]
        if not scored:
            return None
        pick = max if mode == "max" else min
        return pick(scored, key=lambda cm: cm[1])[0]

    def __repr__(self):
        shown = {k: v for k, v in (self.metrics or {}).items() if k not in AUTO_KEYS}
        return f"Result(metrics={shown}, path={self.path!r}, checkpoint={self.checkpoint}, error={self.error!r})"


_SCOPES = ("all", "last", "avg", "last-5-avg", "last-10-avg")


class ResultGrid:
    def __init__(self, results, experiment_path: Optional[str] = None, default_metric=None, default_mode=None):
        from oxray.tune.run import ExperimentAnalysis

        if isinstance(results, ExperimentAnalysis):
            # Ray's constructor: ResultGrid(experiment_analysis).
            analysis = results
            results = analysis._results._results
            experiment_path = experiment_path or analysis.experiment_path
            default_metric = default_metric or analysis.default_metric
            default_mode = default_mode or analysis.default_mode
        if experiment_path is None:
            raise TypeError(
                "ResultGrid(results, experiment_path): give the experiment's path, or an ExperimentAnalysis"
            )
        self._results = list(results)
        self._experiment_path = experiment_path
        self._metric, self._mode = default_metric, default_mode

    @property
    def experiment_path(self) -> str:
        return self._experiment_path

    @property
    def filesystem(self):
        from oxray.train._internal.storage import pyarrow_filesystem

        return pyarrow_filesystem(self._experiment_path)

    def __len__(self):
        return len(self._results)

    def __getitem__(self, index) -> Result:
        return self._results[index]

    def __iter__(self):
        return iter(self._results)

    @property
    def errors(self) -> list:
        return [r.error for r in self._results if r.error is not None]

    @property
    def num_errors(self) -> int:
        return len(self.errors)

    @property
    def num_terminated(self) -> int:
        return len([r for r in self._results if r.error is None])

    def get_best_result(self, metric=None, mode=None, scope="last", filter_nan_and_inf=True) -> Result:
        if len(self._results) == 1:
            return self._results[0]
        metric, mode = metric or self._metric, mode or self._mode
        if not metric or not mode:
            raise ValueError(
                "get_best_result() needs a metric and a mode: pass them, or set TuneConfig(metric=..., mode=...)"
            )
        if mode not in ("min", "max"):
            raise ValueError(f"get_best_result(mode={mode!r}): expected 'min' or 'max'")
        if scope not in _SCOPES:
            raise ValueError(f"get_best_result(scope={scope!r}): expected one of {', '.join(_SCOPES)}")
        best, best_value = None, None
        for result in self._results:
            value = _score(result, metric, mode, scope)
            if value is None or (filter_nan_and_inf and not math.isfinite(value)):
                continue
            if best is None or (value > best_value if mode == "max" else value < best_value):
                best, best_value = result, value
        if best is None:
            raise RuntimeError(
                f"No best trial found for the given metric: {metric}. This means that no trial has reported "
                "this metric, or all values reported for this metric are NaN"
            )
        return best

    def get_dataframe(self, filter_metric: Optional[str] = None, filter_mode: Optional[str] = None):
        import pandas as pd

        from oxray.tune.search.variant_generator import flatten

        if (filter_metric is None) != (filter_mode is None):
            raise ValueError("get_dataframe(): give both filter_metric and filter_mode, or neither")
        if filter_mode not in (None, "min", "max"):
            raise ValueError(f"get_dataframe(filter_mode={filter_mode!r}): expected 'min' or 'max'")
        rows = []
        for result in self._results:
            row = result.metrics
            if filter_metric is not None:
                candidates = [r for r in result._metrics_history if isinstance(r.get(filter_metric), (int, float))]
                if candidates:
                    pick = max if filter_mode == "max" else min
                    row = pick(candidates, key=lambda r: r[filter_metric])
            if row is None:
                continue
            flat = flatten(row)
            flat["logdir"] = result.path
            rows.append(flat)
        return pd.DataFrame(rows)

    def __repr__(self):
        return "ResultGrid<[\n" + ",\n".join(f"  {r!r}" for r in self._results) + "\n]>"


def _score(result: Result, metric: str, mode: str, scope: str) -> Optional[float]:
    values = [r[metric] for r in result._metrics_history if isinstance(r.get(metric), (int, float))]
    if not values:
        return None
    if scope == "last":
        return float(values[-1])
    if scope == "all":
        return float(max(values) if mode == "max" else min(values))
    window = {"avg": len(values), "last-5-avg": 5, "last-10-avg": 10}[scope]
    tail = values[-window:]
    return float(sum(tail) / len(tail))
