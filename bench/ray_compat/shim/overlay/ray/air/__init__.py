"""``ray.air``: oxray has no Ray AIR package; the overlay holds the one helper of
``ray.air._internal`` that Tune's test files use as a path helper (``uri_utils.URI``)."""

from _ray_compat_shim import lenient_getattr

__getattr__ = lenient_getattr(__name__)
