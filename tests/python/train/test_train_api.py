"""Ray Train v2 API pieces, as Ray's tests use them: `get_all_reported_checkpoints`,
a custom `Backend`/`BackendConfig` on `DataParallelTrainer`, and `restore`/
`can_restore`, which Train v2 removed."""

import os
import tempfile

import pytest

import oxray as ray
from oxray import train
from oxray.train import DataParallelTrainer, RunConfig, ScalingConfig
from oxray.train.backend import Backend, BackendConfig


def report_three_checkpoints():
    seen = []
    for step in range(3):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "step"), "w") as f:
                f.write(str(step))
            train.report({"step": step}, checkpoint=train.Checkpoint.from_directory(d))
        seen.append(
            [(r.metrics["step"], os.path.basename(r.checkpoint.path)) for r in train.get_all_reported_checkpoints()]
        )
    return seen


def test_get_all_reported_checkpoints_lists_the_kept_ones(cluster, tmp_path):
    result = DataParallelTrainer(
        report_three_checkpoints,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(
            storage_path=str(tmp_path), name="all", checkpoint_config=train.CheckpointConfig(num_to_keep=2)
        ),
    ).fit()
    seen = result.return_value
    assert [[step for step, _ in after] for after in seen] == [[0], [0, 1], [1, 2]]
    names = [name for _, name in seen[-1]]
    assert names == [os.path.basename(c.path) for c, _ in result.best_checkpoints]


def test_get_all_reported_checkpoints_outside_training_raises():
    with pytest.raises(RuntimeError, match="get_all_reported_checkpoints"):
        train.get_all_reported_checkpoints()


class MarkerConfig(BackendConfig):
    def __init__(self, path):
        self.path = path

    @property
    def backend_cls(self):
        return MarkerBackend

    @property
    def train_func_context(self):
        path = self.path

        class Context:
            def __enter__(self):
                with open(os.path.join(path, f"enter-{os.getpid()}"), "w"):
                    pass

            def __exit__(self, *exc):
                return False

        return Context


def write_env(path):
    os.environ["MARKER_BACKEND"] = "on"
    with open(os.path.join(path, f"start-{os.getpid()}"), "w"):
        pass
    return os.getpid()


class MarkerBackend(Backend):
    def on_start(self, worker_group, backend_config):
        pids = worker_group.execute(write_env, backend_config.path)
        assert len(pids) == len(worker_group) == 2
        with open(os.path.join(backend_config.path, "hooks"), "a") as f:
            f.write("start\n")

    def on_training_start(self, worker_group, backend_config):
        with open(os.path.join(backend_config.path, "hooks"), "a") as f:
            f.write("training\n")

    def on_shutdown(self, worker_group, backend_config):
        with open(os.path.join(backend_config.path, "hooks"), "a") as f:
            f.write("shutdown\n")


def read_marker():
    return os.environ.get("MARKER_BACKEND"), os.getpid()


def test_a_custom_backend_sets_up_every_worker(cluster, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    result = DataParallelTrainer(
        read_marker,
        backend_config=MarkerConfig(str(marks)),
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=str(tmp_path / "results"), name="backend"),
    ).fit()
    marker, pid = result.return_value
    assert marker == "on"
    files = sorted(os.listdir(marks))
    assert f"start-{pid}" in files and f"enter-{pid}" in files
    assert len([f for f in files if f.startswith("start-")]) == 2
    assert (marks / "hooks").read_text().split() == ["start", "training", "shutdown"]


def test_backend_config_must_be_a_backend_config(tmp_path):
    with pytest.raises(TypeError, match="BackendConfig"):
        DataParallelTrainer(read_marker, backend_config={"backend": "gloo"})


@pytest.mark.parametrize("method", ["restore", "can_restore"])
def test_restore_is_removed_in_train_v2(method):
    with pytest.raises(DeprecationWarning, match=method):
        getattr(DataParallelTrainer, method)("/tmp/some-run")


def node_of_worker():
    return os.environ["OXRAY_NODE_ID"]


def test_scaling_config_label_selector_places_the_workers(cluster, tmp_path):
    [node] = ray.nodes()
    selector = {"ray.io/node-id": node["NodeID"]}
    result = DataParallelTrainer(
        node_of_worker,
        scaling_config=ScalingConfig(num_workers=2, label_selector=selector),
        run_config=RunConfig(storage_path=str(tmp_path), name="labelled"),
    ).fit()
    assert result.return_value == node["NodeID"]
    with pytest.raises(ValueError, match="no node of the cluster has matching labels"):
        DataParallelTrainer(
            node_of_worker,
            scaling_config=ScalingConfig(num_workers=2, label_selector={"zone": "moon"}),
            run_config=RunConfig(storage_path=str(tmp_path), name="nowhere"),
        ).fit()
    with pytest.raises(ValueError, match="one selector per worker"):
        ScalingConfig(num_workers=2, label_selector=[selector])


