"""`oxray.tune.analysis.experiment_analysis`: Ray's legacy `ExperimentAnalysis`, what `tune.run`
returns and what `ExperimentAnalysis(path)` reads back from an experiment's directory, local or
`s3://` (read as `Tuner.restore` reads it). As in Ray 2.60, trials whose metric is NaN or infinite
are never the best (`filter_nan_and_inf=True`), a search with no trial scored returns None, and
results, configs and dataframes are keyed by trial id."""

from __future__ import annotations

import logging
import math
import os
from typing import Any, Optional

from oxray.tune._internal.metrics import is_number, lookup
from oxray.tune.result_grid import ResultGrid

logger = logging.getLogger(__name__)

_SCOPES = ("all", "last", "avg", "last-5-avg", "last-10-avg")


def _nan_or_inf(value: Any) -> bool:
    try:
        return not math.isfinite(value)
    except (TypeError, ValueError):
        return False


def _is_nan(value: Any) -> bool:
    try:
        return math.isnan(value)
    except (TypeError, ValueError):
        return False


def _trial_score(trial, metric: str, mode: str, scope: str) -> Optional[float]:
    """The trial's score for `metric` over its results in `scope` (Ray's `metric_analysis`), or
    None when it never reported the metric as a number."""
    values = [v for v in (lookup(r, metric) for r in trial.results) if is_number(v)]
    if not values and is_number(lookup(trial.last_result, metric)):
        values = [lookup(trial.last_result, metric)]
    if not values:
        return None
    if scope == "last":
        return values[-1]
    if scope == "all":
        # The trial's best ever; NaN, which orders with nothing, only when it reported nothing else.
        values = [v for v in values if not _is_nan(v)] or values
        return max(values) if mode == "max" else min(values)
    window = {"avg": len(values), "last-5-avg": 5, "last-10-avg": 10}[scope]
    tail = values[-window:]
    return sum(tail) / len(tail)


