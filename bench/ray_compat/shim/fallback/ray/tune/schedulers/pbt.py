"""``ray.tune.schedulers.pbt``, where oxray lacks it: Ray's module path of public Tune
classes that oxray serves as ``oxray.tune.schedulers`` (README.md lists them)."""

from _ray_compat_shim import lenient_getattr

from oxray.tune.schedulers import PopulationBasedTraining, PopulationBasedTrainingReplay  # noqa: F401

__getattr__ = lenient_getattr(__name__)
