"""Helpers used inside the training loop: devices, DDP/FSDP, distributed loaders."""

from __future__ import annotations

import os
import random
from typing import Any, Optional

import torch
from torch.utils.data import DataLoader, DistributedSampler, SequentialSampler

from oxray._private import worker_devices


def _world_size() -> int:
    import torch.distributed as dist

    return (
        dist.get_world_size()
        if dist.is_available() and dist.is_initialized()
        else int(os.environ.get("WORLD_SIZE", "1"))
    )


def get_devices() -> list:
    """This worker's devices: its GPUs (as visible to it), else the CPU."""
    return worker_devices.torch_devices()


def get_device() -> torch.device:
    return worker_devices.torch_device()


def prepare_model(
    model: torch.nn.Module,
    move_to_device: Any = True,
    parallel_strategy: Optional[str] = "ddp",
    parallel_strategy_kwargs: Optional[dict] = None,
    **_deprecated,
) -> torch.nn.Module:
    """Moves the model to this worker's device and, with more than one worker,
    wraps it in DistributedDataParallel (or FSDP)."""
    if parallel_strategy not in ("ddp", "fsdp", None):
        raise ValueError(f"prepare_model(parallel_strategy={parallel_strategy!r}): expected 'ddp', 'fsdp' or None")
    device = move_to_device if isinstance(move_to_device, torch.device) else get_device()
    if move_to_device:
        model = model.to(device)
    if parallel_strategy is None or _world_size() <= 1:
        return model
    kwargs = dict(parallel_strategy_kwargs or {})
    if parallel_strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        if device.type == "cuda":
            kwargs.setdefault("device_ids", [device])
            kwargs.setdefault("output_device", device)
        return DistributedDataParallel(model, **kwargs)
    from torch.distributed.fsdp import FullyShardedDataParallel

    if device.type == "cpu":
        raise ValueError(
            "prepare_model(parallel_strategy='fsdp') needs a GPU per worker (ScalingConfig(use_gpu=True)); "
            "on CPU use parallel_strategy='ddp'"
        )
    if device.type == "cuda":
        kwargs.setdefault("device_id", device)
    return FullyShardedDataParallel(model, **kwargs)


def _move(batch, device):
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=device.type == "cuda")
    if isinstance(batch, (list, tuple)):
        moved = [_move(b, device) for b in batch]
        return (
            type(batch)(moved)
            if isinstance(batch, list)
            else tuple(moved)
            if type(batch) is tuple
            else type(batch)(*moved)
        )
    if isinstance(batch, dict):
        return {k: _move(v, device) for k, v in batch.items()}
    return batch


class _DeviceDataLoader:
    """Iterates the wrapped loader with each batch moved to the device, and
    advances a DistributedSampler's epoch when the loop does not."""

    def __init__(self, loader: DataLoader, device: torch.device):
        self._loader = loader
        self._device = device
        self._last_epoch: Optional[int] = None

    def __len__(self):
        return len(self._loader)

    def __getattr__(self, name):
        return getattr(self._loader, name)

    def __iter__(self):
        sampler = self._loader.sampler
        if isinstance(sampler, DistributedSampler):
            # Each pass reshuffles differently: unless the loop called set_epoch()
            # since the last pass (then its numbering wins), advance the epoch.
            if self._last_epoch is not None and sampler.epoch == self._last_epoch:
                sampler.set_epoch(self._last_epoch + 1)
            self._last_epoch = sampler.epoch
        for batch in self._loader:
            yield _move(batch, self._device)


def prepare_data_loader(
    data_loader: DataLoader, add_dist_sampler: bool = True, move_to_device: bool = True, auto_transfer: bool = True
):
    """Gives each worker its own shard (a DistributedSampler that keeps the
    loader's shuffle setting) and moves batches to the worker's device."""
    if not isinstance(data_loader, DataLoader):
        raise TypeError(f"prepare_data_loader expects a torch DataLoader, got {type(data_loader).__name__}")
    iterable = isinstance(data_loader.dataset, torch.utils.data.IterableDataset)
    if (
        add_dist_sampler
        and _world_size() > 1
        and not iterable
        and not isinstance(data_loader.sampler, DistributedSampler)
    ):
        if data_loader.batch_sampler is not None and type(data_loader.batch_sampler).__name__ != "BatchSampler":
            raise ValueError(
                "prepare_data_loader cannot shard a DataLoader with a custom batch_sampler; pass add_dist_sampler=False"
            )
        # As in Ray: anything but a sequential sampler means the data was shuffled.
        shuffle = not isinstance(data_loader.sampler, SequentialSampler)
        extra = {"prefetch_factor": data_loader.prefetch_factor} if data_loader.num_workers > 0 else {}
        data_loader = DataLoader(
            data_loader.dataset,
            batch_size=data_loader.batch_size,
            shuffle=False,
            sampler=DistributedSampler(data_loader.dataset, shuffle=shuffle),
            num_workers=data_loader.num_workers,
            collate_fn=data_loader.collate_fn,
            pin_memory=data_loader.pin_memory,
            drop_last=data_loader.drop_last,
            timeout=data_loader.timeout,
            worker_init_fn=data_loader.worker_init_fn,
            multiprocessing_context=data_loader.multiprocessing_context,
            persistent_workers=data_loader.persistent_workers if data_loader.num_workers > 0 else False,
            generator=data_loader.generator,
            **extra,
        )
    if move_to_device:
        return _DeviceDataLoader(data_loader, get_device())
    return data_loader


def prepare_optimizer(optimizer):
    return optimizer


def backward(tensor: torch.Tensor) -> None:
    tensor.backward()


def enable_reproducibility(seed: int = 0) -> None:
    """Seeds torch, numpy and random, and turns on deterministic algorithms."""
    import numpy as np

    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
