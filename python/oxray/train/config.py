"""ScalingConfig, RunConfig, FailureConfig and CheckpointConfig, checked the way
Ray checks them, with errors that name the bad value and what was expected."""

from __future__ import annotations

import datetime
import numbers
import os
from dataclasses import dataclass
from typing import Any, Optional, Union

from oxray.train.callback import UserCallback


def _is_number(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


@dataclass
class ScalingConfig:
    num_workers: Union[int, tuple] = 1
    use_gpu: bool = False
    resources_per_worker: Optional[dict] = None
    placement_strategy: str = "PACK"
    accelerator_type: Optional[str] = None
    label_selector: Optional[Union[dict, list]] = None
    use_tpu: bool = False
    topology: Optional[str] = None
    trainer_resources: Optional[dict] = None

    def __post_init__(self):
        if self.trainer_resources is not None:
            raise DeprecationWarning(
                "ScalingConfig(trainer_resources=...) is deprecated in Ray Train v2: the training function "
                "runs only on the workers, so give their resources with resources_per_worker"
            )
        if isinstance(self.num_workers, tuple):
            raise ValueError(
                f"ScalingConfig(num_workers={self.num_workers!r}): elastic (min_workers, max_workers) worker "
                "counts are not supported; pass an integer >= 1"
            )
        if not _is_int(self.num_workers) or self.num_workers < 1:
            raise ValueError(f"ScalingConfig(num_workers={self.num_workers!r}): expected an integer >= 1")
        if not isinstance(self.use_gpu, bool):
            raise ValueError(f"ScalingConfig(use_gpu={self.use_gpu!r}): expected True or False")
        if self.use_tpu:
            raise ValueError("ScalingConfig(use_tpu=True): TPUs are not supported by oxray")
        if self.topology is not None:
            raise ValueError("ScalingConfig(topology=...) is not supported by oxray yet; use resources_per_worker")
        if self.label_selector is not None:
            self._check_label_selector()
        if self.placement_strategy not in ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"):
            raise ValueError(
                f"ScalingConfig(placement_strategy={self.placement_strategy!r}): expected one of "
                "'PACK', 'SPREAD', 'STRICT_PACK', 'STRICT_SPREAD'"
            )
        if self.resources_per_worker is not None:
            self._check_resources_per_worker()

    def _check_label_selector(self) -> None:
        from oxray._private.options import check_label_selector

        selectors = self.label_selector if isinstance(self.label_selector, list) else [self.label_selector]
        if isinstance(self.label_selector, list) and len(selectors) != self.num_workers:
            raise ValueError(
                f"ScalingConfig(label_selector=...): a list needs one selector per worker ({self.num_workers}), "
                f"got {len(selectors)}"
            )
        for selector in selectors:
            check_label_selector(selector, "ScalingConfig(label_selector=...)")

    def _check_resources_per_worker(self) -> None:
        if not isinstance(self.resources_per_worker, dict):
            raise ValueError(
                f"ScalingConfig(resources_per_worker={self.resources_per_worker!r}): expected a dict like {{'CPU': 1}}"
            )
        for k, v in self.resources_per_worker.items():
            if not isinstance(k, str) or not k:
                raise ValueError(f"ScalingConfig(resources_per_worker=...): resource names must be strings, got {k!r}")
            if not _is_number(v) or v < 0:
                raise ValueError(f"ScalingConfig(resources_per_worker=...): {k!r} must be a number >= 0, got {v!r}")
        if not self.resources_per_worker:
            return
        # Ray's checks, in Ray's words: with use_gpu, a worker asks 1 GPU unless told otherwise.
        gpus = self.resources_per_worker.get("GPU", 1 if self.use_gpu else 0)
        if gpus and not self.use_gpu:
            raise ValueError(
                "`use_gpu` is False but `GPU` was found in `resources_per_worker`. Either set `use_gpu` to True "
                "or remove `GPU` from `resources_per_worker."
            )
        if self.use_gpu and not gpus:
            raise ValueError(
                "`use_gpu` is True but `GPU` is set to 0 in `resources_per_worker`. Either set `use_gpu` to False "
                "or request a positive number of `GPU` in `resources_per_worker."
            )

    @property
    def worker_resources(self) -> dict:
        """What each worker holds, as Ray computes it."""
        if self.resources_per_worker is not None:
            res = {k: float(v) for k, v in self.resources_per_worker.items() if v}
            if self.use_gpu and "GPU" not in res:
                res["GPU"] = 1.0
        else:
            res = {"GPU": 1.0} if self.use_gpu else {"CPU": 1.0}
        if self.accelerator_type:
            res[f"accelerator_type:{self.accelerator_type}"] = 0.001
        return res

    @property
    def worker_label_selectors(self) -> list:
        """Each worker's label selector (its placement-group bundle's), or [] for none."""
        if not self.label_selector:
            return []
        if isinstance(self.label_selector, list):
            return [dict(s) for s in self.label_selector]
        return [dict(self.label_selector) for _ in range(self.num_workers)]

    @property
    def total_resources(self) -> dict:
        return {k: v * self.num_workers for k, v in self.worker_resources.items()}


@dataclass
class FailureConfig:
    max_failures: int = 0
    controller_failure_limit: int = -1
    max_preemption_failures: int = -1
    fail_fast: Any = None

    def __post_init__(self):
        if not _is_int(self.max_failures) or self.max_failures < -1:
            raise ValueError(
                f"FailureConfig(max_failures={self.max_failures!r}): expected an integer >= 0, or -1 for unlimited"
            )
        if self.fail_fast is not None:
            raise DeprecationWarning("FailureConfig(fail_fast=...) is deprecated in Ray Train v2 and not supported")
        # Ray's defaults (-1: no separate limit) ask for nothing; anything else is refused, not ignored.
        for name, why in (
            ("controller_failure_limit", "the Train controller runs in the driver and is not restarted"),
            ("max_preemption_failures", "preemptions are counted as ordinary failures (max_failures)"),
        ):
            if getattr(self, name) != -1:
                raise NotImplementedError(
                    f"FailureConfig({name}={getattr(self, name)!r}) is not supported by oxray: {why}"
                )


@dataclass
class CheckpointConfig:
    num_to_keep: Optional[int] = None
    checkpoint_score_attribute: Optional[str] = None
    checkpoint_score_order: str = "max"
    checkpoint_frequency: Any = None
    checkpoint_at_end: Any = None

    def __post_init__(self):
        if self.num_to_keep is not None and (not _is_int(self.num_to_keep) or self.num_to_keep < 1):
            raise ValueError(
                f"CheckpointConfig(num_to_keep={self.num_to_keep!r}): expected None (keep all) or an integer >= 1"
            )
        if self.checkpoint_score_order not in ("max", "min"):
            raise ValueError(
                f"CheckpointConfig(checkpoint_score_order={self.checkpoint_score_order!r}): expected 'max' or 'min'"
            )
        if self.checkpoint_score_attribute is not None and not isinstance(self.checkpoint_score_attribute, str):
            raise ValueError(
                f"CheckpointConfig(checkpoint_score_attribute={self.checkpoint_score_attribute!r}): "
                "expected a metric name"
            )
        for old in ("checkpoint_frequency", "checkpoint_at_end"):
            if getattr(self, old) is not None:
                raise DeprecationWarning(
                    f"CheckpointConfig({old}=...) is deprecated in Ray Train v2; "
                    "call report() with a checkpoint instead"
                )


_TUNE_ERAS = ("sync_config", "verbose", "stop", "progress_reporter", "log_to_file")


@dataclass
class RunConfig:
    name: Optional[str] = None
    storage_path: Optional[str] = None
    storage_filesystem: Any = None
    failure_config: Optional[FailureConfig] = None
    checkpoint_config: Optional[CheckpointConfig] = None
    callbacks: Optional[list] = None
    worker_runtime_env: Optional[dict] = None
    logging_config: Any = None
    sync_config: Any = None
    verbose: Any = None
    stop: Any = None
    progress_reporter: Any = None
    log_to_file: Any = None

    def _resolve_storage(self) -> None:
        if self.storage_path is None:
            self.storage_path = os.path.expanduser("~/ray_results")
        if not isinstance(self.storage_path, (str, os.PathLike)):
            raise ValueError(f"RunConfig(storage_path={self.storage_path!r}): expected a local path or an s3:// URI")
        from oxray.train._internal.storage import options_for, resolve

        # S3 options (a pyarrow S3FileSystem's, or a ?query) stay with the root, registered for every
        # open here, and passed to the workers.
        self.storage_path = resolve(self.storage_path, self.storage_filesystem, "RunConfig(storage_filesystem=...)")
        self._storage_options = options_for(self.storage_path)
        if "://" not in self.storage_path:
            self.storage_path = os.path.abspath(os.path.expanduser(self.storage_path))

    def check_storage(self) -> None:
        """Raises if this config cannot name where a run is stored."""
        if self._storage_error:
            raise ValueError(self._storage_error)

    def __post_init__(self):
        for old in _TUNE_ERAS:
            if getattr(self, old) is not None:
                # Ray Train v2 raises a DeprecationWarning here too (it is an Exception).
                raise DeprecationWarning(
                    f"RunConfig({old}=...) belongs to Ray Tune and is not accepted by Ray Train v2"
                )
        if self.logging_config is not None:
            raise ValueError("RunConfig(logging_config=...) is not supported by oxray yet")
        if self.name is None:
            self.name = "ray_train_run-" + datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        from oxray.train._internal.storage import check_name

        check_name("RunConfig(name=...)", self.name)
        self._storage_error = None
        if self.storage_path is None and self.storage_filesystem is not None:
            # Accepted as in Ray, but a trainer refuses it (`check_storage`): there is no
            # default root on another filesystem.
            self._storage_error = (
                "RunConfig(storage_filesystem=...) needs storage_path: the run's root on that filesystem"
            )
            self._storage_options = ""
        else:
            self._resolve_storage()
        self.failure_config = self.failure_config or FailureConfig()
        self.checkpoint_config = self.checkpoint_config or CheckpointConfig()
        if not isinstance(self.failure_config, FailureConfig):
            raise ValueError(f"RunConfig(failure_config={self.failure_config!r}): expected a FailureConfig")
        if not isinstance(self.checkpoint_config, CheckpointConfig):
            raise ValueError(f"RunConfig(checkpoint_config={self.checkpoint_config!r}): expected a CheckpointConfig")
        self.callbacks = list(self.callbacks or [])
        for callback in self.callbacks:
            if not isinstance(callback, UserCallback):
                raise ValueError(
                    f"RunConfig(callbacks=...): {callback!r} is not an oxray.train.UserCallback; "
                    "Train v2 accepts only UserCallback subclasses"
                )
        if self.worker_runtime_env is not None and not isinstance(self.worker_runtime_env, dict):
            raise ValueError(
                f"RunConfig(worker_runtime_env={self.worker_runtime_env!r}): "
                "expected a dict like {'env_vars': {...}}"
            )
