"""``ray._common``: only its ``test_utils`` is provided (by the harness); the rest are Ray internals."""

from _ray_compat_shim import lenient_getattr

__getattr__ = lenient_getattr(__name__)
