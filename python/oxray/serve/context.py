"""`serve.get_replica_context()`: which application, deployment and replica the
calling code runs in (set in each replica's process when it starts)."""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Optional

from oxray.serve.exceptions import RayServeException


@dataclass(frozen=True)
class ReplicaID:
    unique_id: str
    deployment_name: str
    app_name: str

    def to_full_id_str(self) -> str:
        return f"{self.app_name}#{self.deployment_name}#{self.unique_id}"


@dataclass
class ReplicaContext:
    replica_id: ReplicaID
    servable_object: Any

    @property
    def app_name(self) -> str:
        return self.replica_id.app_name

    @property
    def deployment(self) -> str:
        return self.replica_id.deployment_name


_context: Optional[ReplicaContext] = None
# The model the request being served names (`serve.get_multiplexed_model_id()`).
_multiplexed_model_id: ContextVar[str] = ContextVar("serve_multiplexed_model_id", default="")
# The route prefix of the HTTP request being served ("" for a handle's call): `serve.metrics`' `route` tag.
_request_route: ContextVar[str] = ContextVar("serve_request_route", default="")


def get_replica_context() -> ReplicaContext:
    if _context is None:
        raise RayServeException("`serve.get_replica_context()` may only be called from within a Ray Serve deployment.")
    return _context


def set_replica_context(context: Optional[ReplicaContext]) -> None:
    global _context
    _context = context
