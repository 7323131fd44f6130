"""oxray.train with real torch.distributed (gloo) on 2 CPU workers."""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading

import pytest

torch = pytest.importorskip("torch")

import oxray as ray  # noqa: E402
from oxray import train  # noqa: E402
from oxray.train import Checkpoint, CheckpointConfig, FailureConfig, RunConfig, ScalingConfig  # noqa: E402
from oxray.train.torch import TorchTrainer, prepare_data_loader, prepare_model  # noqa: E402
from oxray_testutil import wait_until  # noqa: E402


def run_config(tmp_path, name="run", **kwargs):
    return RunConfig(storage_path=str(tmp_path / "results"), name=name, **kwargs)


# --- DDP: synced parameters, disjoint shards, merged per-rank checkpoint files ---


def ddp_loop(config):
    ctx = train.get_context()
    torch.manual_seed(ctx.get_world_rank())  # different initial weights per rank: DDP must broadcast rank 0's
    model = prepare_model(torch.nn.Linear(3, 1))
    data = torch.utils.data.TensorDataset(torch.arange(64, dtype=torch.float32))
    loader = prepare_data_loader(torch.utils.data.DataLoader(data, batch_size=4, shuffle=True))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    seen = []
    for (idx,) in loader:
        seen.extend(int(i) for i in idx)
        x = torch.stack([idx, idx * 0.5, torch.ones_like(idx)], dim=1) / 64.0
        loss = (model(x).squeeze(1) - 1.0).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    second_pass = [int(i) for (idx,) in loader for i in idx]  # the next pass reshuffles (set_epoch advanced)
    params = [p.detach().flatten().tolist() for p in model.parameters()]
    env = {
        k: os.environ[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR")
    }
    env["cwd"] = os.getcwd()
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, f"rank{ctx.get_world_rank()}.json"), "w") as f:
            json.dump({"seen": seen, "second_pass": second_pass, "params": params, "env": env}, f)
        train.report({"loss": loss.item(), "steps": len(seen) // 4}, checkpoint=Checkpoint.from_directory(d))
    return ctx.get_world_rank()


def test_ddp_syncs_parameters_and_ranks_see_disjoint_shards(cluster, tmp_path):
    result = TorchTrainer(ddp_loop, scaling_config=ScalingConfig(num_workers=2), run_config=run_config(tmp_path)).fit()
    assert result.error is None and result.return_value == 0
    files = sorted(os.listdir(result.checkpoint.path))
    assert files == ["rank0.json", "rank1.json"], files  # both ranks' files merged into one checkpoint
    per_rank = [json.load(open(os.path.join(result.checkpoint.path, f))) for f in files]
    assert per_rank[0]["params"] == per_rank[1]["params"]  # DDP averaged gradients and kept replicas equal
    seen0, seen1 = set(per_rank[0]["seen"]), set(per_rank[1]["seen"])
    assert not seen0 & seen1 and seen0 | seen1 == set(range(64)), (sorted(seen0), sorted(seen1))
    assert per_rank[0]["seen"] != sorted(per_rank[0]["seen"])  # shuffle=True survived the DistributedSampler
    assert per_rank[0]["second_pass"] != per_rank[0]["seen"]
    assert set(per_rank[0]["second_pass"]) | set(per_rank[1]["second_pass"]) == set(range(64))
    assert [r["env"]["RANK"] for r in per_rank] == ["0", "1"]
    assert {r["env"]["WORLD_SIZE"] for r in per_rank} == {"2"} and {r["env"]["NODE_RANK"] for r in per_rank} == {"0"}
    assert [r["env"]["LOCAL_RANK"] for r in per_rank] == ["0", "1"]
    assert {r["env"]["cwd"].split(os.sep)[-2:] == ["artifacts", "run"] for r in per_rank} == {True}
    assert result.metrics["steps"] == 8


# --- checkpoint layout, snapshot and retention ---


def scored_loop(config):
    for i, acc in enumerate(config["accs"]):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "model.txt"), "w") as f:
                f.write(str(i))
            ckpt = Checkpoint.from_directory(d)
            ckpt.set_metadata({"i": i})
            train.report({"i": i, "acc": acc}, checkpoint=ckpt)
        train.report({"i": i, "no_checkpoint": True})


