"""``ray.tune.experiment.trial``, where oxray lacks it: Ray's module path of ``Trial``, which
oxray serves as ``oxray.tune.experiment.Trial`` (README.md lists these paths)."""

from _ray_compat_shim import lenient_getattr

from oxray.tune.experiment import Trial  # noqa: F401

__getattr__ = lenient_getattr(__name__)
