"""``ray.train.v2._internal``: only ``constants.is_v2_enabled`` (asserted at the top of Train v2 test files)."""

from _ray_compat_shim import lenient_getattr

__getattr__ = lenient_getattr(__name__)
