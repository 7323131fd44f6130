"""Train's errors, with Ray Train v2's names."""

from __future__ import annotations

from oxray.exceptions import RayError


class RayTrainError(RayError):
    pass


class TrainingFailedError(RayTrainError):
    """Raised by `fit()` when training fails past `FailureConfig.max_failures`."""


class WorkerGroupError(TrainingFailedError):
    """One or more training workers failed; `worker_failures` maps rank to error."""

    def __init__(self, message: str, worker_failures: dict):
        super().__init__(message)
        self.worker_failures = worker_failures

    def __reduce__(self):
        return (WorkerGroupError, (str(self), self.worker_failures))


class ControllerError(TrainingFailedError):
    """The training controller itself failed (e.g. it could not start workers)."""
