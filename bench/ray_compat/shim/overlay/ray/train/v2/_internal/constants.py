"""Train v2 test files assert ``is_v2_enabled()`` at import: oxray's Train is v2."""

from _ray_compat_shim import lenient_getattr

__getattr__ = lenient_getattr(__name__)


def is_v2_enabled() -> bool:
    return True
