"""`oxray.train`: distributed training with Ray Train v2's API."""

from oxray.train import collective
from oxray.train._checkpoint import Checkpoint
from oxray.train._internal.data_config import DataConfig
from oxray.train._internal.session import (
    CheckpointUploadMode,
    ReportedCheckpoint,
    get_all_reported_checkpoints,
    get_checkpoint,
    get_context,
    get_dataset_shard,
    report,
)
from oxray.train._internal.trainer import DataParallelTrainer
from oxray.train._result import Result
from oxray.train.backend import BackendConfig
from oxray.train.callback import UserCallback
from oxray.train.config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from oxray.train.exceptions import ControllerError, TrainingFailedError, WorkerGroupError


def __getattr__(name):
    # `oxray.train.torch` (and with it torch itself) loads on first use, so
    # `import oxray.train` stays light and `ray.train.torch.TorchTrainer` works.
    if name == "torch":
        import importlib

        return importlib.import_module("oxray.train.torch")
    raise AttributeError(f"module 'oxray.train' has no attribute {name!r}")


__all__ = [
    "BackendConfig",
    "Checkpoint",
    "CheckpointConfig",
    "CheckpointUploadMode",
    "ControllerError",
    "DataConfig",
    "DataParallelTrainer",
    "FailureConfig",
    "ReportedCheckpoint",
    "Result",
    "RunConfig",
    "ScalingConfig",
    "TrainingFailedError",
    "UserCallback",
    "WorkerGroupError",
    "collective",
    "get_all_reported_checkpoints",
    "get_checkpoint",
    "get_context",
    "get_dataset_shard",
    "report",
]
