"""`DataParallelTrainer`: the base of `TorchTrainer`."""

from __future__ import annotations

from typing import Any, Callable, Optional

import oxray
from oxray.train._internal.controller import TrainController
from oxray.train._internal.data_config import check_data_config
from oxray.train._result import Result
from oxray.train.config import RunConfig, ScalingConfig


class DataParallelTrainer:
    def __init__(
        self,
        train_loop_per_worker: Callable,
        *,
        train_loop_config: Optional[dict] = None,
        backend_config: Any = None,
        scaling_config: Optional[ScalingConfig] = None,
        run_config: Optional[RunConfig] = None,
        datasets: Optional[dict] = None,
        dataset_config: Any = None,
        validation_config: Any = None,
        resume_from_checkpoint: Any = None,
        metadata: Any = None,
    ):
        name = type(self).__name__
        if not callable(train_loop_per_worker):
            raise TypeError(
                f"{name}(train_loop_per_worker=...) must be a function, got {type(train_loop_per_worker).__name__}"
            )
        if resume_from_checkpoint is not None or metadata is not None:  # Ray Train v2 raises the same
            raise DeprecationWarning(
                f"{name}(resume_from_checkpoint=..., metadata=...) is deprecated in Ray Train v2: call "
                "oxray.train.get_checkpoint() in the training function, "
                "and rerun with the same RunConfig(name, storage_path) to resume"
            )
        if train_loop_config is not None and not isinstance(train_loop_config, dict):
            raise TypeError(f"{name}(train_loop_config=...) must be a dict, got {type(train_loop_config).__name__}")
        if train_loop_config is not None and _num_params(train_loop_per_worker) == 0:
            raise ValueError(
                f"{name}: train_loop_config was given, "
                f"but {getattr(train_loop_per_worker, '__name__', 'the training function')} "
                "takes no argument; define it as `def train_loop_per_worker(config):`"
            )
        scaling_config = scaling_config if scaling_config is not None else ScalingConfig()
        run_config = run_config if run_config is not None else RunConfig()
        if not isinstance(scaling_config, ScalingConfig):
            raise TypeError(
                f"{name}(scaling_config=...) must be an oxray.train.ScalingConfig, got {type(scaling_config).__name__}"
            )
        if not isinstance(run_config, RunConfig):
            raise TypeError(f"{name}(run_config=...) must be an oxray.train.RunConfig, got {type(run_config).__name__}")
        run_config.check_storage()
        if validation_config is not None:
            raise ValueError(f"{name}(validation_config=...) is not supported by oxray yet")
        from oxray.train.backend import BackendConfig

        backend_config = backend_config if backend_config is not None else BackendConfig()
        if not isinstance(backend_config, BackendConfig):
            raise TypeError(
                f"{name}(backend_config=...) must be an oxray.train.backend.BackendConfig, "
                f"got {type(backend_config).__name__}"
            )
        if getattr(backend_config.backend_cls, "share_cuda_visible_devices", False):
            raise NotImplementedError(
                f"{name}: Backend.share_cuda_visible_devices=True is not supported by oxray yet: "
                "each worker sees only its own GPUs"
            )
        self.dataset_config = check_data_config(dataset_config, name)
        if datasets is not None and not isinstance(datasets, dict):
            raise TypeError(f"{name}(datasets=...) must be a dict of name -> Dataset, got {type(datasets).__name__}")
        self.train_loop_per_worker = train_loop_per_worker
        # Ray calls the loop with a config only when it takes one.
        if train_loop_config is None and _num_params(train_loop_per_worker) > 0:
            train_loop_config = {}
        self.train_loop_config = train_loop_config
        self.backend_config = backend_config
        self.scaling_config = scaling_config
        self.run_config = run_config
        self.datasets = datasets or {}

    def _backend_setup(self) -> Callable[[], None]:
        return _no_setup

    @classmethod
    def restore(cls, *args, **kwargs):
        """Removed in Ray Train v2 (it raises there too): resume a run by running it again."""
        raise DeprecationWarning(_RESTORE_REMOVED.format(name=cls.__name__, what="restore"))

    @classmethod
    def can_restore(cls, *args, **kwargs):
        raise DeprecationWarning(_RESTORE_REMOVED.format(name=cls.__name__, what="can_restore"))

    def fit(self) -> Result:
        """Runs training to the end and returns its `Result`; raises
        `TrainingFailedError` when it fails more than `max_failures` times."""
        if not oxray.is_initialized():
            oxray.init()
        controller = TrainController(
            self.train_loop_per_worker,
            self.train_loop_config,
            self.scaling_config,
            self.run_config,
            self._backend_setup(),
            self.datasets,
            self.dataset_config,
            backend_config=self.backend_config,
        )
        return controller.run()


_RESTORE_REMOVED = (
    "{name}.{what}() is deprecated in Ray Train v2: to resume a run, create the trainer again with the same "
    "RunConfig(name=..., storage_path=...) and call fit(); the training function gets the latest checkpoint "
    "from oxray.train.get_checkpoint()"
)


def _no_setup() -> None:
    return None


def _num_params(fn) -> int:
    import inspect

    try:
        return len(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return 1
