"""`OptunaSearch` over a real Optuna study: Tune's space converted to Optuna
distributions (nested keys, constants, bounds as Tune defines them), a
define-by-run space, points to evaluate first, multi-objective search, and
spaces Optuna cannot take refused by name before any trial starts."""

import pytest

from oxray import tune

optuna = pytest.importorskip("optuna")
from oxray.tune.search.optuna import OptunaSearch  # noqa: E402

pytestmark = pytest.mark.usefixtures("cluster")


def objective(config):
    tune.report({"loss": (config["x"] - 3) ** 2 + config["nested"]["k"], "lr": config["lr"]})


def run_config(tmp_path, name="exp"):
    return tune.RunConfig(storage_path=str(tmp_path), name=name, verbose=0)


def test_tunes_space_becomes_optunas_and_every_result_reaches_the_study(tmp_path):
    search = OptunaSearch(seed=7, points_to_evaluate=[{"x": 3.0, "lr": 0.01, "nested": {"k": 0, "fixed": "f"}}])
    results = tune.Tuner(
        objective,
        param_space={
            "x": tune.uniform(-10, 10),
            "lr": tune.loguniform(1e-4, 1e-1),
            "nested": {"k": tune.randint(0, 3), "fixed": "f"},
        },
        tune_config=tune.TuneConfig(metric="loss", mode="min", search_alg=search, num_samples=12),
        run_config=run_config(tmp_path),
    ).fit()
    assert len(results) == 12 and results.num_errors == 0
    configs = [r.config for r in results]
    assert all(-10 <= c["x"] <= 10 and 1e-4 <= c["lr"] <= 1e-1 and c["nested"]["k"] in (0, 1, 2) for c in configs)
    assert all(c["nested"]["fixed"] == "f" for c in configs), "constants are kept"
    assert any(c["x"] == 3.0 and c["nested"]["k"] == 0 for c in configs), "the point to evaluate ran"
    completed = [t for t in search._study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(completed) == 12
    assert search._study.best_value == results.get_best_result().metrics["loss"] == 0.0


def test_convert_search_space_gives_optuna_distributions_by_path(tmp_path):
    space = {"x": tune.uniform(-10, 10), "nested": {"k": tune.randint(0, 3)}, "constant": 1}
    converted = OptunaSearch.convert_search_space(space)
    assert converted == {
        "x": optuna.distributions.FloatDistribution(-10, 10),
        "nested/k": optuna.distributions.IntDistribution(0, 2),
    }
    search = OptunaSearch(space=converted, metric="loss", mode="min", seed=1)
    results = tune.Tuner(
        lambda config: tune.report({"loss": config["x"] ** 2 + config["nested"]["k"]}),
        tune_config=tune.TuneConfig(search_alg=search, num_samples=3),
        run_config=run_config(tmp_path, "converted"),
    ).fit()
    assert results.num_errors == 0 and all(r.config["nested"]["k"] in (0, 1, 2) for r in results)
    with pytest.raises(ValueError, match="OptunaSearch cannot convert grid_search at 'g'"):
        OptunaSearch.convert_search_space({"g": tune.grid_search([1, 2])})


def test_a_define_by_run_space_and_a_multi_objective_search(tmp_path):
    def space(trial):
        kind = trial.suggest_categorical("kind", ["a", "b"])
        if kind == "a":
            trial.suggest_float("a_value", 0.0, 1.0)
        return {"constant": 5}

    def two_metrics(config):
        value = config.get("a_value", 0.5)
        tune.report({"first": value, "second": value * config["constant"]})

    search = OptunaSearch(space=space, metric=["first", "second"], mode=["min", "max"], seed=1)
    results = tune.Tuner(
        two_metrics,
        tune_config=tune.TuneConfig(search_alg=search, num_samples=6),
        run_config=run_config(tmp_path),
    ).fit()
    assert len(results) == 6 and all(r.config["constant"] == 5 for r in results)
    assert {r.config["kind"] for r in results} <= {"a", "b"}
    assert all(("a_value" in r.config) == (r.config["kind"] == "a") for r in results), "conditional parameters"
    assert [d.name for d in search._study.directions] == ["MINIMIZE", "MAXIMIZE"]
    assert len(search._study.best_trials) >= 1


@pytest.mark.parametrize(
    ("param_space", "expected"),
    [
        ({"x": tune.grid_search([1, 2])}, "cannot take grid_search"),
        ({"x": tune.randn(0, 1)}, "OptunaSearch cannot take randn"),
    ],
)
def test_spaces_optuna_cannot_take_are_refused_by_name(tmp_path, param_space, expected):
    with pytest.raises(ValueError, match=expected):
        tune.Tuner(
            objective,
            param_space=param_space,
            tune_config=tune.TuneConfig(metric="loss", mode="min", search_alg=OptunaSearch()),
            run_config=run_config(tmp_path),
        ).fit()


def test_the_other_searchers_ray_wraps_are_refused_by_name():
    from oxray.tune.search.ax import AxSearch
    from oxray.tune.search.nevergrad import NevergradSearch

    for cls in (AxSearch, NevergradSearch):
        with pytest.raises(NotImplementedError, match=f"{cls.__name__} .* is not supported by oxray"):
            cls(metric="loss", mode="min")


def slow_objective(config):
    import time as _time

    _time.sleep(0.4)
    tune.report({"loss": (config["x"] - 3) ** 2})


OPTUNA_DRIVER = """
import sys, time
import oxray as ray
from oxray import tune
from oxray.tune.search.optuna import OptunaSearch


def slow_objective(config):
    time.sleep(0.4)
    tune.report({"loss": (config["x"] - 3) ** 2})


ray.init(num_cpus=2)
tune.Tuner(
    slow_objective,
    param_space={"x": tune.uniform(-10, 10)},
    tune_config=tune.TuneConfig(metric="loss", mode="min", search_alg=OptunaSearch(seed=3), num_samples=6,
                                max_concurrent_trials=1),
    run_config=tune.RunConfig(storage_path=sys.argv[1], name="killed", verbose=0),
).fit()
"""


def test_a_restore_goes_on_with_the_studys_state(tmp_path):
    import json
    import os
    import signal
    import subprocess
    import sys

    from oxray_testutil import wait_until

    script = tmp_path / "driver.py"
    script.write_text(OPTUNA_DRIVER)
    driver = subprocess.Popen([sys.executable, str(script), str(tmp_path)], start_new_session=True)
    experiment = tmp_path / "killed"

    def two_done():
        states = sorted(experiment.glob("experiment_state-*.json")) if experiment.exists() else []
        if not states:
            return False
        trials = [json.loads(t) for t, _ in json.loads(states[-1].read_text())["trial_data"]]
        return sum(t["status"] == "TERMINATED" for t in trials) >= 2

    try:
        wait_until("two trials to finish", two_done, timeout=120)
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    assert list(experiment.glob("searcher-state-*.pkl")), "the study was saved with the experiment"
    restored = tune.Tuner.restore(str(experiment), trainable=slow_objective)
    results = restored.fit()
    assert len(results) == 6 and results.num_errors == 0
    [state] = sorted(experiment.glob("searcher-state-*.pkl"))[-1:]
    from oxray import cloudpickle

    search = cloudpickle.loads(state.read_bytes()).searcher
    completed = [t for t in search._study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(completed) == 6, "the restored study was told every trial, the first ones included"
