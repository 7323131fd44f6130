"""Schedulers that pause trials, on a real embedded cluster: synchronous
HyperBand pauses each trial at its bracket's milestone until the bracket is
all there, resumes the best from their checkpoints and stops the rest; PBT
pauses a trial at its perturbation interval while others wait, so more trials
than free slots share the cluster's time, as in Ray."""

import itertools
import json
import os
import tempfile
import time

import pytest

from oxray import tune
from oxray.tune.schedulers import HyperBandScheduler, PopulationBasedTraining

pytestmark = [pytest.mark.usefixtures("cluster"), pytest.mark.timeout(240)]


def steady(config):
    """Reports `q * step` for up to `steps` steps, a checkpoint each, resuming from the latest."""
    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            start = int(open(os.path.join(d, "step")).read())
    for step in range(start + 1, config.get("steps", 100) + 1):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "step"), "w") as f:
                f.write(str(step))
            metrics = {"score": config["q"] * step, "resumed_from": start, "t": time.time()}
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(d))


def iterations_in_file(result):
    with open(os.path.join(result.path, "result.json")) as f:
        return [json.loads(line)["training_iteration"] for line in f]


def test_hyperband_pauses_at_milestones_resumes_the_best_from_checkpoints_and_stops_the_rest(tmp_path):
    # max_t 9, eta 3: the first bracket runs 3 trials to 9; the second takes 5 to a milestone of 3,
    # where the best ceil(5/3) = 2 go on to 9 and the other 3 stop.
    results = tune.Tuner(
        steady,
        param_space={"q": tune.grid_search([1, 2, 3, 4, 5, 6, 7, 8])},
        tune_config=tune.TuneConfig(
            metric="score",
            mode="max",
            scheduler=HyperBandScheduler(max_t=9, reduction_factor=3),
            max_concurrent_trials=1,  # one at a time: each waits, paused, for the rest of its bracket
        ),
        run_config=tune.RunConfig(storage_path=str(tmp_path), name="hb", verbose=0),
    ).fit()
    by_q = {r.config["q"]: r for r in results}
    assert {q: r.metrics["training_iteration"] for q, r in by_q.items()} == {
        1: 9,
        2: 9,
        3: 9,
        4: 3,
        5: 3,
        6: 3,
        7: 9,
        8: 9,
    }
    assert results.num_terminated == 8 and results.num_errors == 0
    # q=7 paused at 3 and resumed from its checkpoint once q=8, the last, got there; q=8 never paused.
    assert by_q[7].metrics["resumed_from"] == 3 and by_q[8].metrics["resumed_from"] == 0
    assert iterations_in_file(by_q[7]) == list(range(1, 10))
    # The first bracket's trials wait for each other at 9 too: the first two were paused there.
    assert [by_q[q].metrics["resumed_from"] for q in (1, 2, 3)] == [0, 0, 0]


def test_pbt_shares_the_slots_among_more_trials_than_fit_by_pausing_at_each_interval(tmp_path):
    pbt = PopulationBasedTraining(
        time_attr="training_iteration",
        perturbation_interval=2,
        quantile_fraction=0,  # nobody is in the bottom quantile: only the pausing is at work
        hyperparam_mutations={"q": [1, 2, 3]},
    )
    results = tune.Tuner(
        steady,
        param_space={"q": tune.grid_search([1, 2, 3]), "steps": 6},
        tune_config=tune.TuneConfig(metric="score", mode="max", scheduler=pbt, max_concurrent_trials=1),
        run_config=tune.RunConfig(storage_path=str(tmp_path), name="pbt", verbose=0),
    ).fit()
    assert [r.metrics["training_iteration"] for r in results] == [6, 6, 6]
    spans = sorted((min(h["t"] for h in r._metrics_history), max(h["t"] for h in r._metrics_history)) for r in results)
    # One slot, three trials: each paused at iterations 2 and 4 for the others, so their runs interleave.
    assert all(later[0] < earlier[1] for earlier, later in itertools.pairwise(spans)), spans
    for result in results:
        assert iterations_in_file(result) == [1, 2, 3, 4, 5, 6]
        assert result.metrics["resumed_from"] == 4
