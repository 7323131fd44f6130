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
