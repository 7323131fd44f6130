"""Ray's `ray.util.metrics`: application metrics (`Counter`, `Gauge`, `Histogram`) recorded in
the process (the engine's registry, `_native.record_metric`) and reported to the node's agent
every `OXRAY_METRICS_REPORT_INTERVAL_S` (2 s) by a thread of the process, so they appear on the
node's `/metrics` as Ray exports them: `ray_<name>`, counters as `ray_<name>_total`, histograms as
`_bucket`/`_sum`/`_count`, each with the recording process's `WorkerId` and the `NodeAddress`."""

from __future__ import annotations

import atexit
import os
import re
import threading
import time
import warnings
from typing import Any, Dict, List, Optional, Tuple, Union

from oxray import _native

_VALID_METRIC_NAME_RE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
REPORT_INTERVAL_S = float(os.environ.get("OXRAY_METRICS_REPORT_INTERVAL_S", "2"))
# A report goes at least this often even when nothing changed (well inside the agent's 30 s).
KEEPALIVE_S = 10.0


class _Reporter:
    """Sends the process's metrics to its agent, from the first recording on."""

    def __init__(self):
        self._started = False
        self._lock = threading.Lock()
        self._wake = threading.Event()
        # Called before each report: they set gauges from the state they watch (Serve's queues).
        self._collectors = []
        self._last_sent = 0.0

    def add_collector(self, collect) -> None:
        """`collect()` runs before each report (on the reporting thread); reporting starts now."""
        with self._lock:
            self._collectors.append(collect)
        self.ensure_started()

    def ensure_started(self) -> None:
        if self._started:
            return
        with self._lock:
            if self._started:
                return
            self._started = True
            threading.Thread(target=self._loop, name="oxray-metrics", daemon=True).start()
            atexit.register(self.report)

    def _loop(self) -> None:
        while True:
            self._wake.wait(REPORT_INTERVAL_S)
            self._wake.clear()
            # Unchanged metrics are sent only now and then: the agent keeps a process's series
            # while it reports at least every 30 s.
            self.report(keepalive=time.monotonic() - self._last_sent >= KEEPALIVE_S)

    def report(self, keepalive: bool = True) -> None:
        from oxray._private import api

        if not api.is_initialized():
            return
        for collect in list(self._collectors):
            try:
                collect()
            except Exception:  # noqa: BLE001 - one collector's failure must not stop the reports
                pass
        try:
            if api._client().report_metrics(keepalive):
                self._last_sent = time.monotonic()
        except Exception:  # noqa: BLE001 - the agent is going away; the next report carries everything
            pass


_REPORTER = _Reporter()


def _is_invalid_metric_name(name: str) -> bool:
    if len(name) == 0:
        raise ValueError("Empty name is not allowed. Please provide a metric name.")
    if not _VALID_METRIC_NAME_RE.match(name):
        warnings.warn(
            f"Invalid metric name: {name}. Metric will be discarded and data will not be collected or "
            "published. Metric names can only contain letters, numbers, _, and :. Metric names cannot start "
            "with numbers.",
            UserWarning,
            stacklevel=3,
        )
        return True
    return False


