"""What this worker process runs on, for the libraries above Core: whether it is a
Train worker running its training loop (Train says so; Data reads it to put
batches on the worker's device and to keep progress bars off), and the torch
devices it was given. Neither Data nor Train imports the other for this."""

from __future__ import annotations

import os

_in_train_loop = False


def set_in_train_loop(running: bool) -> None:
    """Train marks its workers while their loop runs."""
    global _in_train_loop
    _in_train_loop = running


def in_train_loop() -> bool:
    """Whether this process is a Train worker running its loop."""
    return _in_train_loop


def torch_devices() -> list:
    """This worker's devices: its GPUs (as visible to it), else the CPU."""
    import torch

    if torch.cuda.is_available() and os.environ.get("CUDA_VISIBLE_DEVICES", "") != "":
        return [torch.device(f"cuda:{i}") for i in range(torch.cuda.device_count())]
    return [torch.device("cpu")]


def torch_device():
    """This worker's first device (`torch_devices()[0]`)."""
    return torch_devices()[0]
