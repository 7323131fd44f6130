"""Alias: Ray's ``ray.train.v2.api.config`` is the home of ``ray.train``'s config classes."""

from _ray_compat_shim import lenient_getattr

from oxray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig

__all__ = ["CheckpointConfig", "FailureConfig", "RunConfig", "ScalingConfig"]
__getattr__ = lenient_getattr(__name__)
