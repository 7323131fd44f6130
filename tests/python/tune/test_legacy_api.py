"""Tune's older entry points, as Ray keeps them: `tune.run` and its
`ExperimentAnalysis`, `register_trainable` names, `create_scheduler` /
`create_searcher` by name, and the configs only taken at their defaults."""

import pytest

from oxray import tune
from oxray.tune.schedulers import AsyncHyperBandScheduler

pytestmark = pytest.mark.usefixtures("cluster")


def parabola(config):
    for step in range(3):
        tune.report({"loss": (config["x"] - 2) ** 2 + step})


def test_tune_run_returns_an_experiment_analysis(tmp_path):
    analysis = tune.run(
        parabola,
        config={"x": tune.grid_search([0, 2, 5])},
        metric="loss",
        mode="min",
        storage_path=str(tmp_path),
        name="legacy",
        verbose=0,
    )
    assert analysis.best_config == {"x": 2}
    assert analysis.best_result["loss"] == 2 and analysis.best_result["training_iteration"] == 3
    assert len(analysis.results_df) == 3 and len(analysis.trials) == 3
    assert analysis.get_best_config(metric="loss", mode="max") == {"x": 5}
    assert analysis.experiment_path == str(tmp_path / "legacy")
    assert len(analysis.dataframe(metric="loss", mode="min")) == 3

    # Read back from the directory alone, as Ray's ExperimentAnalysis(path) does.
    from oxray.tune.analysis import ExperimentAnalysis

    read = ExperimentAnalysis(str(tmp_path / "legacy"), default_metric="loss", default_mode="min")
    assert read.best_config == {"x": 2}
    assert sorted(t.last_result["training_iteration"] for t in read.trials) == [3, 3, 3]
    assert len(read.results_df) == 3
    assert read.get_all_configs() == {t.trial_id: t.config for t in read.trials}, "keyed by trial id, as Ray 2.60"
    assert set(read.get_all_configs(prefix=True)[read.best_trial.trial_id]) == {"config/x"}
    assert list(read.best_dataframe["loss"]) == [0, 1, 2]
    assert read.get_best_checkpoint(read.best_trial) is None and not read.best_trial.has_checkpoint()
    from oxray.tune import ResultGrid

    grid = ResultGrid(read)
    assert len(grid) == 3 and grid.get_best_result().config == {"x": 2}
    with pytest.raises(ValueError, match="expected the directory of an experiment"):
        ExperimentAnalysis(str(tmp_path / "nowhere"))


def test_run_experiments_takes_experiments_and_their_dict_form(tmp_path):
    experiment = tune.Experiment(
        "as_object",
        parabola,
        config={"x": tune.grid_search([1, 2])},
        stop={"training_iteration": 2},
        storage_path=str(tmp_path),
    )
    trials = tune.run_experiments(experiment, verbose=0)
    assert sorted(t.config["x"] for t in trials) == [1, 2]
    assert all(t.last_result["training_iteration"] == 2 for t in trials)
    assert (tmp_path / "as_object").is_dir()

    spec = {"as_dict": {"run": parabola, "config": {"x": 3}, "num_samples": 2, "storage_path": str(tmp_path)}}
    trials = tune.run_experiments(spec, verbose=0)
    assert [t.config["x"] for t in trials] == [3, 3] and all(t.status == "TERMINATED" for t in trials)

    analysis = tune.run(tune.Experiment("through_run", parabola, config={"x": 2}, storage_path=str(tmp_path)))
    assert analysis.trials[0].last_result["loss"] == 2

    with pytest.raises(NotImplementedError, match="pass concurrent=False"):
        tune.run_experiments([experiment, experiment])
    with pytest.raises(TypeError, match=r"keys Experiment does not take: \['local_dir'\]"):
        tune.run_experiments({"bad": {"run": parabola, "local_dir": str(tmp_path)}})
    with pytest.raises(ValueError, match="expected a dict with a 'run' key"):
        tune.run_experiments({"bad": {"config": {}}})


def test_tune_run_resumes_an_experiment_by_name(tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()

    def fails_first_time(config):
        marker = marks / f"ran-{config['x']}"
        first = not marker.exists()
        marker.touch()
        if first and config["x"] == 1:
            raise RuntimeError("first run fails")
        tune.report({"loss": config["x"]})

    kwargs = dict(config={"x": tune.grid_search([0, 1])}, storage_path=str(tmp_path), name="resumed", verbose=0)
    first = tune.run(fails_first_time, raise_on_failed_trial=False, **kwargs)
    assert sorted(t.status for t in first.trials) == ["ERROR", "TERMINATED"]
    again = tune.run(fails_first_time, resume="AUTO+ERRORED", **kwargs)
    assert sorted(t.status for t in again.trials) == ["TERMINATED", "TERMINATED"]
    assert {t.config["x"]: t.last_result["loss"] for t in again.trials} == {0: 0, 1: 1}

    fresh = tune.run(parabola, resume="AUTO", config={"x": 2}, storage_path=str(tmp_path), name="new", verbose=0)
    assert fresh.trials[0].last_result["loss"] == 2
    with pytest.raises(ValueError, match="no experiment to resume"):
        tune.run(parabola, resume=True, storage_path=str(tmp_path), name="missing", verbose=0)
    with pytest.raises(ValueError, match="resume='SOMETIMES'"):
        tune.run(parabola, resume="SOMETIMES", storage_path=str(tmp_path), name="new", verbose=0)


def test_a_failed_trial_raises_from_tune_run_unless_told_not_to(tmp_path):
    def fails(config):
        raise ValueError("no")

    with pytest.raises(tune.TuneError, match="Trials did not complete"):
        tune.run(fails, storage_path=str(tmp_path), verbose=0)
    analysis = tune.run(fails, storage_path=str(tmp_path), verbose=0, raise_on_failed_trial=False)
    assert analysis.trials[0].status == "ERROR"
    with pytest.raises(TypeError, match="local_dir"):
        tune.run(parabola, local_dir=str(tmp_path))


def test_a_registered_trainable_runs_by_name(tmp_path):
    tune.register_trainable("my_parabola", parabola)
    results = tune.Tuner(
        "my_parabola", param_space={"x": 1}, run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0)
    ).fit()
    assert results[0].metrics["loss"] == 3
    with pytest.raises(ValueError, match="no trainable is registered as 'unknown'"):
        tune.Tuner("unknown")


def test_schedulers_and_searchers_by_name_and_configs_at_their_defaults():
    scheduler = tune.create_scheduler("async_hyperband", metric="loss", mode="min", max_t=9)
    assert isinstance(scheduler, AsyncHyperBandScheduler) and scheduler.max_t == 9
    assert type(tune.create_searcher("optuna", metric="loss", mode="min")).__name__ == "OptunaSearch"
    with pytest.raises(ValueError, match="expected one of"):
        tune.create_scheduler("nope")
    tune.RunConfig(sync_config=tune.SyncConfig())
    with pytest.raises(NotImplementedError, match="only the default SyncConfig"):
        tune.RunConfig(sync_config=tune.SyncConfig(sync_period=10))
    with pytest.raises(NotImplementedError, match="never rerun"):
        tune.ResumeConfig(finished="RESUME")
