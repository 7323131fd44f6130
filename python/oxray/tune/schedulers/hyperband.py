"""`oxray.tune.schedulers.hyperband`: Ray's module path of `HyperBandScheduler`."""

from oxray.tune.schedulers import HyperBandScheduler

__all__ = ["HyperBandScheduler"]
