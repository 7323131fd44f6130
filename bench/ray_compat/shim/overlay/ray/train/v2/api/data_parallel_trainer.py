"""Alias: Ray's ``ray.train.v2.api.data_parallel_trainer`` is ``ray.train.DataParallelTrainer``'s home."""

from _ray_compat_shim import lenient_getattr

from oxray.train import DataParallelTrainer

__all__ = ["DataParallelTrainer"]
__getattr__ = lenient_getattr(__name__)
