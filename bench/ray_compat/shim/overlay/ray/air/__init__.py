"""``ray.air``: oxray's ``oxray.air`` (``constants``, the configs, ``Result``), plus the one
helper of ``ray.air._internal`` that Tune's test files use as a path helper
(``uri_utils.URI``), which oxray does not have."""

from _ray_compat_shim import lenient_getattr

import oxray.air as _oxray_air

__getattr__ = lenient_getattr(__name__, _oxray_air.__getattr__)
