"""Ray's `tune.Experiment`: one experiment's settings, for `tune.run_experiments` (and
`tune.run`), written as an object or as a `{name: spec}` dict."""

from __future__ import annotations

from typing import Any, Callable, Optional

# The settings an Experiment carries to `tune.run`, by Ray's names.
_RUN_SETTINGS = (
    "stop",
    "time_budget_s",
    "config",
    "resources_per_trial",
    "num_samples",
    "storage_path",
    "checkpoint_config",
    "trial_name_creator",
    "trial_dirname_creator",
    "log_to_file",
    "max_failures",
)


class Experiment:
    def __init__(
        self,
        name: str,
        run: Any,
        *,
        stop: Any = None,
        time_budget_s: Any = None,
        config: Optional[dict] = None,
        resources_per_trial: Any = None,
        num_samples: int = 1,
        storage_path: Optional[str] = None,
        storage_filesystem: Any = None,
        sync_config: Any = None,
        checkpoint_config: Any = None,
        trial_name_creator: Optional[Callable] = None,
        trial_dirname_creator: Optional[Callable] = None,
        log_to_file: Any = False,
        export_formats: Any = None,
        max_failures: int = 0,
        restore: Optional[str] = None,
    ):
        refused = {
            "storage_filesystem": storage_filesystem,
            "sync_config": sync_config,
            "export_formats": export_formats or None,
            "restore": restore,
        }
        for option, value in refused.items():
            if value is not None:
                raise NotImplementedError(
                    f"Experiment({option}={value!r}) is not supported by oxray; use tune.Tuner with RunConfig "
                    "(and Tuner.restore for a restore)"
                )
        if not isinstance(name, str) or not name:
            raise ValueError(f"Experiment(name={name!r}): expected a non-empty string")
        self.name, self.run = name, run
        self.stop, self.time_budget_s, self.config = stop, time_budget_s, config or {}
        self.resources_per_trial, self.num_samples, self.storage_path = resources_per_trial, num_samples, storage_path
        self.checkpoint_config = checkpoint_config
        self.trial_name_creator, self.trial_dirname_creator = trial_name_creator, trial_dirname_creator
        self.log_to_file, self.max_failures = log_to_file, max_failures

    @classmethod
    def from_json(cls, name: str, spec: dict) -> "Experiment":
        """Ray's dict form: `{"run": trainable, "config": {...}, "stop": {...}, ...}`."""
        if not isinstance(spec, dict) or "run" not in spec:
            raise ValueError(f"experiment {name!r}: expected a dict with a 'run' key (the trainable); got {spec!r}")
        spec = dict(spec)
        run = spec.pop("run")
        unknown = sorted(set(spec) - set(_RUN_SETTINGS) - {"storage_filesystem", "sync_config", "export_formats"})
        if unknown:
            raise TypeError(f"experiment {name!r} has keys Experiment does not take: {unknown}")
        return cls(name, run, **spec)

    def run_settings(self) -> dict:
        """The `tune.run` arguments this experiment stands for."""
        return {"name": self.name, **{key: getattr(self, key) for key in _RUN_SETTINGS}}

    def __repr__(self):
        return f"Experiment({self.name!r})"
