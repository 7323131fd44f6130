"""`oxray.air` (`ray.air`): the names Ray 2.60 still keeps under `ray.air` for Tune and Train
users: `ray.air.constants` and the configs and `Result` (Tune's, as `ray.air` re-exports them).
Everything loads on first use, so `import oxray` does not pay for Tune."""

import importlib

# name -> (module, attribute); attribute None: the module itself.
_LAZY = {
    "constants": ("oxray.air.constants", None),
    "session": ("oxray.tune.session", None),
    "RunConfig": ("oxray.tune.tune_config", "RunConfig"),
    "CheckpointConfig": ("oxray.tune.tune_config", "CheckpointConfig"),
    "FailureConfig": ("oxray.tune.tune_config", "FailureConfig"),
    "ScalingConfig": ("oxray.train.config", "ScalingConfig"),
    "Result": ("oxray.tune.result_grid", "Result"),
}


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'oxray.air' has no attribute {name!r}")
    module, attribute = _LAZY[name]
    loaded = importlib.import_module(module)
    value = loaded if attribute is None else getattr(loaded, attribute)
    globals()[name] = value
    return value


__all__ = ["CheckpointConfig", "FailureConfig", "Result", "RunConfig", "ScalingConfig"]
