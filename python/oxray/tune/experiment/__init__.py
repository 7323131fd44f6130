"""`oxray.tune.experiment`: Ray's home of `Trial`, which schedulers and callbacks of
the user's own import to compare statuses (`Trial.PENDING`, ...)."""

from oxray.tune._internal.trial import Trial

__all__ = ["Trial"]
