"""Tune over Ray Train runs, the pattern of Ray 2.60's Train + Tune guide: a
function trainable that builds a TorchTrainer, its run named after the trial
and its reports forwarded by TuneReportCallback. Beyond Ray: Tune counts each
trial's Train workers, so trials never hold the CPUs their own runs wait for
(no deadlock, no hand-set max_concurrent_trials), and a stopped trial's
Train workers and placement group go at once (ray-project/ray#54305)."""

import os
import subprocess
import sys
import time

import pytest

import oxray as ray
from oxray import train, tune
from oxray.train.torch import TorchTrainer
from oxray.tune.integration.ray_train import TuneReportCallback
from oxray_testutil import max_overlap, wait_until

pytest.importorskip("torch")
pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("cluster")]

GUIDE = os.path.join(os.path.dirname(__file__), "train_tune_guide.py")


def test_the_train_tune_guides_example_runs_on_two_cpus(tmp_path):
    env = {**os.environ, "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, GUIDE], capture_output=True, text=True, env=env, timeout=280)
    assert done.returncode == 0, done.stderr[-4000:]
    best = done.stdout.strip().splitlines()[-1]
    assert best.startswith("Result(metrics={'loss': ") and "'checkpoint_path': " in best, done.stdout[-2000:]
    runs = sorted(p.name for p in (tmp_path / "ray_results").iterdir() if p.name.startswith("train-trial_id="))
    # The direct call's run (no trial: id None) and one run per trial, named after its trial id.
    assert "train-trial_id=None" in runs and len(runs) == 5, runs


def worker_loop(config):
    start = time.time()
    time.sleep(0.5)
    train.report({"loss": config["lr"], "span": [start, time.time()]})


def driver(config):
    trainer = TorchTrainer(
        worker_loop,
        train_loop_config={"lr": config["lr"]},
        scaling_config=train.ScalingConfig(num_workers=1),
        run_config=train.RunConfig(
            name=f"train-trial_id={tune.get_context().get_trial_id()}",
            storage_path=config["storage"],
            callbacks=[TuneReportCallback()],
        ),
    )
    trainer.fit()


def test_four_trials_of_one_worker_run_two_at_a_time_on_two_cpus_without_a_limit(tmp_path):
    results = tune.Tuner(
        driver,
        param_space={"lr": tune.grid_search([0.1, 0.2, 0.3, 0.4]), "storage": str(tmp_path / "train")},
        run_config=tune.RunConfig(storage_path=str(tmp_path), name="four", verbose=0),
    ).fit()
    assert results.num_errors == 0 and len(results) == 4
    assert sorted(r.metrics["loss"] for r in results) == [0.1, 0.2, 0.3, 0.4]
    spans = [r.metrics["span"] for r in results]
    assert max_overlap(spans) <= 2, spans


def reports_through_train(config):
    train.report({"x": 1})


def test_train_report_in_a_tune_function_raises_naming_tune_report(tmp_path):
    results = tune.Tuner(reports_through_train, run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0)).fit()
    error = str(results[0].error)
    assert "called in a Tune trial" in error and "ray.tune.report()" in error, error


def long_worker_loop(config):
    for step in range(1000):
        time.sleep(0.05)
        train.report({"step": step})


def long_driver(config):
    TorchTrainer(
        long_worker_loop,
        scaling_config=train.ScalingConfig(num_workers=2),
        run_config=train.RunConfig(
            name=f"train-trial_id={tune.get_context().get_trial_id()}",
            storage_path=config["storage"],
            callbacks=[TuneReportCallback()],
        ),
    ).fit()


def test_a_stopped_trial_frees_its_train_workers_and_placement_group_at_once(tmp_path):
    results = tune.Tuner(
        long_driver,
        param_space={"storage": str(tmp_path / "train")},
        run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0, stop={"training_iteration": 3}),
    ).fit()
    assert results[0].metrics["training_iteration"] == 3
    from oxray.util.placement_group import placement_group_table

    wait_until(
        "the stopped trial's placement group to be removed",
        lambda: all(g["state"] == "REMOVED" for g in placement_group_table().values()),
        timeout=30,
    )
    wait_until("every CPU to be free again", lambda: ray.available_resources().get("CPU") == 2.0, timeout=30)
