"""Tune's callbacks: `Callback` hooks the driver loop calls, `LoggerCallback`,
and the loggers on by default, as in Ray: `JsonLoggerCallback` (params.json,
params.pkl, result.json), `CSVLoggerCallback` (progress.csv) and
`TBXLoggerCallback` (TensorBoard event files, written without tensorboardX).
`TUNE_DISABLE_AUTO_CALLBACK_LOGGERS=1` turns the defaults off."""

from __future__ import annotations

import csv
import json
import os
import socket
import sys
import time

from oxray import cloudpickle
from oxray.tune._internal.files import write_private


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


def _json_line(result: dict) -> str:
    """One result as a line of JSON; numpy scalars as numbers, anything else JSON lacks as its repr.
    Encoded once when it is plain JSON (the usual case), else cleaned first."""
    try:
        return json.dumps(result) + "\n"
    except (TypeError, ValueError):
        return json.dumps(_jsonable(result)) + "\n"


def _open_for_append(path: str):
    """A trial's log file, private to the user, kept open for the trial's results."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "a", newline="")


class JsonLoggerCallback(LoggerCallback):
    """`params.json` and `params.pkl` when a trial starts, and a line of `result.json` per result
    (the file stays open while the trial runs, flushed at each result, as Ray's)."""

    def __init__(self):
        self._files: dict = {}

    def log_trial_start(self, trial):
        params = os.path.join(trial.local_path, "params.json")
        if not os.path.exists(params):
            # Written once, before any result; a restore reads the config from the experiment state.
            write_private(params, json.dumps(_jsonable(trial.config), indent=2, sort_keys=True).encode())
            write_private(os.path.join(trial.local_path, "params.pkl"), cloudpickle.dumps(trial.config))

    def log_trial_result(self, iteration, trial, result):
        file = self._files.get(trial.trial_id)
        if file is None:
            file = self._files[trial.trial_id] = _open_for_append(os.path.join(trial.local_path, "result.json"))
        file.write(_json_line(result))
        file.flush()

    def log_trial_end(self, trial, failed=False):
        file = self._files.pop(trial.trial_id, None)
        if file is not None:
            file.close()

    def on_experiment_end(self, trials, **info):
        for file in self._files.values():
            file.close()
        self._files.clear()


class CSVLoggerCallback(LoggerCallback):
    """`progress.csv`: a row per result, the first result's flattened keys (without config) as columns
    (a restored trial's file keeps its header); open while the trial runs, flushed at each result."""

    def __init__(self):
        self._writers: dict = {}

    def log_trial_result(self, iteration, trial, result):
        from oxray.tune.search.variant_generator import flatten

        flat = flatten({k: v for k, v in result.items() if k != "config"})
        entry = self._writers.get(trial.trial_id)
        if entry is None:
            path = os.path.join(trial.local_path, "progress.csv")
            columns = None
            if os.path.exists(path):
                with open(path, newline="") as f:
                    columns = next(csv.reader(f), None)
            file = _open_for_append(path)
            writer = csv.DictWriter(file, fieldnames=columns or list(flat), extrasaction="ignore")
            if columns is None:
                writer.writeheader()
            entry = self._writers[trial.trial_id] = (file, writer)
        file, writer = entry
        writer.writerow(flat)
        file.flush()

    def log_trial_end(self, trial, failed=False):
        entry = self._writers.pop(trial.trial_id, None)
        if entry is not None:
            entry[0].close()

    def on_experiment_end(self, trials, **info):
        for file, _ in self._writers.values():
            file.close()
        self._writers.clear()


class TBXLoggerCallback(LoggerCallback):
    """TensorBoard event files in each trial's directory
    (`events.out.tfevents.<epoch>.<host>.<pid>.<n>`): every numeric metric, flattened with `/`,
    as a scalar under `ray/tune/`, at its `training_iteration`. oxray writes them itself
    (`_native.TensorBoardEventFile`), so unlike Ray it needs no tensorboardX and never imports
    torch into the driver. Each result is handed to the OS at once."""

    def __init__(self):
        self._files: dict = {}
        self._count = 0
        self._warned = False

    def log_trial_start(self, trial):
        if trial.trial_id in self._files:
            return
        from oxray._native import TensorBoardEventFile

        self._count += 1
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.{self._count}"
        path = os.path.join(trial.local_path, name)

        def create():
            self._files[trial.trial_id] = TensorBoardEventFile(path)

        self._guarded(create)

    def log_trial_restore(self, trial):
        self.log_trial_start(trial)

    def log_trial_result(self, iteration, trial, result):
        from oxray.tune.search.variant_generator import flatten

        self.log_trial_start(trial)
        events = self._files.get(trial.trial_id)
        if events is None:
            return
        step = result.get("training_iteration", iteration)
        scalars = [
            (f"ray/tune/{key}", float(value))
            for key, value in flatten({k: v for k, v in result.items() if k != "config"}).items()
            if isinstance(value, (int, float)) and not isinstance(value, bool)
        ]

        def write():
            events.add_scalars(int(step), scalars)
            events.flush()

        self._guarded(write)

    def log_trial_end(self, trial, failed=False):
        events = self._files.pop(trial.trial_id, None)
        if events is not None:
            self._guarded(events.close)

    def on_experiment_end(self, trials, **info):
        for trial_id in list(self._files):
            self._guarded(self._files.pop(trial_id).close)

    def _guarded(self, write) -> None:
        try:
            write()
        except OSError as e:  # TensorBoard files must never stop the experiment
            if not self._warned:
                self._warned = True
                print(f"WARNING: TBXLoggerCallback could not write events: {e}", file=sys.stderr, flush=True)


def default_loggers() -> list:
    """Ray's defaults: JSON, CSV and TensorBoard (Ray writes the last only when tensorboardX is installed)."""
    if os.environ.get("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "0") == "1":
        return []
    return [JsonLoggerCallback(), CSVLoggerCallback(), TBXLoggerCallback()]
