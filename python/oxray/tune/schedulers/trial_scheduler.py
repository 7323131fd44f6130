"""`oxray.tune.schedulers.trial_scheduler`: Ray's module path of `FIFOScheduler` and `TrialScheduler`."""

from oxray.tune.schedulers import FIFOScheduler, TrialScheduler

__all__ = ["FIFOScheduler", "TrialScheduler"]
