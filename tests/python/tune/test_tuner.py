"""`Tuner.fit()` on a real embedded cluster, each trial an actor: the results
and the experiment directory as Ray lays it out, ASHA stopping bad trials
early, stop conditions, errors and retries from a checkpoint,
`with_parameters`, and bad input refused before any trial starts."""

import json
import os
import stat

import numpy as np
import pandas as pd
import pytest

from oxray import tune
from oxray.tune.schedulers import ASHAScheduler, MedianStoppingRule
from oxray.tune.search import ConcurrencyLimiter, Searcher
from oxray.tune.stopper import MaximumIterationStopper

pytestmark = pytest.mark.usefixtures("cluster")


def run_config(tmp_path, name="exp", **kwargs):
    return tune.RunConfig(storage_path=str(tmp_path), name=name, verbose=0, **kwargs)


def climb(config):
    for step in range(1, 6):
        tune.report({"score": config["a"] * step + config["b"]})


def test_a_grid_search_runs_every_trial_and_lays_out_the_experiment_as_ray(tmp_path):
    tuner = tune.Tuner(
        climb,
        param_space={"a": tune.grid_search([1, 2, 3]), "b": tune.uniform(0, 1), "fixed": {"depth": 4}},
        tune_config=tune.TuneConfig(metric="score", mode="max", num_samples=2),
        run_config=run_config(tmp_path),
    )
    results = tuner.fit()
    assert len(results) == 6 and results.num_errors == 0 and results.num_terminated == 6
    best = results.get_best_result()
    assert best.config["a"] == 3 and best.metrics["score"] == pytest.approx(15 + best.config["b"])
    assert best.metrics["training_iteration"] == 5 and best.metrics["done"] is True
    assert results.get_best_result(metric="score", mode="min").config["a"] == 1
    frame = results.get_dataframe()
    assert len(frame) == 6 and {"config/a", "config/fixed/depth", "score", "logdir"} <= set(frame.columns)
    assert len(best.metrics_dataframe) == 5

    experiment = tmp_path / "exp"
    assert results.experiment_path == str(experiment)
    assert tune.Tuner.can_restore(experiment)
    assert (experiment / ".validate_storage_marker").exists()
    [state_file] = list(experiment.glob("experiment_state-*.json"))
    state = json.loads(state_file.read_text())
    assert len(state["trial_data"]) == 6
    assert {json.loads(t)["status"] for t, _ in state["trial_data"]} == {"TERMINATED"}
    trial_dir = experiment / os.path.basename(best.path)
    assert trial_dir.name.startswith(f"climb_{best.metrics['trial_id']}_")
    assert json.loads((trial_dir / "params.json").read_text())["a"] == 3
    lines = (trial_dir / "result.json").read_text().splitlines()
    assert [json.loads(line)["training_iteration"] for line in lines] == [1, 2, 3, 4, 5]
    assert json.loads(lines[0])["config"]["fixed"] == {"depth": 4}
    progress = pd.read_csv(trial_dir / "progress.csv")
    assert list(progress["training_iteration"]) == [1, 2, 3, 4, 5] and "config" not in progress.columns
    for path in [experiment, *experiment.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & 0o077 == 0, f"{path} is {oct(mode)}: not private to the user"


def quality(config):
    for step in range(1, 10):
        tune.report({"loss": -config["q"] * step})


def test_asha_stops_worse_trials_at_the_first_rung_and_lets_the_best_reach_max_t(tmp_path):
    # One trial at a time, best first: every later trial meets a higher cutoff at rung 1.
    results = tune.Tuner(
        quality,
        param_space={"q": tune.grid_search([8, 7, 6, 5, 4])},
        tune_config=tune.TuneConfig(
            metric="loss",
            mode="min",
            max_concurrent_trials=1,
            scheduler=ASHAScheduler(max_t=9, grace_period=1, reduction_factor=3),
        ),
        run_config=run_config(tmp_path),
    ).fit()
    iterations = {r.config["q"]: r.metrics["training_iteration"] for r in results}
    assert iterations == {8: 9, 7: 1, 6: 1, 5: 1, 4: 1}
    assert results.num_terminated == 5


def test_the_median_stopping_rule_stops_trials_below_the_others_median(tmp_path):
    results = tune.Tuner(
        quality,
        param_space={"q": tune.grid_search([8, 7, 6, 5, 4])},
        tune_config=tune.TuneConfig(
            metric="loss",
            mode="min",
            max_concurrent_trials=1,
            scheduler=MedianStoppingRule(time_attr="training_iteration", grace_period=1, min_samples_required=2),
        ),
        run_config=run_config(tmp_path),
    ).fit()
    iterations = {r.config["q"]: r.metrics["training_iteration"] for r in results}
    # 8 and 7 run alone or beside one other (fewer than 2 samples); from 6 on, the best is below 7.5.
    assert iterations == {8: 9, 7: 9, 6: 1, 5: 1, 4: 1}


def test_stop_dicts_functions_and_stoppers_end_trials(tmp_path):
    def forever(config):
        step = 0
        while True:
            step += 1
            tune.report({"step": step})

    def run(stop, name):
        return tune.Tuner(
            forever,
            param_space={"x": tune.grid_search([1, 2])},
            run_config=run_config(tmp_path, name=name, stop=stop),
        ).fit()

    assert {r.metrics["step"] for r in run({"step": 3}, "dict")} == {3}
    assert {r.metrics["training_iteration"] for r in run(lambda trial_id, result: result["step"] >= 2, "fn")} == {2}
    assert {r.metrics["step"] for r in run(MaximumIterationStopper(4), "stopper")} == {4}

    class OneArgument:
        def stop(self, result):
            return True

    with pytest.raises(ValueError, match="a stop function takes \\(trial_id, result\\)"):
        run(OneArgument().stop, "bad")


def test_a_nested_stop_dict_applies_to_the_nested_result_key(tmp_path):
    def nested(config):
        for step in range(1, 100):
            tune.report({"outer": {"inner": step * config["k"]}})

    results = tune.Tuner(
        nested,
        param_space={"k": tune.grid_search([1, 2])},
        run_config=run_config(tmp_path, stop={"outer": {"inner": 6}}),
    ).fit()
    assert {r.config["k"]: r.metrics["training_iteration"] for r in results} == {1: 6, 2: 3}


def test_a_trainable_that_raises_is_an_errored_trial_and_the_rest_goes_on(tmp_path):
    def fragile(config):
        tune.report({"x": config["x"]})
        if config["x"] == 2:
            raise RuntimeError("boom at x=2")

    results = tune.Tuner(fragile, param_space={"x": tune.grid_search([1, 2, 3])}, run_config=run_config(tmp_path)).fit()
    assert results.num_errors == 1 and results.num_terminated == 2
    [failed] = [r for r in results if r.error is not None]
    assert isinstance(failed.error, RuntimeError) and "boom at x=2" in str(failed.error)
    error_text = open(os.path.join(failed.path, "error.txt")).read()
    assert error_text.startswith("Failure # 1 (occurred at ") and "RuntimeError: boom at x=2" in error_text


def test_a_failed_trial_is_retried_from_its_latest_checkpoint(tmp_path):
    marker = tmp_path / "failed-once"

    def resumable(config):
        start = 0
        checkpoint = tune.get_checkpoint()
        if checkpoint is not None:
            with checkpoint.as_directory() as d:
                start = int(open(os.path.join(d, "step")).read())
        for step in range(start + 1, 5):
            d = os.path.join(tune.get_context().get_trial_dir(), f"tmp-{step}")
            os.makedirs(d)
            with open(os.path.join(d, "step"), "w") as f:
                f.write(str(step))
            tune.report({"step": step, "resumed_from": start}, checkpoint=tune.Checkpoint.from_directory(d))
            if step == 2 and not marker.exists():
                marker.write_text("x")
                raise RuntimeError("crash after step 2")

    results = tune.Tuner(
        resumable, run_config=run_config(tmp_path, failure_config=tune.FailureConfig(max_failures=1))
    ).fit()
    [result] = results
    assert result.error is None
    steps = [r["step"] for r in result._metrics_history]
    assert steps == [1, 2, 3, 4], "the retry went on from step 2's checkpoint"
    assert result.metrics["resumed_from"] == 2 and result.metrics["training_iteration"] == 4
    assert os.path.basename(result.checkpoint.path) == "checkpoint_000003"
    assert "Failure # 1" in open(os.path.join(result.path, "error.txt")).read()


def test_with_parameters_ships_a_large_object_once_and_with_resources_sets_what_trials_hold(tmp_path):
    data = np.arange(1_000_000, dtype=np.int64)

    def uses_data(config, data=None):
        tune.report({"total": int(data.sum()) * config["k"], "cpus": tune.get_context().get_trial_resources()})

    trainable = tune.with_resources(tune.with_parameters(uses_data, data=data), {"cpu": 2})
    results = tune.Tuner(trainable, param_space={"k": tune.grid_search([1, 2])}, run_config=run_config(tmp_path)).fit()
    assert sorted(r.metrics["total"] for r in results) == [int(data.sum()), 2 * int(data.sum())]
    assert results[0].metrics["cpus"] == {"CPU": 2.0}


def test_with_resources_takes_a_function_of_each_trials_config(tmp_path):
    def reports_resources(config):
        tune.report({"cpus": tune.get_context().get_trial_resources()})

    trainable = tune.with_resources(reports_resources, lambda config: {"cpu": config["cpus"]})
    results = tune.Tuner(
        trainable, param_space={"cpus": tune.grid_search([1, 2])}, run_config=run_config(tmp_path, name="fn")
    ).fit()
    assert sorted(r.metrics["cpus"]["CPU"] for r in results) == [1.0, 2.0]

    returns_nonsense = tune.with_resources(reports_resources, lambda config: "two")
    with pytest.raises(ValueError, match="returned 'two' for config"):
        tune.Tuner(returns_nonsense, param_space={"cpus": 1}, run_config=run_config(tmp_path, name="bad")).fit()


def test_a_returned_value_is_the_last_result_a_dict_as_it_is_else_under_metric(tmp_path):
    def returns(config):
        return config["value"]

    results = tune.Tuner(
        returns,
        param_space={"value": tune.grid_search([3, {"score": 4}])},
        run_config=run_config(tmp_path, name="returns"),
    ).fit()
    by_kind = {type(r.config["value"]).__name__: r.metrics for r in results}
    assert by_kind["int"]["_metric"] == 3 and by_kind["dict"]["score"] == 4


def test_report_outside_a_trial_raises():
    with pytest.raises(RuntimeError, match=r"tune.report\(\) is called outside a Tune trial"):
        tune.report({"x": 1})


class FixedSearcher(Searcher):
    def suggest(self, trial_id):
        return {"a": 1, "b": 0}


@pytest.mark.parametrize(
    ("make", "error", "expected"),
    [
        (lambda: tune.TuneConfig(mode="avg"), ValueError, "mode='avg'"),
        (lambda: tune.TuneConfig(num_samples=0), ValueError, "num_samples=0"),
        (lambda: tune.TuneConfig(metrics="x"), TypeError, "metrics"),
        (lambda: tune.FailureConfig(max_failures=-2), ValueError, "max_failures=-2"),
        (lambda: ConcurrencyLimiter(FixedSearcher(), 0), ValueError, "max_concurrent=0"),
    ],
)
def test_bad_settings_are_refused_by_name(make, error, expected):
    with pytest.raises(error, match=expected):
        make()


@pytest.mark.parametrize(
    ("tuner_kwargs", "expected"),
    [
        (
            {"tune_config": tune.TuneConfig(scheduler=ASHAScheduler())},
            "AsyncHyperBandScheduler needs a metric and a mode",
        ),
        (
            {"tune_config": tune.TuneConfig(metric="nope", mode="max", scheduler=ASHAScheduler())},
            r"did not include the specified metric 'nope'.*reports \[.*'score'",
        ),
        (
            {
                "param_space": {"a": tune.grid_search([1, 2])},
                "tune_config": tune.TuneConfig(search_alg=FixedSearcher(metric="score", mode="max")),
            },
            "FixedSearcher cannot take grid_search",
        ),
        (
            {"trainable": tune.with_resources(climb, {"cpu": 8})},
            r"asks for \{CPU: 8\} but trials can use at most \{CPU: 2",
        ),
    ],
)
def test_bad_experiments_fail_before_or_at_the_first_result(tmp_path, tuner_kwargs, expected):
    kwargs = {"param_space": {"a": 1, "b": 0}, "run_config": run_config(tmp_path), **tuner_kwargs}
    with pytest.raises(ValueError, match=expected):
        tune.Tuner(kwargs.pop("trainable", climb), **kwargs).fit()


def reports_pid(config):
    tune.report({"x": config["x"]})


def test_trials_reuse_idle_actors_unless_reuse_actors_is_false(tmp_path):
    def pids(reuse, name):
        results = tune.Tuner(
            reports_pid,
            param_space={"x": tune.grid_search(list(range(6)))},
            tune_config=tune.TuneConfig(max_concurrent_trials=1, reuse_actors=reuse),
            run_config=run_config(tmp_path, name=name),
        ).fit()
        return [r.metrics["pid"] for r in results]

    assert len(set(pids(None, "default"))) == 1, "one trial at a time: every trial on the first actor"
    assert len(set(pids(False, "fresh"))) == 6, "a fresh actor per trial"


def test_a_placement_group_factory_of_several_bundles_holds_the_trials_child_tasks(tmp_path):
    import oxray as ray
    from oxray.util.placement_group import get_current_placement_group

    @ray.remote(num_cpus=1)
    def child():
        return get_current_placement_group() is not None

    def spawns(config):
        group = get_current_placement_group()
        inside = ray.get([child.remote() for _ in range(2)])
        tune.report({"in_group": group is not None, "children_in_group": inside, "k": config["k"]})

    # Each trial: 0 CPUs for its actor and one for its child, so two trials fit on 2 CPUs at once.
    trainable = tune.with_resources(spawns, tune.PlacementGroupFactory([{"CPU": 0}, {"CPU": 1}]))
    results = tune.Tuner(trainable, param_space={"k": tune.grid_search([1, 2])}, run_config=run_config(tmp_path)).fit()
    assert results.num_errors == 0, [r.error for r in results]
    assert all(r.metrics["in_group"] and r.metrics["children_in_group"] == [True, True] for r in results)
    from oxray.util.placement_group import placement_group_table
    from oxray_testutil import wait_until

    wait_until(
        "the trials' placement groups to be removed",
        lambda: all(g["state"] == "REMOVED" for g in placement_group_table().values()),
        timeout=30,
    )


class Sized(tune.Trainable):
    @classmethod
    def default_resource_request(cls, config):
        return {"cpu": config["cpus"]}

    def step(self):
        return {"cpus": self.trial_resources, "done": True}


def test_a_class_trainables_default_resource_request_sets_each_trials_resources(tmp_path):
    results = tune.Tuner(Sized, param_space={"cpus": tune.grid_search([1, 2])}, run_config=run_config(tmp_path)).fit()
    assert sorted(r.metrics["cpus"]["CPU"] for r in results) == [1.0, 2.0]


class AfterTrials(tune.Stopper):
    """Ends the experiment once `count` trials have reported."""

    def __init__(self, count):
        self.count, self.seen = count, set()

    def __call__(self, trial_id, result):
        self.seen.add(trial_id)
        return False

    def stop_all(self):
        return len(self.seen) >= self.count


def test_num_samples_minus_one_samples_until_a_stopper_ends_the_experiment(tmp_path):
    def once(config):
        tune.report({"x": config["x"], "grid": config["grid"]})

    results = tune.Tuner(
        once,
        param_space={"x": tune.uniform(0, 1), "grid": tune.grid_search(["a", "b"])},
        tune_config=tune.TuneConfig(num_samples=-1, max_concurrent_trials=1),
        run_config=run_config(tmp_path, stop=AfterTrials(7)),
    ).fit()
    # Passes over the grid, each config sampled afresh, until the stopper ends it.
    assert len(results) >= 7 and results.num_errors == 0
    ran = [r for r in results if r.metrics]
    assert len(ran) >= 7, "trials added but not started when the stopper ended it never run"
    assert [r.config["grid"] for r in ran][:6] == ["a", "b"] * 3
    assert len({r.config["x"] for r in ran}) == len(ran)


def chatty(config):
    import sys

    print(f"out of trial {config['i']}")
    print(f"err of trial {config['i']}", file=sys.stderr)
    tune.report({"i": config["i"]})


@pytest.mark.parametrize(
    "log_to_file, expected",
    [
        (True, {"stdout": "out of trial {i}\n", "stderr": "err of trial {i}\n"}),
        ("both.log", {"both.log": "out of trial {i}\nerr of trial {i}\n"}),
        ((None, "errors.log"), {"errors.log": "err of trial {i}\n"}),
    ],
)
def test_log_to_file_writes_each_trials_output_in_its_directory(tmp_path, log_to_file, expected):
    results = tune.Tuner(
        chatty,
        param_space={"i": tune.grid_search([0, 1])},
        run_config=run_config(tmp_path, log_to_file=log_to_file),
    ).fit()
    assert results.num_errors == 0
    for result in results:
        i = result.config["i"]
        for name, text in expected.items():
            path = os.path.join(result.path, name)
            assert open(path).read() == text.format(i=i)
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        if log_to_file is not True:
            assert not {"stdout", "stderr"} & set(os.listdir(result.path)), "only the files asked for"


@pytest.mark.parametrize("bad", ["", ("a",), ("a", 3), 5])
def test_a_bad_log_to_file_is_refused_before_any_trial(bad):
    with pytest.raises(ValueError, match=r"log_to_file="):
        tune.RunConfig(log_to_file=bad)


def ends_itself(config):
    step = 0
    while True:  # never returns: the trial ends when it reports done=True
        step += 1
        tune.report({"step": step, "done": step == 3})


def test_a_trainable_reporting_done_ends_its_trial_there(tmp_path):
    results = tune.Tuner(ends_itself, run_config=run_config(tmp_path, "done")).fit()
    assert results.num_errors == 0
    assert results[0].metrics["step"] == 3
    assert results[0].metrics["training_iteration"] == 3
    assert results[0].metrics["done"] is True
