"""The API a trial's code calls: `tune.report`, `tune.get_checkpoint`,
`tune.get_context`. A trial runs in an actor of its own (`_internal/trial_actor.py`),
which sets the session for the trial's thread."""

from __future__ import annotations

from typing import Optional

from oxray.train._checkpoint import Checkpoint

_session = None


class TuneContext:
    """What a trial knows about itself."""

    def __init__(self, info: dict):
        self._info = info

    def get_trial_id(self) -> str:
        return self._info["trial_id"]

    def get_trial_name(self) -> str:
        return self._info["trial_name"]

    def get_trial_dir(self) -> str:
        return self._info["trial_dir"]

    def get_trial_resources(self) -> dict:
        return dict(self._info["resources"])

    def get_experiment_name(self) -> str:
        return self._info["experiment_name"]

    def get_storage(self):
        return None

    # Ray keeps these on Tune's context (one process per trial).
    def get_world_size(self) -> int:
        return 1

    def get_world_rank(self) -> int:
        return 0

    def get_local_rank(self) -> int:
        return 0

    def get_local_world_size(self) -> int:
        return 1

    def get_node_rank(self) -> int:
        return 0


def _current(what: str):
    if _session is None:
        raise RuntimeError(
            f"tune.{what}() is called outside a Tune trial: call it in the trainable a Tuner runs "
            "(in a Ray Train worker, use ray.train.{what} instead)"
        )
    return _session


def report(metrics: dict, *, checkpoint: Optional[Checkpoint] = None) -> None:
    """Reports `metrics` (a dict) for this trial's next iteration, with an optional checkpoint that
    Tune keeps as `checkpoint_<index>` in the trial's directory."""
    if not isinstance(metrics, dict):
        raise ValueError(f"tune.report({metrics!r}): expected a dict of metrics")
    if checkpoint is not None and not isinstance(checkpoint, Checkpoint):
        raise ValueError(f"tune.report(checkpoint={checkpoint!r}): expected a tune.Checkpoint")
    _current("report").report(metrics, checkpoint)


def get_checkpoint() -> Optional[Checkpoint]:
    """The latest checkpoint of this trial after a retry or restore; None on a first run."""
    return _current("get_checkpoint").latest_checkpoint()


def get_context() -> TuneContext:
    """This trial's context. Outside a trial (a trial function called directly), as in Ray, a
    context whose getters return None, with a warning."""
    if _session is None:
        import warnings

        warnings.warn(
            "tune.get_context() is called outside a Tune trial: its trial id, name and directory are None",
            stacklevel=2,
        )
        return TuneContext(
            dict.fromkeys(("trial_id", "trial_name", "trial_dir", "experiment_name"), None) | {"resources": {}}
        )
    return TuneContext(_session.info)