class ExperimentAnalysis:
    """Ray's legacy analysis of an experiment: the best trial, config, result and checkpoint by a
    metric, and dataframes. `ExperimentAnalysis(path)` reads an experiment directory (local, or
    `s3://bucket/prefix/name` with pyarrow's S3 options as a `?query` or `storage_filesystem=`) as
    its last state file left it: a finished experiment, or one a killed driver left."""

    def __init__(
        self,
        experiment_checkpoint_path,
        storage_filesystem=None,
        trials: Optional[list] = None,
        default_metric: Optional[str] = None,
        default_mode: Optional[str] = None,
    ):
        if default_mode is not None and default_mode not in ("min", "max"):
            raise ValueError(f"ExperimentAnalysis(default_mode={default_mode!r}): expected 'min' or 'max'")
        self._results, read = _read_experiment(
            experiment_checkpoint_path, storage_filesystem, default_metric, default_mode
        )
        self.trials = trials if trials is not None else read
        self.default_metric, self.default_mode = default_metric, default_mode

    @classmethod
    def _of(cls, results: ResultGrid, trials: list, default_metric=None, default_mode=None) -> "ExperimentAnalysis":
        """The analysis of an experiment this process just ran (`tune.run`)."""
        analysis = cls.__new__(cls)
        analysis._results, analysis.trials = results, trials
        analysis.default_metric, analysis.default_mode = default_metric, default_mode
        return analysis

    @property
    def experiment_path(self) -> str:
        return self._results.experiment_path

    def _validate_metric(self, metric: Optional[str]) -> str:
        metric = metric or self.default_metric
        if not metric:
            raise ValueError(
                "ExperimentAnalysis needs a metric: pass metric=..., or give tune.run(metric=...) "
                "(or ExperimentAnalysis(default_metric=...))"
            )
        return metric

    def _validate_mode(self, mode: Optional[str]) -> str:
        mode = mode or self.default_mode
        if mode not in ("min", "max"):
            raise ValueError(
                f"ExperimentAnalysis: mode={mode!r}: expected 'min' or 'max' (pass mode=..., or tune.run(mode=...))"
            )
        return mode

    def get_best_trial(
        self,
        metric: Optional[str] = None,
        mode: Optional[str] = None,
        scope: str = "last",
        filter_nan_and_inf: bool = True,
    ):
        """The trial with the best score for `metric` in `scope`, or None when no trial reported it
        (or, with `filter_nan_and_inf`, every score is NaN or infinite). With one trial, that trial."""
        if len(self.trials) == 1:
            return self.trials[0]
        metric, mode = self._validate_metric(metric), self._validate_mode(mode)
        if scope not in _SCOPES:
            raise ValueError(f"get_best_trial(scope={scope!r}): expected one of {', '.join(_SCOPES)}")
        best, best_score = None, None
        for trial in self.trials:
            score = _trial_score(trial, metric, mode, scope)
            if score is None or (filter_nan_and_inf and _nan_or_inf(score)):
                continue
            if best is None or (score > best_score if mode == "max" else score < best_score):
                best, best_score = trial, score
        if best is None:
            logger.warning(
                "Could not find best trial: no trial reported %r%s. Did you pass the correct `metric`?",
                metric,
                " as a finite number" if filter_nan_and_inf else "",
            )
        return best

    def get_best_config(self, metric: Optional[str] = None, mode: Optional[str] = None, scope: str = "last"):
        """The best trial's config, or None when there is no best trial."""
        best = self.get_best_trial(metric, mode, scope)
        return best.config if best is not None else None

    def get_all_configs(self, prefix: bool = False) -> dict:
        """Each trial's config by its trial id (flattened with `config/` keys when `prefix`)."""
        from oxray.tune.search.variant_generator import flatten

        if prefix:
            return {t.trial_id: flatten({"config": t.config}) for t in self.trials}
        return {t.trial_id: t.config for t in self.trials}

    def _get_trial_checkpoints_with_metric(self, trial, metric: Optional[str] = None) -> list:
        """`(checkpoint, value of metric)` of each checkpoint the trial keeps."""
        metric = metric or self.default_metric or "training_iteration"
        return [(checkpoint, lookup(metrics, metric)) for checkpoint, metrics in trial.checkpoints]

    def get_best_checkpoint(self, trial, metric: Optional[str] = None, mode: Optional[str] = None):
        """The trial's kept checkpoint with the best `metric` (as reported with it; NaN left out),
        or None. `metric` defaults to the experiment's, else `training_iteration`."""
        metric = metric or self.default_metric or "training_iteration"
        mode = self._validate_mode(mode)
        scored = [
            (c, v) for c, v in self._get_trial_checkpoints_with_metric(trial, metric) if is_number(v) and not _is_nan(v)
        ]
        if not scored:
            logger.error("No checkpoints with a value of %r have been found for trial %s.", metric, trial)
            return None
        pick = max if mode == "max" else min
        return pick(scored, key=lambda cv: cv[1])[0]

    def get_last_checkpoint(self, trial=None, metric: str = "training_iteration", mode: str = "max"):
        """The trial's (by default the best trial's) checkpoint with the highest `metric`
        (`training_iteration`: its latest)."""
        trial = trial or self.best_trial
        return self.get_best_checkpoint(trial, metric, mode)

    def _need_defaults(self, what: str, instead: str) -> None:
        if not self.default_metric or not self.default_mode:
            raise ValueError(
                f"To fetch the `{what}`, pass a `metric` and `mode` parameter to `tune.run()`. "
                f"Alternatively, use {instead} to set the metric and mode explicitly."
            )

    @property
    def best_trial(self):
        self._need_defaults("best_trial", "`get_best_trial(metric, mode)`")
        return self.get_best_trial(self.default_metric, self.default_mode)

    @property
    def best_config(self) -> Optional[dict]:
        self._need_defaults("best_config", "`get_best_config(metric, mode)`")
        return self.get_best_config(self.default_metric, self.default_mode)

    @property
    def best_checkpoint(self):
        self._need_defaults("best_checkpoint", "`get_best_checkpoint(trial, metric, mode)`")
        best = self.best_trial
        if best is None:
            raise ValueError(
                f"No best trial found. Please check if you specified the correct default metric "
                f"({self.default_metric}) and mode ({self.default_mode})."
            )
        return self.get_best_checkpoint(best, self.default_metric, self.default_mode)

    @property
    def best_dataframe(self):
        """The best trial's results, one row per report."""
        self._need_defaults("best_dataframe", "`get_best_trial(metric, mode)` and `trial_dataframes`")
        return self.trial_dataframes[self.best_trial.trial_id]

    @property
    def best_result(self) -> dict:
        self._need_defaults("best_result", "`get_best_trial(metric, mode).last_result`")
        return self.best_trial.last_result

    @property
    def best_result_df(self):
        """The best trial's last result as a one-row dataframe indexed by trial id."""
        import pandas as pd

        from oxray.tune.search.variant_generator import flatten

        return pd.DataFrame.from_records([flatten(self.best_result)], index="trial_id")

    @property
    def best_logdir(self) -> str:
        self._need_defaults("best_logdir", "`get_best_trial(metric, mode).path`")
        return self.best_trial.path

    @property
    def results(self) -> dict:
        """Each trial's last result by its trial id."""
        return {t.trial_id: t.last_result for t in self.trials}

    @property
    def results_df(self):
        """Every trial's last result, one row each, indexed by trial id."""
        import pandas as pd

        from oxray.tune.search.variant_generator import flatten

        rows = [flatten(t.last_result) for t in self.trials if t.last_result]
        if not rows:
            return pd.DataFrame()
        return pd.DataFrame.from_records(rows, index="trial_id")

    def dataframe(self, metric: Optional[str] = None, mode: Optional[str] = None):
        """One row per trial: its result with the best `metric` ever seen by `mode`, or its last
        result without a mode; with `config/...` columns and `logdir`."""
        import pandas as pd

        from oxray.tune.search.variant_generator import flatten

        if mode is not None and mode not in ("min", "max"):
            raise ValueError(f"dataframe(mode={mode!r}): expected 'min' or 'max'")
        if mode and not metric:
            raise ValueError("dataframe(mode=...) needs metric= too: which metric the mode picks by")
        rows = []
        for trial in self.trials:
            row = trial.last_result
            if metric and mode:
                scored = [r for r in trial.results if is_number(lookup(r, metric)) and not _is_nan(lookup(r, metric))]
                if scored:
                    pick = max if mode == "max" else min
                    row = pick(scored, key=lambda r: lookup(r, metric))
            if not row:
                continue
            flat = flatten(row)
            flat.update(flatten({"config": trial.config}))
            flat["logdir"] = trial.path
            rows.append(flat)
        return pd.DataFrame(rows)

    @property
    def trial_dataframes(self) -> dict:
        """Each trial's results (one row per report, nested keys flattened) by its trial id."""
        import pandas as pd

        from oxray.tune.search.variant_generator import flatten

        return {t.trial_id: pd.DataFrame([flatten(r) for r in t.results]) for t in self.trials}

    def fetch_trial_dataframes(self) -> dict:
        """`trial_dataframes` read again from each trial's `result.json`, or its `progress.csv`
        where that is gone."""
        import json

        import pandas as pd

        from oxray.tune.result import EXPR_PROGRESS_FILE, EXPR_RESULT_FILE
        from oxray.tune.search.variant_generator import flatten

        frames = {}
        for trial in self.trials:
            results_file = os.path.join(trial.local_path, EXPR_RESULT_FILE)
            progress_file = os.path.join(trial.local_path, EXPR_PROGRESS_FILE)
            if os.path.exists(results_file):
                rows = []
                with open(results_file) as f:
                    for line in f:
                        try:
                            rows.append(flatten(json.loads(line)))
                        except ValueError:  # a line a kill cut short
                            break
                frames[trial.trial_id] = pd.DataFrame(rows)
            elif os.path.exists(progress_file):
                frames[trial.trial_id] = pd.read_csv(progress_file)
            else:
                frames[trial.trial_id] = pd.DataFrame()
        return frames

    def _experiment_state(self) -> dict:
        state = getattr(self._results, "_state", None)
        if state is None:
            from oxray.tune._internal.runner import latest_state

            local = getattr(self._results, "_local_path", None) or self.experiment_path
            state = latest_state(local)[0] if os.path.isdir(local) else {}
            self._results._state = state
        return state

    def stats(self) -> dict:
        """The experiment's statistics from its state file (`start_time`, ...)."""
        return dict(self._experiment_state().get("stats", {}))

    def runner_data(self) -> dict:
        """The driver's data from the experiment's state file."""
        return dict(self._experiment_state().get("runner_data", {}))


