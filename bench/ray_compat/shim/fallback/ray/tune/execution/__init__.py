"""``ray.tune.execution``, where oxray lacks it: Tune's execution internals; the fallback
holds only ``placement_groups`` (the documented path of ``PlacementGroupFactory``)."""

from _ray_compat_shim import lenient_getattr

__getattr__ = lenient_getattr(__name__)
