"""``ray.train.v2.api``: module-path aliases of oxray's ``ray.train`` public API."""

from _ray_compat_shim import lenient_getattr

__getattr__ = lenient_getattr(__name__)
