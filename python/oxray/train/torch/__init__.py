"""`oxray.train.torch`: TorchTrainer and the helpers used inside a PyTorch loop."""

from oxray.train.torch.config import TorchConfig
from oxray.train.torch.torch_trainer import TorchTrainer
from oxray.train.torch.train_loop_utils import (
    backward,
    enable_reproducibility,
    get_device,
    get_devices,
    prepare_data_loader,
    prepare_model,
    prepare_optimizer,
)

__all__ = [
    "TorchConfig",
    "TorchTrainer",
    "backward",
    "enable_reproducibility",
    "get_device",
    "get_devices",
    "prepare_data_loader",
    "prepare_model",
    "prepare_optimizer",
]
