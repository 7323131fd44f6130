"""`TorchConfig` and the process group set up in each worker."""

from __future__ import annotations

import datetime
import functools
import os
from dataclasses import dataclass
from typing import Optional

from oxray.train.backend import Backend, BackendConfig


class _TorchBackend(Backend):
    """Torch's process group is joined in each worker's setup (`worker_setup`), and left
    when the group shuts down, each worker waiting at most
    `TORCH_PROCESS_GROUP_SHUTDOWN_TIMEOUT_S` seconds (a peer that died can hang it)."""

    def on_shutdown(self, worker_group, backend_config) -> None:
        import oxray

        if not getattr(worker_group, "training_finished", True):
            # A failed attempt: some rank may still be inside its training function (so a call
            # would wait behind it), and every worker is about to be stopped anyway.
            return
        timeout_s = shutdown_timeout_s()
        calls = worker_group.execute_async(leave_process_group, timeout_s)
        oxray.wait(calls, num_returns=len(calls), timeout=timeout_s + _CALL_MARGIN_S)


# Time for the calls themselves, beyond the destroy's own wait.
_CALL_MARGIN_S = 5.0


def shutdown_timeout_s() -> float:
    from oxray.train.constants import (
        DEFAULT_TORCH_PROCESS_GROUP_SHUTDOWN_TIMEOUT_S,
        TORCH_PROCESS_GROUP_SHUTDOWN_TIMEOUT_S,
    )

    raw = os.environ.get(TORCH_PROCESS_GROUP_SHUTDOWN_TIMEOUT_S, str(DEFAULT_TORCH_PROCESS_GROUP_SHUTDOWN_TIMEOUT_S))
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value < 0:
        raise ValueError(f"{TORCH_PROCESS_GROUP_SHUTDOWN_TIMEOUT_S}={raw!r}: expected a number of seconds >= 0")
    return value


def leave_process_group(timeout_s: float) -> bool:
    """Destroys this worker's process group, waiting at most `timeout_s`; whether it finished."""
    import threading

    import torch.distributed as dist

    if not dist.is_initialized():
        return True
    done = threading.Event()

    def destroy():
        try:
            dist.destroy_process_group()
        finally:
            done.set()

    threading.Thread(target=destroy, name="oxray-destroy-process-group", daemon=True).start()
    return done.wait(timeout_s)


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

    @property
    def _worker_preload(self) -> tuple:
        # Workers forked with torch imported start in milliseconds, not the seconds its import takes.
        import importlib.util

        return ("torch",) if importlib.util.find_spec("torch") is not None else ()

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
