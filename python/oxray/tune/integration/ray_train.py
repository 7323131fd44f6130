"""`TuneReportCallback`: forwards a Ray Train run's reports to the Tune trial
that started it, as Ray 2.60's: rank 0's metrics, with `checkpoint_path`
when a checkpoint was reported, one Tune iteration per report."""

from __future__ import annotations

import warnings
from typing import Any, Dict, List, Optional

from oxray.train.callback import UserCallback

CHECKPOINT_PATH_KEY = "checkpoint_path"


class TuneReportCallback(UserCallback):
    def __init__(self):
        self._warned = False

    def after_report(self, run_context, metrics: List[Dict[str, Any]], checkpoint: Optional[Any]) -> None:
        from oxray.tune import session as tune_session

        if tune_session._session is None:
            # The trial function called directly (Ray's guide does, once): nothing to forward to.
            if not self._warned:
                warnings.warn(
                    "TuneReportCallback: this Train run is not inside a Tune trial, so its reports go to Train only",
                    stacklevel=2,
                )
                self._warned = True
            return
        forwarded = dict(metrics[0])
        if checkpoint is not None:
            forwarded[CHECKPOINT_PATH_KEY] = checkpoint.path
        tune_session.report(forwarded)
