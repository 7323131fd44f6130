"""Alias: Ray's ``ray.train.v2.api.exceptions`` holds ``ray.train``'s public exceptions."""

from _ray_compat_shim import lenient_getattr

from oxray.train import ControllerError, TrainingFailedError, WorkerGroupError

__all__ = ["ControllerError", "TrainingFailedError", "WorkerGroupError"]
__getattr__ = lenient_getattr(__name__)