def test_get_best_checkpoint_reads_nested_metric_paths():
    from oxray.train import Checkpoint, Result

    scores = [(0, 100.0), (1, 300.0), (2, 200.0)]
    nested = Result(
        metrics={},
        checkpoint=None,
        error=None,
        path="/bucket/run",
        best_checkpoints=[
            (Checkpoint(f"/bucket/run/ckpt{i}"), {"iter": i, "env_runners": {"episode_return_mean": score}})
            for i, score in scores
        ],
    )
    assert nested.get_best_checkpoint("env_runners/episode_return_mean", "max").path == "/bucket/run/ckpt1"
    assert nested.get_best_checkpoint("env_runners/episode_return_mean", "min").path == "/bucket/run/ckpt0"
    flat = Result(
        metrics={},
        checkpoint=None,
        error=None,
        path="/bucket/run",
        best_checkpoints=[(Checkpoint(f"/bucket/run/ckpt{i}"), {"a/b": score}) for i, score in scores],
    )
    assert flat.get_best_checkpoint("a/b", "max").path == "/bucket/run/ckpt1"
    with pytest.raises(RuntimeError, match="Invalid metric name a/missing! You may choose from the following metrics"):
        flat.get_best_checkpoint("a/missing", "max")


def test_storage_filesystem_without_storage_path_is_refused_by_the_trainer():
    import pyarrow.fs

    from oxray.train.torch import TorchTrainer

    config = RunConfig(storage_filesystem=pyarrow.fs.S3FileSystem(region="us-east-1"))
    assert "S3FileSystem" in repr(config)
    with pytest.raises(ValueError, match="needs storage_path"):
        TorchTrainer(lambda: None, scaling_config=ScalingConfig(num_workers=1), run_config=config)


def test_process_group_shutdown_timeout_is_read_and_checked(monkeypatch):
    import torch.distributed as dist

    from oxray.train.constants import TORCH_PROCESS_GROUP_SHUTDOWN_TIMEOUT_S
    from oxray.train.torch import TorchTrainer
    from oxray.train.torch.config import leave_process_group, shutdown_timeout_s

    monkeypatch.setenv(TORCH_PROCESS_GROUP_SHUTDOWN_TIMEOUT_S, "soon")
    with pytest.raises(ValueError, match="TORCH_PROCESS_GROUP_SHUTDOWN_TIMEOUT_S='soon'"):
        TorchTrainer(lambda: None, scaling_config=ScalingConfig(num_workers=1))
    monkeypatch.setenv(TORCH_PROCESS_GROUP_SHUTDOWN_TIMEOUT_S, "0")
    assert shutdown_timeout_s() == 0.0

    # What each worker runs at shutdown: its group is destroyed within the timeout.
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(_free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    assert leave_process_group(10.0) is True
    assert not dist.is_initialized()
    assert leave_process_group(0.0) is True  # nothing left to leave


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_finished_torch_run_leaves_its_process_group(cluster, tmp_path, monkeypatch):
    from oxray.train.constants import TORCH_PROCESS_GROUP_SHUTDOWN_TIMEOUT_S
    from oxray.train.torch import TorchConfig, TorchTrainer

    monkeypatch.setenv(TORCH_PROCESS_GROUP_SHUTDOWN_TIMEOUT_S, "0")
    result = TorchTrainer(
        lambda: None,
        scaling_config=ScalingConfig(num_workers=2),
        torch_config=TorchConfig(backend="gloo"),
        run_config=RunConfig(storage_path=str(tmp_path), name="leaves"),
    ).fit()
    # Even with no time to wait for the group's destruction, the run completes.
    assert result.error is None


@pytest.mark.parametrize(
    "make, what",
    [
        (lambda: train.RunConfig(verbose=0), "verbose"),
        (lambda: train.RunConfig(sync_config=object()), "sync_config"),
        (lambda: train.FailureConfig(fail_fast=True), "fail_fast"),
        (lambda: train.ScalingConfig(trainer_resources={"CPU": 1}), "trainer_resources"),
    ],
)
def test_v1_and_tune_era_config_fields_raise_rays_deprecation_warning(make, what):
    # As Ray Train v2 does: raised, not warned, so the setting can never be believed to take effect.
    with pytest.raises(DeprecationWarning, match=what):
        make()
