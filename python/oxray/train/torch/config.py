"""`TorchConfig` and the process group set up in each worker."""

from __future__ import annotations

import datetime
import functools
import os
from dataclasses import dataclass
from typing import Optional

from oxray.train.backend import Backend, BackendConfig


class _TorchBackend(Backend):
    """Torch's process group is joined in each worker's setup (`worker_setup`)."""


@dataclass
class TorchConfig(BackendConfig):
    backend: Optional[str] = None
    init_method: str = "env"
    timeout_s: int = 1800

    def __post_init__(self):
        if self.backend not in (None, "gloo", "nccl"):
            raise ValueError(f"TorchConfig(backend={self.backend!r}): expected None, 'gloo' or 'nccl'")
        if self.init_method not in ("env", "tcp"):
            raise ValueError(f"TorchConfig(init_method={self.init_method!r}): expected 'env' or 'tcp'")
        if not isinstance(self.timeout_s, (int, float)) or self.timeout_s <= 0:
            raise ValueError(f"TorchConfig(timeout_s={self.timeout_s!r}): expected a number of seconds > 0")

    @property
    def backend_cls(self):
        return _TorchBackend

    def worker_setup(self, use_gpu: bool):
        backend = self.backend or ("nccl" if use_gpu else "gloo")
        return functools.partial(setup_process_group, backend, self.init_method, self.timeout_s, use_gpu)


def setup_process_group(backend: str, init_method: str, timeout_s: float, use_gpu: bool) -> None:
    """Joins this worker to the job's torch.distributed group (env set by the controller)."""
    import torch
    import torch.distributed as dist

    if use_gpu and torch.cuda.is_available():
        from oxray.train.torch.train_loop_utils import get_device

        torch.cuda.set_device(get_device())
    method = "env://" if init_method == "env" else f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    dist.init_process_group(
        backend=backend,
        init_method=method,
        rank=int(os.environ["RANK"]),
        world_size=int(os.environ["WORLD_SIZE"]),
        timeout=datetime.timedelta(seconds=timeout_s),
    )
