"""`tune.register_trainable(name, trainable)`: a Tuner given the name runs the
trainable; `register_env` is refused (RLlib environments are not part of
oxray)."""

from __future__ import annotations

from typing import Callable

_TRAINABLES: dict = {}


def register_trainable(name: str, trainable: Callable, warn: bool = True) -> None:
    if not isinstance(name, str) or not name:
        raise ValueError(f"register_trainable({name!r}, ...): expected a non-empty name")
    if not callable(trainable):
        raise ValueError(f"register_trainable({name!r}, {trainable!r}): expected a function or a Trainable class")
    _TRAINABLES[name] = trainable


def get_trainable(name: str) -> Callable:
    try:
        return _TRAINABLES[name]
    except KeyError:
        raise ValueError(
            f"no trainable is registered as {name!r}; registered: {sorted(_TRAINABLES)} "
            "(tune.register_trainable(name, trainable) first)"
        ) from None


def register_env(name: str, env_creator: Callable) -> None:
    raise NotImplementedError("tune.register_env registers RLlib environments; RLlib is not part of oxray")
