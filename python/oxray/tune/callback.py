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
import queue
import sys
import threading
import time

from oxray import cloudpickle
from oxray.tune._internal.files import append_private, write_private

TBX_FLUSH_PERIOD_S = 1.0


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
    `training_iteration`; through `tensorboardX`. The writing happens on a thread of its own:
    importing tensorboardX imports torch when it is installed (seconds), and each flush is an
    fsync, so the driver loop never waits on either. The experiment's end waits for the thread."""

    def __init__(self):
        import importlib.util

        if importlib.util.find_spec("tensorboardX") is None:
            raise ImportError("TBXLoggerCallback needs the tensorboardX package: pip install tensorboardX")
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = None
        self._failed = False
        self._started: set = set()

    def _submit(self, *work) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._write_events, name="tune-tbx", daemon=True)
            self._thread.start()
        self._queue.put(work)

    def log_trial_start(self, trial):
        if trial.trial_id not in self._started:
            self._started.add(trial.trial_id)
            self._submit("start", trial.trial_id, trial.local_path)

    def log_trial_restore(self, trial):
        self.log_trial_start(trial)

    def log_trial_result(self, iteration, trial, result):
        from oxray.tune.search.variant_generator import flatten

        self.log_trial_start(trial)
        step = result.get("training_iteration", iteration)
        scalars = [
            (f"ray/tune/{key}", value)
            for key, value in flatten({k: v for k, v in result.items() if k != "config"}).items()
            if isinstance(value, (int, float)) and not isinstance(value, bool)
        ]
        self._submit("result", trial.trial_id, scalars, step)

    def log_trial_end(self, trial, failed=False):
        if trial.trial_id in self._started:
            self._started.discard(trial.trial_id)
            self._submit("end", trial.trial_id)

    def on_experiment_end(self, trials, **info):
        if self._thread is not None:
            self._queue.put(("stop",))
            self._thread.join()
            self._thread = None

    def _write_events(self) -> None:
        writers: dict = {}
        flushed: dict = {}
        while True:
            kind, *args = self._queue.get()
            if kind == "stop":
                for writer in writers.values():
                    writer.close()
                return
            try:
                self._handle(kind, args, writers, flushed)
            except Exception as e:  # noqa: BLE001 - TensorBoard files must never stop the experiment
                if not self._failed:
                    self._failed = True
                    print(f"WARNING: TBXLoggerCallback could not write events: {e!r}", file=sys.stderr, flush=True)

    def _handle(self, kind: str, args: list, writers: dict, flushed: dict) -> None:
        if kind == "start":
            trial_id, path = args
            from tensorboardX import SummaryWriter

            writers[trial_id] = SummaryWriter(logdir=path, flush_secs=30)
            # tensorboardX creates it with the umask's mode; the trial's files are the user's only (the
            # directory is already 0700).
            for name in os.listdir(path):
                if name.startswith("events.out.tfevents."):
                    os.chmod(os.path.join(path, name), 0o600)
        elif kind == "result":
            trial_id, scalars, step = args
            writer = writers[trial_id]
            for tag, value in scalars:
                writer.add_scalar(tag, value, global_step=step)
            # TensorBoard sees a result within a second; a trial of many quick results pays for one
            # flush (an fsync) a second, not one each; its end flushes the rest (close).
            now = time.monotonic()
            if now - flushed.get(trial_id, 0.0) >= TBX_FLUSH_PERIOD_S:
                writer.flush()
                flushed[trial_id] = now
        elif kind == "end":
            (trial_id,) = args
            flushed.pop(trial_id, None)
            writer = writers.pop(trial_id, None)
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
