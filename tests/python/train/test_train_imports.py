"""Importing oxray, oxray.train or building a TorchTrainer does not import torch
(seconds of import a driver or a Tune trial would wait on); the loop helpers of
oxray.train.torch do. Each check runs in a fresh interpreter, where nothing
imported torch yet."""

import os
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
        "import oxray as ray; ray.train.torch.TorchTrainer(lambda: None, scaling_config=ray.train.ScalingConfig())",
    ],
)
def test_oxray_and_oxray_train_do_not_import_torch(code):
    assert not torch_imported_after(code)


def test_ray_train_torchs_loop_helpers_load_torch_on_first_use():
    pytest.importorskip("torch")
    assert torch_imported_after("import oxray as ray; ray.train.torch.prepare_model")
    assert torch_imported_after("from oxray.train.torch import get_device")


def test_a_torch_trainer_without_datasets_runs_without_pyarrow_or_pandas(tmp_path):
    """oxray's base install has neither (they come with `oxray[data]`): a trainer
    given no datasets must not reach for them, on the driver or on the workers."""
    pytest.importorskip("torch")
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    for name in ("pyarrow", "pandas"):
        (blocked / f"{name}.py").write_text(f"raise ImportError('{name} is not installed (blocked by the test)')\n")
    script = f"""
import os
import tempfile

import oxray as ray
from oxray import train
from oxray.train import RunConfig, ScalingConfig
from oxray.train.torch import TorchTrainer

def loop(config):
    import torch
    try:
        import pyarrow  # noqa: F401
        blocked = False
    except ImportError:
        blocked = True
    model = train.torch.prepare_model(torch.nn.Linear(2, 1))
    loss = model(torch.ones(4, 2)).pow(2).mean()
    loss.backward()
    with tempfile.TemporaryDirectory() as d:
        torch.save(model.state_dict(), os.path.join(d, "model.pt"))
        train.report({{"blocked": blocked, "loss": loss.item()}}, checkpoint=train.Checkpoint.from_directory(d))

ray.init(num_cpus=2)
result = TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=2),
                      run_config=RunConfig(storage_path={str(tmp_path / "runs")!r})).fit()
print("blocked on the workers:", result.metrics["blocked"], "error:", result.error)
print("checkpoint:", sorted(os.listdir(result.checkpoint.path)))
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocked), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "blocked on the workers: True error: None" in proc.stdout, proc.stdout + proc.stderr
    assert "checkpoint: ['model.pt']" in proc.stdout, proc.stdout + proc.stderr
