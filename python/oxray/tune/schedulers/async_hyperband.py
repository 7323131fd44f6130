"""`oxray.tune.schedulers.async_hyperband`: Ray's module path of `ASHAScheduler` and `AsyncHyperBandScheduler`."""

from oxray.tune.schedulers import ASHAScheduler, AsyncHyperBandScheduler

__all__ = ["ASHAScheduler", "AsyncHyperBandScheduler"]
