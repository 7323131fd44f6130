"""``ray.air._internal``: only ``uri_utils`` (see ``ray/air/__init__.py``)."""

from _ray_compat_shim import lenient_getattr

__getattr__ = lenient_getattr(__name__)
