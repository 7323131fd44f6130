"""Tune's callbacks: `Callback` hooks the driver loop calls, `LoggerCallback`,
and the loggers on by default, as in Ray: `JsonLoggerCallback` (params.json,
params.pkl, result.json), `CSVLoggerCallback` (progress.csv) and
`TBXLoggerCallback` (TensorBoard event files, when tensorboardX is installed).
`TUNE_DISABLE_AUTO_CALLBACK_LOGGERS=1` turns the defaults off."""

from __future__ import annotations

import csv
import io
import json
import os

from oxray import cloudpickle
from oxray.tune._internal.files import append_private, write_private


class Callback:
    def setup(self, stop=None, num_samples=None, total_num_samples=None, **info):
        pass

    def on_step_begin(self, iteration, trials, **info):
        pass

    def on_step_end(self, iteration, trials, **info):
        pass

    def on_trial_start(self, iteration, trials, trial, **info):
        pass

    def on_trial_restore(self, iteration, trials, trial, **info):
        pass

    def on_trial_save(self, iteration, trials, trial, **info):
        pass

    def on_trial_result(self, iteration, trials, trial, result, **info):
        pass

    def on_trial_complete(self, iteration, trials, trial, **info):
        pass

    def on_trial_recover(self, iteration, trials, trial, **info):
        pass

    def on_trial_error(self, iteration, trials, trial, **info):
        pass

    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info):
        pass

    def on_experiment_end(self, trials, **info):
        pass

    def get_state(self):
        return None

    def set_state(self, state):
        pass


class LoggerCallback(Callback):
    """Routes the hooks to `log_trial_*` methods."""

    def log_trial_start(self, trial):
        pass

    def log_trial_restore(self, trial):
        pass

    def log_trial_save(self, trial):
        pass

    def log_trial_result(self, iteration, trial, result):
        pass

    def log_trial_end(self, trial, failed=False):
        pass

    def on_trial_start(self, iteration, trials, trial, **info):
        self.log_trial_start(trial)

    def on_trial_restore(self, iteration, trials, trial, **info):
        self.log_trial_restore(trial)

    def on_trial_save(self, iteration, trials, trial, **info):
        self.log_trial_save(trial)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.log_trial_result(iteration, trial, result)

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.log_trial_end(trial, failed=False)

    def on_trial_error(self, iteration, trials, trial, **info):
        self.log_trial_end(trial, failed=True)


def _jsonable(value):
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        if isinstance(value, dict):
            return {str(k): _jsonable(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [_jsonable(v) for v in value]
        if hasattr(value, "item"):
            try:
                return value.item()
            except Exception:
                pass
        return repr(value)


class JsonLoggerCallback(LoggerCallback):
    """`params.json` and `params.pkl` when a trial starts, and a line of `result.json` per result."""

    def log_trial_start(self, trial):
        params = os.path.join(trial.local_path, "params.json")
        if not os.path.exists(params):
            # Written once, before any result; a restore reads the config from the experiment state.
            write_private(params, json.dumps(_jsonable(trial.config), indent=2, sort_keys=True).encode())
            write_private(os.path.join(trial.local_path, "params.pkl"), cloudpickle.dumps(trial.config))

    def log_trial_result(self, iteration, trial, result):
        line = json.dumps(_jsonable(result)) + "\n"
        append_private(os.path.join(trial.local_path, "result.json"), line.encode())


class CSVLoggerCallback(LoggerCallback):
    """`progress.csv`: a row per result, the first result's flattened keys (without config) as columns."""

    def __init__(self):
        self._columns = {}

    def log_trial_result(self, iteration, trial, result):
        from oxray.tune.search.variant_generator import flatten

        flat = flatten({k: v for k, v in result.items() if k != "config"})
        path = os.path.join(trial.local_path, "progress.csv")
        columns = self._columns.get(trial.trial_id)
        if columns is None:
            if os.path.exists(path):
                with open(path, newline="") as f:
                    columns = next(csv.reader(f), None)
            header = columns is None
            columns = columns or list(flat)
            self._columns[trial.trial_id] = columns
        else:
            header = False
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore")
        if header:
            writer.writeheader()
        writer.writerow({k: flat.get(k, "") for k in columns})
        append_private(path, out.getvalue().encode())


class TBXLoggerCallback(LoggerCallback):
    """TensorBoard event files in each trial's directory (`events.out.tfevents.<epoch>.<host>`):
    every numeric metric, flattened with `/`, as a scalar under `ray/tune/`, at its
    `training_iteration`; through `tensorboardX`."""

    def __init__(self):
        try:
            from tensorboardX import SummaryWriter
        except ImportError as e:
            raise ImportError("TBXLoggerCallback needs the tensorboardX package: pip install tensorboardX") from e
        self._writer_class = SummaryWriter
        self._writers: dict = {}

    def log_trial_start(self, trial):
        if trial.trial_id not in self._writers:
            writer = self._writer_class(logdir=trial.local_path, flush_secs=30)
            # tensorboardX creates it with the umask's mode; the trial's files are the user's only (the
            # directory is already 0700).
            for name in os.listdir(trial.local_path):
                if name.startswith("events.out.tfevents."):
                    os.chmod(os.path.join(trial.local_path, name), 0o600)
            self._writers[trial.trial_id] = writer

    def log_trial_restore(self, trial):
        self.log_trial_start(trial)

    def log_trial_result(self, iteration, trial, result):
        from oxray.tune.search.variant_generator import flatten

        self.log_trial_start(trial)
        writer = self._writers[trial.trial_id]
        step = result.get("training_iteration", iteration)
        for key, value in flatten({k: v for k, v in result.items() if k != "config"}).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                writer.add_scalar(f"ray/tune/{key}", value, global_step=step)
        writer.flush()

    def log_trial_end(self, trial, failed=False):
        writer = self._writers.pop(trial.trial_id, None)
        if writer is not None:
            writer.close()


def default_loggers() -> list:
    """Ray's defaults: JSON and CSV, and TensorBoard when tensorboardX is installed."""
    if os.environ.get("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "0") == "1":
        return []
    loggers = [JsonLoggerCallback(), CSVLoggerCallback()]
    try:
        loggers.append(TBXLoggerCallback())
    except ImportError:
        pass
    return loggers
