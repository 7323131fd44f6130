"""`TorchTrainer`: data-parallel PyTorch training over torch.distributed."""

from __future__ import annotations

from typing import Any, Callable, Optional

from oxray.train._internal.trainer import DataParallelTrainer
from oxray.train.config import RunConfig, ScalingConfig
from oxray.train.torch.config import TorchConfig, shutdown_timeout_s


class TorchTrainer(DataParallelTrainer):
    def __init__(
        self,
        train_loop_per_worker: Callable,
        *,
        train_loop_config: Optional[dict] = None,
        torch_config: Optional[TorchConfig] = None,
        scaling_config: Optional[ScalingConfig] = None,
        run_config: Optional[RunConfig] = None,
        datasets: Optional[dict] = None,
        dataset_config: Any = None,
        validation_config: Any = None,
        resume_from_checkpoint: Any = None,
        metadata: Any = None,
    ):
        torch_config = torch_config if torch_config is not None else TorchConfig()
        if not isinstance(torch_config, TorchConfig):
            raise TypeError(f"TorchTrainer(torch_config=...) must be a TorchConfig, got {type(torch_config).__name__}")
        shutdown_timeout_s()  # a bad TORCH_PROCESS_GROUP_SHUTDOWN_TIMEOUT_S fails here, not at the end
        super().__init__(
            train_loop_per_worker,
            train_loop_config=train_loop_config,
            backend_config=torch_config,
            scaling_config=scaling_config,
            run_config=run_config,
            datasets=datasets,
            dataset_config=dataset_config,
            validation_config=validation_config,
            resume_from_checkpoint=resume_from_checkpoint,
            metadata=metadata,
        )

    def _backend_setup(self):
        return self.backend_config.worker_setup(self.scaling_config.use_gpu)
