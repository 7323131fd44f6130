"""Importing oxray or oxray.train does not import torch; only oxray.train.torch
does. Each check runs in a fresh interpreter, where nothing imported torch yet."""

import subprocess
import sys

import pytest


def torch_imported_after(code):
    """Whether `torch` is in sys.modules after running `code` in a fresh
    interpreter (with this one's environment, so the same oxray)."""
    script = code + "\nimport sys\nprint('torch' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1] == "True"


@pytest.mark.parametrize(
    "code",
    [
        "import oxray",
        "import oxray.train",
        "from oxray.train import RunConfig, ScalingConfig, TrainingFailedError, UserCallback",
        "import oxray as ray; ray.train.ScalingConfig(num_workers=2)",
    ],
)
def test_oxray_and_oxray_train_do_not_import_torch(code):
    assert not torch_imported_after(code)


def test_ray_train_torch_loads_torch_on_first_use():
    pytest.importorskip("torch")
    assert torch_imported_after("import oxray as ray; ray.train.torch.TorchTrainer")
