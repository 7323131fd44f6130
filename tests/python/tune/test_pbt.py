"""Population based training: the worse trial exploits the better one's
checkpoint (its state jumps to the clone's) with the clone's config explored,
and both are logged to pbt_global.txt and pbt_policy_<trial_id>.txt as Ray
writes them; explore's rules on a config without a cluster."""

import json
import os
import random
import tempfile
import time

import pytest

from oxray import tune
from oxray.tune.schedulers import PopulationBasedTraining

pytestmark = pytest.mark.usefixtures("cluster")


def accumulate(config):
    # Both trials start their loops together, so each meets the other at its perturbations.
    open(os.path.join(config["barrier"], str(config["lr"])), "w").close()
    while len(os.listdir(config["barrier"])) < 2:
        time.sleep(0.02)
    total = 0.0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            total = float(open(os.path.join(d, "total")).read())
    while True:
        time.sleep(0.05)
        total += config["lr"]
        # Tune copies the checkpoint into the trial's directory: the temporary one can go (Ray's docs' way).
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "total"), "w") as f:
                f.write(str(total))
            tune.report({"total": total, "lr": config["lr"]}, checkpoint=tune.Checkpoint.from_directory(d))


def test_the_worse_trial_exploits_the_better_ones_checkpoint_and_explores_its_config(tmp_path):
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    pbt = PopulationBasedTraining(
        time_attr="training_iteration",
        metric="total",
        mode="max",
        perturbation_interval=4,
        quantile_fraction=0.5,
        resample_probability=0.0,
        hyperparam_mutations={"lr": [0.01, 1.0, 2.0, 3.0]},
    )
    results = tune.Tuner(
        accumulate,
        param_space={"lr": tune.grid_search([0.01, 3.0]), "barrier": str(barrier)},
        tune_config=tune.TuneConfig(scheduler=pbt),
        run_config=tune.RunConfig(storage_path=str(tmp_path), name="pbt", verbose=0, stop={"training_iteration": 24}),
    ).fit()
    assert results.num_errors == 0
    experiment = tmp_path / "pbt"
    entries = [json.loads(line) for line in (experiment / "pbt_global.txt").read_text().splitlines()]
    assert entries, "at least one exploit"
    target_tag, clone_tag, target_iter, clone_iter, old_config, new_config = entries[0]
    assert target_tag.startswith("0_lr=0.01") and clone_tag.startswith("1_lr=3"), entries[0]
    # 3.0 moved one place (to 2.0, or kept at the list's end); no resampling.
    assert old_config["lr"] == 0.01 and new_config["lr"] in (2.0, 3.0), entries[0]
    assert target_iter >= 4 and clone_iter >= 1
    slow = next(r for r in results if "lr=0.01" in os.path.basename(r.path))
    policy = (experiment / f"pbt_policy_{slow.metrics['trial_id']}.txt").read_text().splitlines()
    assert json.loads(policy[0]) == entries[0]
    history = slow._metrics_history
    jump = next(i for i, r in enumerate(history) if r["lr"] != 0.01)
    assert history[jump - 1]["total"] < 1.0 and history[jump]["total"] > 3.0, (
        "after the exploit its running total went on from the clone's checkpoint"
    )
    assert slow.config["lr"] != 0.01


def test_explore_scales_numbers_moves_list_values_and_resamples():
    pbt = PopulationBasedTraining(
        metric="x",
        mode="max",
        resample_probability=0.0,
        perturbation_factors=(2.0, 0.5),
        hyperparam_mutations={"lr": tune.uniform(0, 1), "layers": [1, 2, 3], "nested": {"n": lambda: 7}},
    )
    pbt._rng = random.Random(0)
    for _ in range(20):
        explored = pbt._explore({"lr": 0.4, "layers": 2, "nested": {"n": 4}, "other": "kept"})
        assert explored["lr"] in (0.8, 0.2) and explored["layers"] in (1, 3)
        assert explored["nested"]["n"] in (8, 2) and explored["other"] == "kept"
    always = PopulationBasedTraining(
        metric="x", mode="max", resample_probability=1.0, hyperparam_mutations={"n": lambda: 7}
    )
    assert always._explore({"n": 4}) == {"n": 7}
    with pytest.raises(ValueError, match="needs hyperparam_mutations or custom_explore_fn"):
        PopulationBasedTraining(metric="x", mode="max")
