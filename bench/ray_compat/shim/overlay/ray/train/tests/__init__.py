"""``ray.train.tests``: the harness's own versions of the test helpers Train tests import."""

from _ray_compat_shim import lenient_getattr

__getattr__ = lenient_getattr(__name__)