def _read_experiment(path, storage_filesystem, metric: Optional[str], mode: Optional[str]) -> tuple:
    """`(ResultGrid, trials)` of the experiment at `path` (a local directory, its state file, or an
    `s3://` prefix), from its newest state file. A remote experiment's driver files are fetched
    into a staging directory as `Tuner.restore` fetches them; its checkpoints stay in the bucket."""
    import json

    from oxray.train._internal.storage import is_remote, open_storage
    from oxray.tune._internal.experiment_storage import ExperimentStorage
    from oxray.tune._internal.runner import _load_error, latest_state
    from oxray.tune._internal.trial import Trial
    from oxray.tune.tuner import _experiment_uri, _result_of

    given = os.fspath(path)
    what = f"ExperimentAnalysis({given!r})"
    uri = _experiment_uri(given, storage_filesystem, what)
    if is_remote(uri):
        names = [n for n in open_storage(uri).list("") if "/" not in n and n.startswith("experiment_state-")]
        if not names:
            raise ValueError(f"{what}: expected an experiment directory; {uri} has no experiment_state-*.json")
        parent, _, name = uri.rpartition("/")
        storage = ExperimentStorage(parent, name)
        storage.download()
        local = storage.local_path
    else:
        if os.path.isfile(uri) and os.path.basename(uri).startswith("experiment_state"):
            uri = os.path.dirname(uri)
        if not os.path.isdir(uri):
            raise ValueError(f"{what}: expected the directory of an experiment (local or s3://)")
        storage = ExperimentStorage(os.path.dirname(uri), os.path.basename(uri))
        local = uri
    state, _ = latest_state(local)
    trials = [Trial.from_state(json.loads(trial_json), storage) for trial_json, _ in state["trial_data"]]
    for trial in trials:
        if trial.status == "ERROR":
            trial.error = _load_error(trial)
    results = ResultGrid(
        [_result_of(t) for t in trials], storage.experiment_path, default_metric=metric, default_mode=mode
    )
    results._state = state
    return results, trials
