"""Alias: Ray's ``ray.train.v2.api.result`` is ``ray.train.Result``'s home."""

from _ray_compat_shim import lenient_getattr

from oxray.train import Result

__all__ = ["Result"]
__getattr__ = lenient_getattr(__name__)
