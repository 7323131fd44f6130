"""``ray.train.v2``: Ray's module path for Train v2, whose public API oxray serves as ``ray.train``."""

from _ray_compat_shim import lenient_getattr

__getattr__ = lenient_getattr(__name__)
