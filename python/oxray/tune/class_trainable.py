"""Ray's class API: a `Trainable` subclass sets up in `setup(config)`, runs
one iteration per `step()`, and saves and loads itself with
`save_checkpoint(dir)` / `load_checkpoint(checkpoint)`. In a trial it is
driven by `run_class_trainable`: a step's result is reported, with a
checkpoint every `checkpoint_frequency` steps and at the end when
`checkpoint_at_end`; `cleanup()` runs however the trial ends, a stop by Tune
included."""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile
from typing import Optional

from oxray.train._checkpoint import Checkpoint

# `save_checkpoint` may return a dict instead of writing files: it is kept here, in the checkpoint.
_DICT_CHECKPOINT = "_dict_checkpoint.pkl"


class Trainable:
    def __init__(self, config: Optional[dict] = None, logger_creator=None, storage=None):
        if logger_creator is not None or storage is not None:
            raise NotImplementedError("Trainable(logger_creator=, storage=) is not supported by oxray's Tune")
        from oxray.tune import session

        self.config = dict(config or {})
        self._iteration = 0
        self._info = session._session.info if session._session is not None else {}
        self.setup(dict(self.config))

    # Ray's read-only facts.
    @property
    def iteration(self) -> int:
        return self._iteration

    @property
    def training_iteration(self) -> int:
        return self._iteration

    @property
    def trial_id(self) -> str:
        return self._info.get("trial_id", "default")

    @property
    def trial_name(self) -> str:
        return self._info.get("trial_name", "default")

    @property
    def logdir(self) -> str:
        return self._info.get("trial_dir") or os.getcwd()

    @property
    def trial_resources(self) -> dict:
        return dict(self._info.get("resources", {}))

    # What a subclass writes.
    def setup(self, config: dict) -> None:
        pass

    def step(self) -> dict:
        raise NotImplementedError(f"{type(self).__name__}.step() must return a dict of metrics")

    def save_checkpoint(self, checkpoint_dir: str) -> Optional[dict]:
        return None

    def load_checkpoint(self, checkpoint) -> None:
        pass

    def reset_config(self, new_config: dict) -> bool:
        return False

    def cleanup(self) -> None:
        pass

    @classmethod
    def default_resource_request(cls, config: dict):
        return None

    # Driving it by hand, as Ray allows.
    def train(self) -> dict:
        result = self.step()
        if not isinstance(result, dict):
            raise ValueError(f"{type(self).__name__}.step() returned {result!r}; expected a dict of metrics")
        self._iteration += 1
        return dict(result, training_iteration=self._iteration)

    def save(self, checkpoint_dir: Optional[str] = None) -> str:
        checkpoint_dir = checkpoint_dir or tempfile.mkdtemp(prefix="checkpoint_")
        os.makedirs(checkpoint_dir, exist_ok=True)
        returned = self.save_checkpoint(checkpoint_dir)
        if isinstance(returned, dict):
            with open(os.path.join(checkpoint_dir, _DICT_CHECKPOINT), "wb") as f:
                pickle.dump(returned, f)
        elif returned is not None and os.path.abspath(str(returned)) != os.path.abspath(checkpoint_dir):
            raise ValueError(
                f"{type(self).__name__}.save_checkpoint returned {returned!r}; expected None, a dict, or the "
                "directory it was given"
            )
        return checkpoint_dir

    def restore(self, checkpoint_dir: str) -> None:
        saved = os.path.join(checkpoint_dir, _DICT_CHECKPOINT)
        if os.path.exists(saved):
            with open(saved, "rb") as f:
                self.load_checkpoint(pickle.load(f))
        else:
            self.load_checkpoint(checkpoint_dir)

    def stop(self) -> None:
        self.cleanup()


def is_class_trainable(trainable) -> bool:
    return isinstance(trainable, type) and issubclass(trainable, Trainable)


# The instance a trial left on this actor, for the next trial's `reset_config` (reuse_actors).
_kept: dict = {}


def cleanup_kept() -> None:
    """`cleanup()` of every kept instance (the actor is going)."""
    while _kept:
        _, trainable = _kept.popitem()
        trainable.cleanup()


def _instance(cls, config: dict):
    """The instance a trial here left, when `reset_config` takes the new config (Ray's reuse);
    else a new one, the old one cleaned up."""
    from oxray.tune import session

    kept = _kept.pop(cls, None)
    cleanup_kept()
    if kept is not None:
        if kept.reset_config(dict(config)) is True:
            kept.config = dict(config)
            kept._iteration = 0
            kept._info = session._session.info
            return kept
        kept.cleanup()
    return cls(config)


def run_class_trainable(cls, config: dict, checkpoint_frequency: int, checkpoint_at_end: bool) -> None:
    """The trial's body for a class trainable."""
    from oxray.tune import session

    trainable = _instance(cls, config)
    try:
        checkpoint = session.get_checkpoint()
        if checkpoint is not None:
            with checkpoint.as_directory() as d:
                trainable.restore(d)
            trainable._iteration = int(session._session.actor.iteration)
        while True:
            result = trainable.step()
            if not isinstance(result, dict):
                raise ValueError(f"{cls.__name__}.step() returned {result!r}; expected a dict of metrics")
            trainable._iteration += 1
            done = bool(result.get("done"))
            due = checkpoint_frequency and trainable._iteration % checkpoint_frequency == 0
            if due or (done and checkpoint_at_end):
                directory = trainable.save()
                try:
                    session.report(result, checkpoint=Checkpoint.from_directory(directory))
                finally:
                    shutil.rmtree(directory, ignore_errors=True)
            else:
                session.report(result)
            if done:
                return
    finally:
        if session._session.actor.keep_instance:
            _kept[cls] = trainable
        else:
            trainable.cleanup()
