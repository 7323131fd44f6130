"""`oxray.tune.schedulers.median_stopping_rule`: Ray's module path of `MedianStoppingRule`."""

from oxray.tune.schedulers import MedianStoppingRule

__all__ = ["MedianStoppingRule"]