def checkpoint_index(path):
    with open(os.path.join(path, "model.txt")) as f:
        return int(f.read())


def test_checkpoint_layout_snapshot_and_score_retention(cluster, tmp_path):
    accs = [0.1, 0.9, 0.5, 0.3, 0.2]
    config = run_config(
        tmp_path,
        checkpoint_config=CheckpointConfig(
            num_to_keep=2, checkpoint_score_attribute="acc", checkpoint_score_order="max"
        ),
    )
    result = TorchTrainer(
        scored_loop, train_loop_config={"accs": accs}, scaling_config=ScalingConfig(num_workers=2), run_config=config
    ).fit()
    assert result.path == str(tmp_path / "results" / "run")
    entries = sorted(os.listdir(result.path))
    dirs = [e for e in entries if e.startswith("checkpoint_") and e != "checkpoint_manager_snapshot.json"]
    assert ".validate_storage_marker" in entries and "checkpoint_manager_snapshot.json" in entries
    assert all(re.fullmatch(r"checkpoint_\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d\.\d{6}", d) for d in dirs), dirs
    # The two best (0.9 and 0.5) are kept, plus the latest (0.2), which is never deleted.
    assert sorted(checkpoint_index(os.path.join(result.path, d)) for d in dirs) == [1, 2, 4]
    assert result.metrics == {"i": 4, "acc": 0.2}  # the latest checkpointed report; plain reports never appear
    assert checkpoint_index(result.checkpoint.path) == 4 and result.checkpoint.get_metadata() == {"i": 4}
    assert [m["acc"] for _, m in result.best_checkpoints] == [0.2, 0.5, 0.9]  # worst to best
    assert checkpoint_index(result.get_best_checkpoint("acc", "max").path) == 1
    assert list(result.metrics_dataframe["acc"]) == [0.9, 0.5, 0.2]
    snap = json.load(open(os.path.join(result.path, "checkpoint_manager_snapshot.json")))
    assert [r["metrics"]["i"] for r in snap["checkpoint_results"]] == [1, 2, 4]
    assert snap["latest_checkpoint_result"]["checkpoint_dir_name"] == os.path.basename(result.checkpoint.path)
    assert snap["current_report_index"] == 9  # rewritten at each checkpoint; the last plain report came after
    for key in (
        "ray_version",
        "checkpoint_report_indices",
        "pending_training_results",
        "validated_checkpoint_dir_names",
    ):
        assert key in snap
    reloaded = train.Result.from_path(result.path)
    assert reloaded.checkpoint == result.checkpoint and reloaded.metrics == result.metrics


def test_num_to_keep_without_score_keeps_newest(cluster, tmp_path):
    config = run_config(tmp_path, checkpoint_config=CheckpointConfig(num_to_keep=2))
    result = TorchTrainer(
        scored_loop,
        train_loop_config={"accs": [5, 4, 3, 2]},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=config,
    ).fit()
    dirs = [d for d in os.listdir(result.path) if d.startswith("checkpoint_2")]
    assert sorted(checkpoint_index(os.path.join(result.path, d)) for d in dirs) == [2, 3]


class RecordingCallback(train.UserCallback):
    def __init__(self):
        self.reports = []
        self.exceptions = []

    def after_report(self, run_context, metrics, checkpoint):
        self.reports.append((metrics, checkpoint))

    def after_exception(self, run_context, worker_exceptions):
        self.exceptions.append(worker_exceptions)


def test_user_callback_sees_every_rank_and_each_failure(cluster, tmp_path):
    callback = RecordingCallback()
    TorchTrainer(
        scored_loop,
        train_loop_config={"accs": [0.5]},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=run_config(tmp_path, callbacks=[callback]),
    ).fit()
    assert [len(m) for m, _ in callback.reports] == [2, 2]  # one metrics dict per rank
    assert callback.reports[0][1] is not None and callback.reports[1][1] is None
    assert callback.reports[0][0][1] == {"i": 0, "acc": 0.5}
    failing = RecordingCallback()
    with pytest.raises(train.TrainingFailedError):
        TorchTrainer(
            raising_loop,
            scaling_config=ScalingConfig(num_workers=2),
            run_config=run_config(tmp_path, name="f", callbacks=[failing]),
        ).fit()
    assert len(failing.exceptions) == 1 and "boom in rank 1" in str(failing.exceptions[0][1])
    with pytest.raises(ValueError, match="not an oxray.train.UserCallback"):
        RunConfig(callbacks=[object()])


