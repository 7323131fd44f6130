"""`oxray.train`: distributed training with Ray Train v2's API."""

from oxray.train._checkpoint import Checkpoint
from oxray.train._internal.session import CheckpointUploadMode, get_checkpoint, get_context, get_dataset_shard, report
from oxray.train._internal.trainer import DataParallelTrainer
from oxray.train._result import Result
from oxray.train.callback import UserCallback
from oxray.train.config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from oxray.train.exceptions import ControllerError, TrainingFailedError, WorkerGroupError

__all__ = [
    "Checkpoint",
    "CheckpointConfig",
    "CheckpointUploadMode",
    "ControllerError",
    "DataParallelTrainer",
    "FailureConfig",
    "Result",
    "RunConfig",
    "ScalingConfig",
    "TrainingFailedError",
    "UserCallback",
    "WorkerGroupError",
    "get_checkpoint",
    "get_context",
    "get_dataset_shard",
    "report",
]
