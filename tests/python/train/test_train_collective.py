"""Ray Train v2 pieces that Ray's Train tests check (issue 33 §7): `ray.train.collective`
(`barrier()`, `broadcast_from_rank_zero()`) across a real TorchTrainer's two workers, and
Ray's errors from `Result.from_path`, `Result.get_best_checkpoint` and `ScalingConfig`'s GPU
checks."""

import json
import os
import uuid

import pytest

torch = pytest.importorskip("torch")

import oxray as ray  # noqa: E402
from oxray import train  # noqa: E402
from oxray.train import Checkpoint, Result, RunConfig, ScalingConfig  # noqa: E402
from oxray.train.collective import barrier, broadcast_from_rank_zero  # noqa: E402
from oxray.train.torch import TorchTrainer  # noqa: E402
from oxray_testutil import wait_until  # noqa: E402


def collective_loop(config):
    out = config["out"]
    rank = train.get_context().get_world_rank()
    # Rank 1 moves on only once rank 0 is waiting in the barrier, so a barrier that did not wait
    # would let rank 0 past before rank 1's file exists.
    if rank == 0:
        open(os.path.join(out, "rank0_waiting"), "w").close()
    else:
        wait_until("rank 0 to reach the barrier", lambda: os.path.exists(os.path.join(out, "rank0_waiting")))
        with open(os.path.join(out, "rank1_before_barrier"), "w") as f:
            f.write("here")
    ray.train.collective.barrier()  # Ray's spelling, through `import oxray as ray`
    saw_rank1 = os.path.exists(os.path.join(out, "rank1_before_barrier"))
    token = broadcast_from_rank_zero({"token": config["token"]} if rank == 0 else {"token": "not rank 0's"})
    second = broadcast_from_rank_zero(rank * 10)  # a second round pairs up on its own
    barrier()
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"saw_rank1": saw_rank1, "token": token, "second": second}, f)
    return rank


def test_collective_barrier_and_broadcast_across_workers(cluster, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    token = uuid.uuid4().hex
    result = TorchTrainer(
        collective_loop,
        train_loop_config={"out": str(out), "token": token},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=str(tmp_path / "results"), name="collective"),
    ).fit()
    assert result.return_value == 0
    seen = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert seen[0]["saw_rank1"] is True
    assert [s["token"] for s in seen] == [{"token": token}] * 2
    assert [s["second"] for s in seen] == [0, 0]


def test_collective_outside_a_training_worker_is_an_error():
    with pytest.raises(RuntimeError, match=r"collective\.barrier\(\) was called outside a training worker"):
        barrier()
    with pytest.raises(RuntimeError, match="outside a training worker"):
        broadcast_from_rank_zero(1)


def test_result_from_a_missing_directory_is_rays_runtime_error(tmp_path):
    missing = tmp_path / "no_such_run"
    with pytest.raises(RuntimeError, match=f"Trial folder {missing} doesn't exist!"):
        Result.from_path(str(missing))
    with pytest.raises(RuntimeError, match="is it a train run directory"):
        Result.from_path(str(tmp_path))


def test_get_best_checkpoint_errors_are_rays():
    reported = Result(
        metrics={"loss": 0.5},
        checkpoint=None,
        error=None,
        path="/run",
        best_checkpoints=[(Checkpoint(f"/run/ckpt{i}"), {"loss": 1.0 - i / 4}) for i in range(3)],
    )
    assert reported.get_best_checkpoint("loss", "min").path == "/run/ckpt2"
    with pytest.raises(RuntimeError) as info:
        reported.get_best_checkpoint("accuracy", "max")
    assert str(info.value) == (
        "Invalid metric name accuracy! You may choose from the following metrics: dict_keys(['loss'])."
    )
    with pytest.raises(ValueError, match=r'Unsupported mode: best. Please choose from \["min", "max"\]!'):
        reported.get_best_checkpoint("loss", "best")
    empty = Result(metrics=None, checkpoint=None, error=None, path="/run")
    with pytest.raises(RuntimeError, match="No checkpoint exists in the trial directory!"):
        empty.get_best_checkpoint("loss", "min")


def test_scaling_config_gpu_checks_are_rays():
    with pytest.raises(ValueError) as info:
        ScalingConfig(num_workers=1, resources_per_worker={"GPU": 1})
    assert str(info.value) == (
        "`use_gpu` is False but `GPU` was found in `resources_per_worker`. Either set `use_gpu` to True or "
        "remove `GPU` from `resources_per_worker."
    )
    with pytest.raises(ValueError) as info:
        ScalingConfig(num_workers=1, use_gpu=True, resources_per_worker={"CPU": 1, "GPU": 0})
    assert str(info.value) == (
        "`use_gpu` is True but `GPU` is set to 0 in `resources_per_worker`. Either set `use_gpu` to False or "
        "request a positive number of `GPU` in `resources_per_worker."
    )
    # use_gpu with resources that leave GPU out asks one GPU per worker, as in Ray.
    assert ScalingConfig(num_workers=1, use_gpu=True, resources_per_worker={"CPU": 2}).worker_resources == {
        "CPU": 2.0,
        "GPU": 1.0,
    }