# --- resume and fault tolerance ---


def epochs_loop(config):
    import oxray.train as t

    start = 0
    ckpt = t.get_checkpoint()
    if ckpt:
        with ckpt.as_directory() as d:
            start = int(open(os.path.join(d, "epoch")).read()) + 1
    rank = t.get_context().get_world_rank()
    with open(os.path.join(config["log_dir"], f"start-{rank}-{os.getpid()}"), "w") as f:
        f.write(str(start))
    for epoch in range(start, config["epochs"]):
        kill_at = config.get("kill_at")
        marker = os.path.join(config["log_dir"], "killed")
        if rank == 1 and epoch == kill_at and not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)  # mid-epoch, before this epoch's report
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "epoch"), "w") as f:
                f.write(str(epoch))
            t.report({"epoch": epoch}, checkpoint=Checkpoint.from_directory(d) if rank == 0 else None)


def starts(log_dir):
    return sorted(int(open(os.path.join(log_dir, f)).read()) for f in os.listdir(log_dir) if f.startswith("start-"))


def test_rerun_with_same_name_resumes_from_latest_checkpoint(cluster, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    first = TorchTrainer(
        epochs_loop,
        train_loop_config={"epochs": 2, "log_dir": str(logs)},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=run_config(tmp_path),
    ).fit()
    assert first.metrics == {"epoch": 1}
    second = TorchTrainer(
        epochs_loop,
        train_loop_config={"epochs": 4, "log_dir": str(logs)},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=run_config(tmp_path),
    ).fit()
    assert starts(logs) == [0, 0, 2, 2]  # both ranks of the second run got the epoch-1 checkpoint
    assert second.metrics == {"epoch": 3} and len(second.best_checkpoints) == 4


def test_sigkilled_worker_restarts_group_from_checkpoint(cluster, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    config = {"epochs": 4, "log_dir": str(logs), "kill_at": 2}
    result = TorchTrainer(
        epochs_loop,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=run_config(tmp_path, failure_config=FailureConfig(max_failures=1)),
    ).fit()
    assert (logs / "killed").exists()
    assert starts(logs) == [0, 0, 2, 2]  # the new group continued after the epoch-1 checkpoint
    assert result.metrics == {"epoch": 3}
    assert ray.available_resources().get("CPU") == 3  # every worker's CPU came back


def test_sigkilled_worker_without_retries_raises(cluster, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    trainer = TorchTrainer(
        epochs_loop,
        train_loop_config={"epochs": 4, "log_dir": str(logs), "kill_at": 1},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=run_config(tmp_path, failure_config=FailureConfig(max_failures=0)),
    )
    with pytest.raises(train.TrainingFailedError, match="Rank 1 failed") as info:
        trainer.fit()
    assert 1 in info.value.worker_failures
    assert "died" in str(info.value).lower() or "exit" in str(info.value).lower(), str(info.value)
    # The checkpoint of epoch 0 was not lost.
    snap = json.load(open(tmp_path / "results" / "run" / "checkpoint_manager_snapshot.json"))
    assert snap["latest_checkpoint_result"]["metrics"] == {"epoch": 0}


def raising_loop():
    rank = train.get_context().get_world_rank()
    train.report({"step": 0})
    if rank == 1:
        raise ValueError("boom in rank 1")
    train.report({"step": 1})  # rank 0 waits here for a rank that never comes


def test_exception_in_one_rank_raises_without_hanging(cluster, tmp_path):
    with pytest.raises(train.TrainingFailedError) as info:
        TorchTrainer(raising_loop, scaling_config=ScalingConfig(num_workers=2), run_config=run_config(tmp_path)).fit()
    text = str(info.value)
    assert "boom in rank 1" in text and "raising_loop" in text, text  # the failing rank's traceback
    assert isinstance(info.value.worker_failures[1], Exception)


def uneven_reports_loop():
    train.report({"step": 0})
    if train.get_context().get_world_rank() == 0:
        train.report({"step": 1})  # rank 1 has already returned: this barrier can never complete


def test_ranks_reporting_unequally_fail_instead_of_hanging(cluster, tmp_path):
    with pytest.raises(
        train.TrainingFailedError, match=r"rank\(s\) \[1\] finished the training function without this report"
    ):
        TorchTrainer(
            uneven_reports_loop, scaling_config=ScalingConfig(num_workers=2), run_config=run_config(tmp_path)
        ).fit()


# --- bad configuration ---


def never_runs(config):
    open(config["marker"], "w").close()


def test_bad_configs_fail_with_clear_errors(cluster, tmp_path):
    with pytest.raises(ValueError, match=r"num_workers=-1.*integer >= 1"):
        ScalingConfig(num_workers=-1)
    with pytest.raises(ValueError, match="checkpoint_score_order='best'"):
        CheckpointConfig(checkpoint_score_order="best")
    with pytest.raises(ValueError, match="max_failures=-5"):
        FailureConfig(max_failures=-5)
    marker = tmp_path / "ran"
    unknown = TorchTrainer(
        never_runs,
        train_loop_config={"marker": str(marker)},
        scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1, "TPUv9": 1}),
        run_config=run_config(tmp_path),
    )
    with pytest.raises(ValueError, match="'TPUv9'"):
        unknown.fit()
    too_many = TorchTrainer(
        never_runs,
        train_loop_config={"marker": str(marker)},
        scaling_config=ScalingConfig(num_workers=8),
        run_config=run_config(tmp_path),
    )
    with pytest.raises(ValueError, match="needs 8 CPU"):
        too_many.fit()
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    unwritable = TorchTrainer(
        never_runs,
        train_loop_config={"marker": str(marker)},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=str(blocker / "results"), name="x"),
    )
    with pytest.raises(ValueError, match="cannot be written") as info:
        unwritable.fit()
    assert str(blocker) in str(info.value)
    with pytest.raises(ValueError, match="storage path"):
        TorchTrainer(never_runs, run_config=RunConfig(storage_path="gs://bucket/x", name="x")).fit()
    with pytest.raises(ValueError, match="'..' is not a plain directory name"):
        RunConfig(storage_path=str(tmp_path), name="..")
    with pytest.raises(ValueError, match="takes no argument"):
        TorchTrainer(raising_loop, train_loop_config={"lr": 0.1})
    with pytest.raises(ValueError, match="STRICT_SPREAD.*only 1 node"):
        TorchTrainer(
            never_runs,
            train_loop_config={"marker": str(marker)},
            run_config=run_config(tmp_path),
            scaling_config=ScalingConfig(num_workers=2, placement_strategy="STRICT_SPREAD"),
        ).fit()
    assert not marker.exists()
    assert ray.available_resources().get("CPU") == 3


