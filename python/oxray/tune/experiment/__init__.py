"""`oxray.tune.experiment`: Ray's home of `Trial`, which schedulers and callbacks of
the user's own import to compare statuses (`Trial.PENDING`, ...), and of `Experiment`."""

from oxray.tune._internal.trial import Trial
from oxray.tune.experiment.experiment import Experiment

__all__ = ["Experiment", "Trial"]
