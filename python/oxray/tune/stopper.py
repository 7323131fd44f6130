"""Stopping conditions: a `Stopper` says when one trial stops
(`__call__(trial_id, result)`) and when the whole experiment does
(`stop_all()`). A `stop=` dict or function becomes one of these."""

from __future__ import annotations

import collections
import datetime
import inspect
import math
import time
from typing import Callable, Mapping


class Stopper:
    def __call__(self, trial_id: str, result: dict) -> bool:
        raise NotImplementedError

    def stop_all(self) -> bool:
        raise NotImplementedError


class NoopStopper(Stopper):
    def __call__(self, trial_id, result):
        return False

    def stop_all(self):
        return False


class FunctionStopper(Stopper):
    """`function(trial_id, result) -> bool`."""

    def __init__(self, function: Callable):
        if not callable(function):
            raise ValueError(f"stop={function!r}: expected a dict, a Stopper or a function(trial_id, result)")
        try:
            inspect.signature(function).bind("trial_id", {})
        except TypeError:
            raise ValueError(
                f"stop={function!r}: a stop function takes (trial_id, result); this one cannot be called so"
            ) from None
        except ValueError:  # a builtin without a signature: called as it is
            pass
        self._function = function

    def __call__(self, trial_id, result):
        return bool(self._function(trial_id, result))

    def stop_all(self):
        return False


class DictStopper(Stopper):
    """Ray's `stop={"key": threshold}`: a trial stops once any key reaches its threshold. Nested
    criteria (`{"a": {"b": 6}}`) apply to the nested result key, flattened with `/` as results are."""

    def __init__(self, criteria: Mapping):
        from oxray.tune.search.variant_generator import flatten

        self.criteria = flatten(dict(criteria))
        self.warned: set = set()

    def __call__(self, trial_id, result):
        for key, threshold in self.criteria.items():
            if key in result and result[key] is not None and result[key] >= threshold:
                return True
        return False

    def missing(self, result: dict) -> list:
        """Criteria keys this result does not report (each to be warned about once)."""
        new = [k for k in self.criteria if k not in result and k not in self.warned]
        self.warned.update(new)
        return new

    def stop_all(self):
        return False


class MaximumIterationStopper(Stopper):
    def __init__(self, max_iter: int):
        if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
            raise ValueError(f"MaximumIterationStopper(max_iter={max_iter!r}): expected an integer >= 1")
        self._max_iter = max_iter
        self._iterations = collections.defaultdict(int)

    def __call__(self, trial_id, result):
        self._iterations[trial_id] += 1
        return self._iterations[trial_id] >= self._max_iter

    def stop_all(self):
        return False


def _check_mode(name, mode):
    if mode not in (None, "min", "max"):
        raise ValueError(f"{name}(mode={mode!r}): expected 'min' or 'max'")


class TrialPlateauStopper(Stopper):
    """Stops a trial whose last `num_results` values of `metric` have a standard deviation
    at most `std` (after `grace_period` results; only past `metric_threshold` if given)."""

    def __init__(
        self,
        metric: str,
        std: float = 0.01,
        num_results: int = 4,
        grace_period: int = 4,
        metric_threshold=None,
        mode=None,
    ):
        _check_mode("TrialPlateauStopper", mode)
        if metric_threshold is not None and mode is None:
            raise ValueError("TrialPlateauStopper(metric_threshold=...) needs mode='min' or 'max'")
        self._metric, self._std, self._num_results = metric, std, num_results
        self._grace_period, self._threshold, self._mode = grace_period, metric_threshold, mode
        self._results = collections.defaultdict(lambda: collections.deque(maxlen=num_results))
        self._seen = collections.defaultdict(int)

    def __call__(self, trial_id, result):
        value = result.get(self._metric)
        if value is None:
            return False
        self._seen[trial_id] += 1
        self._results[trial_id].append(value)
        if self._seen[trial_id] < self._grace_period or len(self._results[trial_id]) < self._num_results:
            return False
        if self._threshold is not None:
            if self._mode == "min" and value > self._threshold:
                return False
            if self._mode == "max" and value < self._threshold:
                return False
        values = list(self._results[trial_id])
        mean = sum(values) / len(values)
        return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values)) <= self._std

    def stop_all(self):
        return False


class ExperimentPlateauStopper(Stopper):
    """Ends the experiment once the best `top` values of `metric` have a standard deviation at
    most `std` for `patience` results in a row."""

    def __init__(self, metric: str, std: float = 0.001, top: int = 10, mode: str = "min", patience: int = 0):
        _check_mode("ExperimentPlateauStopper", mode)
        if isinstance(top, bool) or not isinstance(top, int) or top < 2:
            raise ValueError(f"ExperimentPlateauStopper(top={top!r}): expected an integer >= 2")
        self._metric, self._std, self._top, self._mode, self._patience = metric, std, top, mode, patience
        self._values: list = []
        self._iterations = 0

    def __call__(self, trial_id, result):
        value = result.get(self._metric)
        if value is not None:
            self._values.append(value)
            self._values.sort(reverse=self._mode == "max")
            del self._values[self._top :]
        if len(self._values) >= self._top:
            mean = sum(self._values) / len(self._values)
            std = math.sqrt(sum((v - mean) ** 2 for v in self._values) / len(self._values))
            self._iterations = self._iterations + 1 if std <= self._std else 0
        return self.stop_all()

    def stop_all(self):
        return len(self._values) >= self._top and self._iterations > self._patience


class TimeoutStopper(Stopper):
    """Ends the experiment `timeout` (seconds or a timedelta) after it starts; survives a restore."""

    def __init__(self, timeout):
        if isinstance(timeout, datetime.timedelta):
            timeout = timeout.total_seconds()
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ValueError(f"TimeoutStopper(timeout={timeout!r}): expected seconds above 0 or a timedelta")
        self._budget = float(timeout)
        self._deadline = None

    def __call__(self, trial_id, result):
        return False

    def stop_all(self):
        if self._deadline is None:
            self._deadline = time.time() + self._budget
        return time.time() >= self._deadline

    def __getstate__(self):
        state = dict(self.__dict__)
        if self._deadline is not None:
            state["_budget"] = max(0.0, self._deadline - time.time())
            state["_deadline"] = None
        return state


class CombinedStopper(Stopper):
    def __init__(self, *stoppers: Stopper):
        self._stoppers = stoppers

    def __call__(self, trial_id, result):
        return any([s(trial_id, result) for s in self._stoppers])

    def stop_all(self):
        return any([s.stop_all() for s in self._stoppers])


def as_stopper(stop) -> Stopper:
    if stop is None:
        return NoopStopper()
    if isinstance(stop, Stopper):
        return stop
    if isinstance(stop, Mapping):
        return DictStopper(stop)
    return FunctionStopper(stop)