def tensor_metric_loop():
    train.report({"loss": torch.tensor(1.0)})


def no_upload_loop(config):
    ctx = train.get_context()
    target = os.path.join(ctx.get_storage().experiment_fs_path, "my_checkpoint")
    os.makedirs(target, exist_ok=True)
    with open(os.path.join(target, f"rank{ctx.get_world_rank()}"), "w") as f:
        f.write("written in place")
    train.report(
        {"done": 1},
        checkpoint=Checkpoint(target),
        checkpoint_dir_name="my_checkpoint",
        checkpoint_upload_mode=train.CheckpointUploadMode.NO_UPLOAD,
    )
    if config.get("async"):
        train.report(
            {"done": 2}, checkpoint=Checkpoint(target), checkpoint_upload_mode=train.CheckpointUploadMode.ASYNC
        )


def test_no_upload_mode_registers_a_checkpoint_written_in_place(cluster, tmp_path):
    result = TorchTrainer(
        no_upload_loop,
        train_loop_config={},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=run_config(tmp_path),
    ).fit()
    assert result.checkpoint.path == str(tmp_path / "results" / "run" / "my_checkpoint")
    assert sorted(os.listdir(result.checkpoint.path)) == ["rank0", "rank1"]
    with pytest.raises(train.TrainingFailedError, match="ASYNC.*not supported"):
        TorchTrainer(
            no_upload_loop,
            train_loop_config={"async": True},
            scaling_config=ScalingConfig(num_workers=2),
            run_config=run_config(tmp_path, name="async"),
        ).fit()


