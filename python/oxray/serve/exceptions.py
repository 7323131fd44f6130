"""Serve's exceptions, under Ray's names."""

from __future__ import annotations

from oxray.exceptions import TaskCancelledError


class RayServeException(Exception):
    pass


class RequestCancelledError(RayServeException, TaskCancelledError):
    """A call cancelled with `DeploymentResponse.cancel()` before it finished."""
