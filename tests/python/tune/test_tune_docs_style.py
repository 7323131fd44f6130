"""Tune scripts as Ray's docs write them, run unchanged but for the import
(`from oxray import tune`), each in a fresh process with its own HOME so the
default `~/ray_results` lands in the test's directory."""

import ast
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timeout(300)

QUICKSTART = """
from oxray import tune


def objective(config):  # ①
    score = config["a"] ** 2 + config["b"]
    return {"score": score}


search_space = {  # ②
    "a": tune.grid_search([0.001, 0.01, 0.1, 1.0]),
    "b": tune.choice([1, 2, 3]),
}

tuner = tune.Tuner(objective, param_space=search_space)  # ③

results = tuner.fit()
print(results.get_best_result(metric="score", mode="min").config)
"""

KEY_CONCEPTS = """
import oxray as ray
from oxray import tune
from oxray.tune.schedulers import ASHAScheduler


def trainable(config):
    # config (dict): A dict of hyperparameters.
    for x in range(20):
        intermediate_score = config["alpha"] * x + config["beta"]
        tune.report({"score": intermediate_score})  # This sends the score to Tune.


ray.init(num_cpus=2)
asha_scheduler = ASHAScheduler(
    time_attr="training_iteration",
    metric="score",
    mode="max",
    max_t=20,
    grace_period=2,
    reduction_factor=2,
)
tuner = tune.Tuner(
    trainable,
    param_space={"alpha": tune.uniform(0, 1), "beta": tune.uniform(0, 1)},
    tune_config=tune.TuneConfig(num_samples=8, scheduler=asha_scheduler, max_concurrent_trials=2),
    run_config=tune.RunConfig(stop={"training_iteration": 20}),
)
results = tuner.fit()
best = results.get_best_result(metric="score", mode="max")
df = results.get_dataframe()
print("trials", len(results), "errors", results.num_errors)
print("best iterations", best.metrics["training_iteration"])
"""


def run_script(tmp_path, source):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    env = {**os.environ, "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_quickstart(tmp_path):
    out = run_script(tmp_path, QUICKSTART)
    best = ast.literal_eval(out.strip().splitlines()[-1])
    [experiment] = (tmp_path / "ray_results").iterdir()
    assert experiment.name.startswith("objective_")
    trials = [json.loads((p / "result.json").read_text()) for p in experiment.iterdir() if p.is_dir()]
    assert sorted(t["config"]["a"] for t in trials) == [0.001, 0.01, 0.1, 1.0]
    assert best == min(trials, key=lambda t: t["score"])["config"], out[-2000:]
    # Ray's output engine's blocks: the configuration, then status tables to the last.
    assert "Configuration for experiment" in out and "BasicVariantGenerator" in out, out[:2000]
    final = out[out.rindex("Trial status:") :]
    assert final.startswith("Trial status: 4 TERMINATED"), final
    assert re.search(r"Logical resource usage: 0\.0/\d+ CPUs", final), final
    assert all(f"{t['trial_id']}" in final for t in trials), "a row per trial"
    assert "Wrote the latest version of all result files and experiment state" in out


def test_key_concepts_asha_and_a_stop_dict(tmp_path):
    out = run_script(tmp_path, KEY_CONCEPTS)
    assert "trials 8 errors 0" in out, out[-2000:]
    assert "best iterations 20" in out, out[-2000:]
    final = out[out.rindex("Trial status:") :]
    assert "Current best trial: " in final and " with score=" in final, final
    assert "AsyncHyperBandScheduler" in out
