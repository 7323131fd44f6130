"""``ray.tune.error``, where oxray lacks it: Ray's module path of public Tune
classes that oxray serves as ``oxray.tune`` (README.md lists them)."""

from _ray_compat_shim import lenient_getattr

from oxray.tune import TuneError  # noqa: F401

__getattr__ = lenient_getattr(__name__)