def test_torch_tensor_metric_is_rejected(cluster, tmp_path):
    # Ray's wording, which Ray's tests match: reported or returned, anywhere in the value.
    with pytest.raises(train.TrainingFailedError, match="Passing objects containing Torch tensors as metrics"):
        TorchTrainer(
            tensor_metric_loop, scaling_config=ScalingConfig(num_workers=2), run_config=run_config(tmp_path)
        ).fit()
    with pytest.raises(train.TrainingFailedError, match="Returning objects containing Torch tensors") as failed:
        TorchTrainer(
            returns_a_state_dict, scaling_config=ScalingConfig(num_workers=1), run_config=run_config(tmp_path, "ret")
        ).fit()
    # As in Ray: the exception the training function raised, its message first.
    error = failed.value.worker_failures[0]
    assert isinstance(error, ValueError) and error.args[0].startswith("Returning objects containing Torch tensors")


def returns_a_state_dict():
    return {"nested": [torch.nn.Linear(1, 1).state_dict()]}


def fsdp_on_cpu_loop():
    prepare_model(torch.nn.Linear(2, 1), parallel_strategy="fsdp")


def test_fsdp_on_cpu_workers_is_a_clear_error(cluster, tmp_path):
    with pytest.raises(train.TrainingFailedError, match=r"parallel_strategy='fsdp'\) needs a GPU"):
        TorchTrainer(
            fsdp_on_cpu_loop, scaling_config=ScalingConfig(num_workers=2), run_config=run_config(tmp_path)
        ).fit()


# --- S3 storage on a real S3 API server (moto) ---


def test_s3_storage_on_moto(cluster, tmp_path, moto_s3):
    logs = tmp_path / "logs"
    logs.mkdir()
    config = RunConfig(
        storage_path="s3://oxray-test/experiments", name="s3run", checkpoint_config=CheckpointConfig(num_to_keep=1)
    )
    result = TorchTrainer(
        epochs_loop,
        train_loop_config={"epochs": 3, "log_dir": str(logs)},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=config,
    ).fit()
    assert result.path == "s3://oxray-test/experiments/s3run"
    assert result.checkpoint.path.startswith("s3://oxray-test/experiments/s3run/checkpoint_")
    keys = sorted(o["Key"] for o in moto_s3.list_objects_v2(Bucket="oxray-test")["Contents"])
    ckpt_keys = [k for k in keys if k.endswith("/epoch")]
    assert len(ckpt_keys) == 1, keys  # num_to_keep=1 deleted the older checkpoints from the bucket
    assert (
        "experiments/s3run/checkpoint_manager_snapshot.json" in keys
        and "experiments/s3run/.validate_storage_marker" in keys
    )
    with result.checkpoint.as_directory() as d:
        assert open(os.path.join(d, "epoch")).read() == "2"
    # A rerun resumes from the checkpoint in the bucket.
    TorchTrainer(
        epochs_loop,
        train_loop_config={"epochs": 4, "log_dir": str(logs)},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=config,
    ).fit()
    assert starts(logs) == [0, 0, 3, 3]


def test_s3_bucket_that_does_not_exist_fails_fast(cluster, tmp_path, moto_s3):
    trainer = TorchTrainer(
        never_runs,
        train_loop_config={"marker": str(tmp_path / "m")},
        run_config=RunConfig(storage_path="s3://no-such-bucket/x", name="r"),
    )
    with pytest.raises(ValueError, match="no-such-bucket.*cannot be written"):
        trainer.fit()
    assert not (tmp_path / "m").exists()


