"""`UserCallback`: hooks that run in the driver's controller (Ray Train v2)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional


class TrainRunContext:
    """What a callback learns about the run."""

    def __init__(self, run_config, scaling_config, train_loop_config):
        self.run_config = run_config
        self.scaling_config = scaling_config
        self.train_loop_config = train_loop_config

    def get_run_config(self):
        return self.run_config


class UserCallback:
    """Subclass and pass in `RunConfig(callbacks=[...])`."""

    def after_report(
        self, run_context: TrainRunContext, metrics: List[Dict[str, Any]], checkpoint: Optional[Any]
    ) -> None:
        """After every report: each rank's metrics (index = rank) and the
        registered checkpoint, if any rank gave one."""

    def after_exception(self, run_context: TrainRunContext, worker_exceptions: Dict[int, Exception]) -> None:
        """After an attempt failed: the failing rank's error."""
