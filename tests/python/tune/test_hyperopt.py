"""`HyperOptSearch` over HyperOpt's TPE: Tune's space converted to hp.*
expressions (bounds and constants kept), every result told back as a loss
(negated for mode="max"), and spaces it cannot take refused by name."""

import pytest

from oxray import tune

hyperopt = pytest.importorskip("hyperopt")
from oxray.tune.search.hyperopt import HyperOptSearch  # noqa: E402

pytestmark = pytest.mark.usefixtures("cluster")


def objective(config):
    tune.report({"score": -((config["x"] - 1) ** 2) - config["nested"]["k"], "kind": config["kind"]})


def test_tunes_space_becomes_hyperopts_and_results_are_told_back(tmp_path):
    search = HyperOptSearch(random_state_seed=0, n_initial_points=5)
    results = tune.Tuner(
        objective,
        param_space={
            "x": tune.uniform(-5, 5),
            "lr": tune.loguniform(1e-4, 1e-1),
            "kind": tune.choice(["a", "b"]),
            "nested": {"k": tune.randint(0, 3), "fixed": 7},
        },
        tune_config=tune.TuneConfig(metric="score", mode="max", search_alg=search, num_samples=10),
        run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0),
    ).fit()
    assert len(results) == 10 and results.num_errors == 0
    for r in results:
        c = r.config
        assert -5 <= c["x"] <= 5 and 1e-4 <= c["lr"] <= 1e-1 and c["kind"] in ("a", "b")
        assert c["nested"]["k"] in (0, 1, 2) and c["nested"]["fixed"] == 7
    done = [t for t in search._trials.trials if t["state"] == hyperopt.JOB_STATE_DONE]
    assert len(done) == 10
    best = results.get_best_result()
    assert min(t["result"]["loss"] for t in done) == -best.metrics["score"], "losses are the negated scores"


@pytest.mark.parametrize(
    ("param_space", "expected"),
    [
        ({"x": tune.grid_search([1, 2])}, "cannot take grid_search"),
        ({"x": tune.sample_from(lambda spec: 1)}, "HyperOptSearch cannot take sample_from"),
    ],
)
def test_spaces_hyperopt_cannot_take_are_refused_by_name(tmp_path, param_space, expected):
    with pytest.raises(ValueError, match=expected):
        tune.Tuner(
            objective,
            param_space=param_space,
            tune_config=tune.TuneConfig(metric="score", mode="max", search_alg=HyperOptSearch()),
            run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0),
        ).fit()


def test_convert_search_space_gives_hp_expressions_nested_as_the_space(tmp_path):
    space = {"x": tune.uniform(-10, 10), "nested": {"k": tune.choice([1, 2])}, "constant": 1}
    converted = HyperOptSearch.convert_search_space(space)
    assert set(converted) == {"x", "nested"} and set(converted["nested"]) == {"k"}
    search = HyperOptSearch(space=converted, metric="loss", mode="min", random_state_seed=1)
    results = tune.Tuner(
        lambda config: tune.report({"loss": config["x"] ** 2 + config["nested"]["k"]}),
        tune_config=tune.TuneConfig(search_alg=search, num_samples=3),
        run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0),
    ).fit()
    assert results.num_errors == 0
    assert all(-10 <= r.config["x"] <= 10 and r.config["nested"]["k"] in (1, 2) for r in results)