class Metric:
    """The parent class of the metrics: a name, a description, tag keys and default tags."""

    _kind = ""

    def __init__(self, name: str, description: str = "", tag_keys: Optional[Tuple[str, ...]] = None):
        self._discard_metric = _is_invalid_metric_name(name)
        self._name = name
        self._description = description
        self._default_tags: Dict[str, str] = {}
        self._tag_keys = tag_keys or tuple()
        if not isinstance(self._tag_keys, tuple):
            raise TypeError(f"tag_keys should be a tuple type, got: {type(self._tag_keys)}")
        for key in self._tag_keys:
            if not isinstance(key, str):
                raise TypeError(f"Tag keys must be str, got {type(key)}.")
        if ":" in self._name:
            warnings.warn(
                f"Metric name {self._name} contains a : character, which is no longer allowed. Please migrate "
                "to the new metric name format. This will be an error in the future.",
                FutureWarning,
                stacklevel=2,
            )

    def set_default_tags(self, default_tags: Dict[str, str]) -> "Metric":
        for key, val in default_tags.items():
            if key not in self._tag_keys:
                raise ValueError(f"Unrecognized tag key {key}.")
            if not isinstance(val, str):
                raise TypeError(f"Tag values must be str, got {type(val)}.")
        self._default_tags = default_tags
        return self

    def _boundaries(self) -> List[float]:
        return []

    def _record(self, value: Union[int, float], tags: Optional[Dict[str, str]] = None) -> None:
        if self._discard_metric:
            return
        final_tags = self._get_final_tags(tags)
        missing = [key for key in self._tag_keys if key not in final_tags]
        if missing:
            raise ValueError(f"Missing value for tag key(s): {','.join(missing)}.")
        _native.record_metric(
            self._kind, self._name, self._description, list(final_tags.items()), float(value), self._boundaries()
        )
        _REPORTER.ensure_started()

    def _get_final_tags(self, tags):
        if not tags:
            return self._default_tags
        for val in tags.values():
            if not isinstance(val, str):
                raise TypeError(f"Tag values must be str, got {type(val)}.")
        return {**self._default_tags, **tags}

    @property
    def info(self) -> Dict[str, Any]:
        return {
            "name": self._name,
            "description": self._description,
            "tag_keys": self._tag_keys,
            "default_tags": self._default_tags,
        }


class Counter(Metric):
    """A cumulative metric that only goes up (Prometheus' counter, exported as `ray_<name>_total`)."""

    _kind = "counter"

    def __reduce__(self):
        return self.__class__, (self._name, self._description, self._tag_keys)

    def inc(self, value: Union[int, float] = 1.0, tags: Dict[str, str] = None) -> None:
        if not isinstance(value, (int, float)):
            raise TypeError(f"value must be int or float, got {type(value)}.")
        if value <= 0:
            raise ValueError(f"value must be >0, got {value}")
        self._record(value, tags=tags)


class Histogram(Metric):
    """Counts observations in buckets (`boundaries`: their upper bounds, positive)."""

    _kind = "histogram"

    def __init__(
        self,
        name: str,
        description: str = "",
        boundaries: List[float] = None,
        tag_keys: Optional[Tuple[str, ...]] = None,
    ):
        super().__init__(name, description, tag_keys)
        if boundaries is None or len(boundaries) == 0:
            raise ValueError(
                "boundaries argument should be provided when using the Histogram class. e.g., "
                'Histogram("name", boundaries=[1.0, 2.0])'
            )
        for i, boundary in enumerate(boundaries):
            if boundary <= 0:
                raise ValueError(
                    f"Invalid `boundaries` argument at index {i}, {boundaries}. Use positive values for the arguments."
                )
        self.boundaries = boundaries

    def _boundaries(self) -> List[float]:
        return [float(b) for b in self.boundaries]

    def observe(self, value: Union[int, float], tags: Dict[str, str] = None) -> None:
        if not isinstance(value, (int, float)):
            raise TypeError(f"value must be int or float, got {type(value)}.")
        self._record(value, tags)

    def __reduce__(self):
        return Histogram, (self._name, self._description, self.boundaries, self._tag_keys)

    @property
    def info(self):
        info = super().info
        info.update({"boundaries": self.boundaries})
        return info


class Gauge(Metric):
    """Keeps the last value set (Prometheus' gauge)."""

    _kind = "gauge"

    def set(self, value: Optional[Union[int, float]], tags: Dict[str, str] = None) -> None:
        if value is None:
            return
        if not isinstance(value, (int, float)):
            raise TypeError(f"value must be int or float, got {type(value)}.")
        self._record(value, tags)

    def __reduce__(self):
        return Gauge, (self._name, self._description, self._tag_keys)


__all__ = ["Counter", "Histogram", "Gauge"]
