"""`oxray.train.torch`: TorchTrainer and the helpers used inside a PyTorch loop.

The loop helpers (`prepare_model`, `get_device`, ...) load on first use: a driver
(or a Tune trial) that only builds a `TorchTrainer` never imports torch, which
takes seconds; the workers import it when they set up `torch.distributed`."""

from oxray.train.torch.config import TorchConfig
from oxray.train.torch.torch_trainer import TorchTrainer

_LOOP_HELPERS = (
    "backward",
    "enable_reproducibility",
    "get_device",
    "get_devices",
    "prepare_data_loader",
    "prepare_model",
    "prepare_optimizer",
)


def __getattr__(name: str):
    if name in _LOOP_HELPERS:
        from oxray.train.torch import train_loop_utils

        return getattr(train_loop_utils, name)
    raise AttributeError(f"module 'oxray.train.torch' has no attribute {name!r}")


__all__ = ["TorchConfig", "TorchTrainer", *_LOOP_HELPERS]