def test_s3_multipart_upload_and_verbatim_key_names(tmp_path, moto_s3):
    from oxray import _native

    local = tmp_path / "ckpt"
    (local / "sub").mkdir(parents=True)
    big = os.urandom(23 * 1024 * 1024)  # above the 10 MB single-PUT limit: a multipart upload
    (local / "sub" / "weights~1.bin").write_bytes(big)
    (local / "meta %20 [x].json").write_text("{}")
    storage = _native.Storage("s3://oxray-test/root")
    assert storage.upload_dir(str(local), "run/checkpoint_1") == len(big) + 2
    keys = sorted(o["Key"] for o in moto_s3.list_objects_v2(Bucket="oxray-test")["Contents"])
    assert keys == ["root/run/checkpoint_1/meta %20 [x].json", "root/run/checkpoint_1/sub/weights~1.bin"]
    storage.upload_dir(str(local), "run/checkpoint_10")
    storage.delete_dir("run/checkpoint_1")  # must not touch checkpoint_10
    assert storage.list("run") == ["checkpoint_10/meta %20 [x].json", "checkpoint_10/sub/weights~1.bin"]
    out = tmp_path / "out"
    storage.download_dir("run/checkpoint_10", str(out))
    assert (out / "sub" / "weights~1.bin").read_bytes() == big and (out / "meta %20 [x].json").read_text() == "{}"


# --- the driver: output and Ctrl-C ---


def test_worker_output_is_prefixed_with_rank_and_ctrl_c_stops_workers(tmp_path):
    script = tmp_path / "driver.py"
    helpers = os.path.dirname(os.path.abspath(wait_until.__code__.co_filename))
    script.write_text(
        textwrap.dedent(
            f"""
            import os, sys, time
            import oxray as ray
            from oxray.train import ScalingConfig, RunConfig
            from oxray.train.torch import TorchTrainer

            def loop():
                rank = ray.train.get_context().get_world_rank()
                print("worker says hello", flush=True)
                open(os.path.join({str(tmp_path)!r}, f"pid-{{rank}}-{{os.getpid()}}"), "w").close()
                time.sleep(600)

            ray.init(num_cpus=2)
            try:
                TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=2),
                             run_config=RunConfig(storage_path={str(tmp_path / "results")!r}, name="ctrlc")).fit()
            except KeyboardInterrupt:
                # The cluster is still up: the trainer itself must have stopped its workers.
                from oxray.util import placement_group_table
                sys.path.insert(0, {helpers!r})
                from oxray_testutil import wait_until
                wait_until(
                    lambda: f"both CPUs free after Ctrl-C ({{ray.available_resources()}})",
                    lambda: ray.available_resources().get("CPU", 0) >= 2,
                    timeout=60,
                    interval=0.1,
                )
                states = {{pg["state"] for pg in placement_group_table().values()}}
                cpu_free = ray.available_resources().get("CPU")
                print("after Ctrl-C: CPU free", cpu_free, "groups", sorted(states), flush=True)
                raise
            """
        )
    )
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        # Interrupt once both workers' output has reached the driver: then fit() is
        # running and the output path is proven, whatever the machine's speed.
        def started():
            pid_files = [f for f in os.listdir(tmp_path) if f.startswith("pid-")]
            return len(pid_files) == 2 and sum("worker says hello" in line for line in list(lines)) >= 2

        wait_until(
            "the workers to start (or the driver to exit)", lambda: started() or proc.poll() is not None, timeout=90
        )
        assert proc.poll() is None, "".join(lines)
        pids = {int(f.split("-")[2]): int(f.split("-")[1]) for f in os.listdir(tmp_path) if f.startswith("pid-")}
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)  # longer than the driver's own wait for the CPUs, so its message shows
        reader.join(timeout=30)
        out = "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0 and "KeyboardInterrupt" in out
    assert "after Ctrl-C: CPU free 2.0 groups ['REMOVED']" in out, out
    for pid, rank in pids.items():
        assert f"(RayTrainWorker rank={rank} pid={pid}) worker says hello" in out, out
    for pid in pids:
        wait_until(
            f"worker {pid} to end with the driver's Ctrl-C",
            lambda pid=pid: not os.path.exists(f"/proc/{pid}"),
            timeout=60,
            interval=0.1,
        )
