"""Serve's exceptions, under Ray's names."""

from __future__ import annotations

from oxray.exceptions import TaskCancelledError


class RayServeException(Exception):
    pass


class RequestCancelledError(RayServeException, TaskCancelledError):
    """A call cancelled with `DeploymentResponse.cancel()` before it finished."""


class BackPressureError(RayServeException):
    """A call dropped because `max_queued_requests` calls already wait in this caller (Ray's)."""

    def __init__(self, *, num_queued_requests: int, max_queued_requests: int):
        self.num_queued_requests = num_queued_requests
        self.max_queued_requests = max_queued_requests
        super().__init__(
            f"Request dropped due to backpressure (num_queued_requests={num_queued_requests}, "
            f"max_queued_requests={max_queued_requests})."
        )

    def __reduce__(self):
        return (_backpressure_error, (self.num_queued_requests, self.max_queued_requests))


def _backpressure_error(queued: int, max_queued: int) -> BackPressureError:
    return BackPressureError(num_queued_requests=queued, max_queued_requests=max_queued)
