"""Ray's `ray.serve.metrics`: `Counter`, `Gauge` and `Histogram` as in `oxray.util.metrics`, with
the replica's `deployment`, `replica` and `application` added as tags (reserved: a metric may not
declare them), and a declared `route` tag filled with the request's route prefix."""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple, Union

from oxray.serve import context
from oxray.util import metrics

DEPLOYMENT_TAG = "deployment"
REPLICA_TAG = "replica"
APPLICATION_TAG = "application"
ROUTE_TAG = "route"
_RESERVED = (DEPLOYMENT_TAG, REPLICA_TAG, APPLICATION_TAG)


def _refuse_reserved(keys) -> None:
    for key in _RESERVED:
        if key in keys:
            raise ValueError(f"'{key}' tag is reserved for Ray Serve metrics")


def _add_serve_metric_tags(tag_keys: Optional[Tuple[str, ...]]) -> Tuple[str, ...]:
    tag_keys = tuple(tag_keys or ())
    replica = context._context
    if replica is None:
        return tag_keys
    _refuse_reserved(tag_keys)
    serve_tags = (DEPLOYMENT_TAG, REPLICA_TAG) + ((APPLICATION_TAG,) if replica.app_name else ())
    return serve_tags + tag_keys


def _add_serve_metric_default_tags(default_tags: Dict[str, str]) -> Dict[str, str]:
    replica = context._context
    if replica is None:
        return default_tags
    _refuse_reserved(default_tags)
    tags = {**default_tags, DEPLOYMENT_TAG: replica.deployment, REPLICA_TAG: replica.replica_id.unique_id}
    if replica.app_name:
        tags[APPLICATION_TAG] = replica.app_name
    return tags


def _with_route(tag_keys: Tuple[str, ...], tags: Optional[Dict[str, str]]) -> Optional[Dict[str, str]]:
    if ROUTE_TAG in tag_keys and ROUTE_TAG not in (tags or {}):
        return {**(tags or {}), ROUTE_TAG: context._request_route.get()}
    return tags


class _ServeTags:
    """What Serve's metrics add to `oxray.util.metrics`': the replica's tags (keys and values)."""

    def __init__(self, name: str, description: str = "", tag_keys: Optional[Tuple[str, ...]] = None, **more):
        if tag_keys and not isinstance(tag_keys, tuple):
            raise TypeError(f"tag_keys should be a tuple type, got: {type(tag_keys)}")
        super().__init__(name, description, tag_keys=_add_serve_metric_tags(tag_keys), **more)
        self.set_default_tags({})

    def set_default_tags(self, default_tags: Dict[str, str]):
        return super().set_default_tags(_add_serve_metric_default_tags(default_tags))


class Counter(_ServeTags, metrics.Counter):
    """A Serve counter (Prometheus' counter): the replica's tags added."""

    def inc(self, value: Union[int, float] = 1.0, tags: Dict[str, str] = None) -> None:
        super().inc(value, _with_route(self._tag_keys, tags))


class Gauge(_ServeTags, metrics.Gauge):
    """A Serve gauge: the replica's tags added."""

    def set(self, value: Union[int, float], tags: Dict[str, str] = None) -> None:
        super().set(value, _with_route(self._tag_keys, tags))


class Histogram(_ServeTags, metrics.Histogram):
    """A Serve histogram: the replica's tags added."""

    def __init__(
        self,
        name: str,
        description: str = "",
        boundaries: List[float] = None,
        tag_keys: Optional[Tuple[str, ...]] = None,
    ):
        super().__init__(name, description, tag_keys, boundaries=boundaries)

    def observe(self, value: Union[int, float], tags: Dict[str, str] = None) -> None:
        super().observe(value, _with_route(self._tag_keys, tags))


__all__ = ["Counter", "Gauge", "Histogram"]
