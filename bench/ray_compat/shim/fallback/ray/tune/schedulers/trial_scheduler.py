"""``ray.tune.schedulers.trial_scheduler``, where oxray lacks it: Ray's module path of public Tune
classes that oxray serves as ``oxray.tune.schedulers`` (README.md lists them)."""

from _ray_compat_shim import lenient_getattr

from oxray.tune.schedulers import FIFOScheduler, TrialScheduler  # noqa: F401

__getattr__ = lenient_getattr(__name__)
