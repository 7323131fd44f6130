"""``ray.data.tests``: ``ray.data.tests.X`` is the work dir's test or support module ``X``
(see _ray_compat_shim)."""

from _ray_compat_shim import lenient_getattr

__getattr__ = lenient_getattr(__name__)
