"""A driver killed mid-experiment (SIGKILL, its embedded cluster with it)
leaves an experiment `Tuner.restore` finishes: a finished trial is not run
again, an unfinished one resumes from its latest checkpoint, and one never
started runs. Restoring a path without an experiment fails before anything
starts."""

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from oxray import tune
from oxray_testutil import wait_until

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("cluster")]


def paced(config):
    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            start = int(open(os.path.join(d, "step")).read())
    for step in range(start + 1, 6):
        time.sleep(config["pace"])
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "step"), "w") as f:
                f.write(str(step))
            tune.report({"step": step, "resumed_from": start}, checkpoint=tune.Checkpoint.from_directory(d))


DRIVER = f"""
import os, sys, tempfile, time
import oxray as ray
from oxray import tune

{textwrap.dedent(__import__("inspect").getsource(paced))}

ray.init(num_cpus=2)
tune.Tuner(
    paced,
    param_space={{"pace": tune.grid_search([0.0, 1.0, 0.0])}},
    tune_config=tune.TuneConfig(max_concurrent_trials=2),
    run_config=tune.RunConfig(storage_path=sys.argv[1], name="killed", verbose=0),
).fit()
"""


def trial_dirs(experiment):
    return sorted((p for p in experiment.iterdir() if p.is_dir()), key=lambda p: p.name.split("_")[2])


def result_lines(trial_dir):
    path = trial_dir / "result.json"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_driver_killed_mid_experiment_leaves_one_restore_finishes(tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    driver = subprocess.Popen([sys.executable, str(script), str(tmp_path)], start_new_session=True)
    experiment = tmp_path / "killed"

    def first_done_second_checkpointed():
        states = sorted(experiment.glob("experiment_state-*.json")) if experiment.exists() else []
        if not states:
            return False
        trials = [json.loads(t) for t, _ in json.loads(states[-1].read_text())["trial_data"]]
        dirs = trial_dirs(experiment)
        return (
            any(t["status"] == "TERMINATED" for t in trials) and len(dirs) >= 2 and 2 <= len(result_lines(dirs[1])) < 5
        )

    try:
        wait_until(
            "the first trial to finish and the second to checkpoint", first_done_second_checkpointed, timeout=120
        )
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    dirs = trial_dirs(experiment)
    done_before = result_lines(dirs[0])
    assert [r["step"] for r in done_before] == [1, 2, 3, 4, 5]
    assert tune.Tuner.can_restore(experiment)

    results = tune.Tuner.restore(str(experiment), trainable=paced).fit()
    assert len(results) == 3 and results.num_errors == 0
    assert all(r.metrics["step"] == 5 for r in results)
    assert result_lines(dirs[0]) == done_before, "the finished trial did not run again"
    resumed = next(r for r in results if r.config["pace"] == 1.0)
    assert resumed.metrics["resumed_from"] >= 2, "the unfinished trial went on from its checkpoint"
    assert [r["training_iteration"] for r in resumed._metrics_history] == [1, 2, 3, 4, 5]
    assert sorted(r.path for r in results) == sorted(str(d) for d in trial_dirs(experiment))


def test_restoring_a_path_without_an_experiment_fails_first(tmp_path):
    with pytest.raises(ValueError, match="there is no experiment there"):
        tune.Tuner.restore(str(tmp_path), trainable=paced, resume_errored=True)
