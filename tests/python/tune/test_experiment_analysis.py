"""`ExperimentAnalysis` as Ray 2.60's: NaN and infinite scores are never the best
(`filter_nan_and_inf=True`), no best trial is None rather than an error, checkpoints
whose metric is NaN are skipped, and results, configs and dataframes are keyed by
trial id; `ExperimentAnalysis(path)` reads the same back from the directory."""

import math
import os
import tempfile

import pytest

from oxray import tune
from oxray.tune import ExperimentAnalysis

pytestmark = pytest.mark.usefixtures("cluster")

NAN = float("nan")
# Per trial id: 7 reports; the first 5 with a checkpoint; "maybe_nan" is finite only at the 4th.
MAYBE_NAN = [NAN, NAN, NAN, 42, NAN, NAN, NAN]


def reporting(config):
    n = config["id"]
    for i in range(1, 8):
        metrics = {"ascending": i * n, "descending": -i * n, "maybe_nan": MAYBE_NAN[i - 1], "inf": math.inf}
        if i <= 5:
            with tempfile.TemporaryDirectory() as d:
                with open(os.path.join(d, "i"), "w") as f:
                    f.write(str(i))
                tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(d))
        else:
            tune.report(metrics)


def checkpoint_step(checkpoint) -> int:
    with checkpoint.as_directory() as d:
        return int(open(os.path.join(d, "i")).read())


@pytest.fixture(scope="module")
def analysis(tmp_path_factory):
    return tune.run(
        reporting,
        config={"id": tune.grid_search([1, 2, 3])},
        metric="ascending",
        mode="max",
        storage_path=str(tmp_path_factory.mktemp("ea")),
        name="nan",
        verbose=0,
    )


def check(ea):
    by_id = {t.config["id"]: t for t in ea.trials}
    assert ea.best_trial is by_id[3] and ea.best_config == {"id": 3}
    assert ea.best_result["ascending"] == 21
    assert ea.get_best_config(metric="descending", mode="max") == {"id": 1}
    # The last "maybe_nan" of every trial is NaN: no best trial, no best config (None, as Ray's).
    assert ea.get_best_trial(metric="maybe_nan", mode="max") is None
    assert ea.get_best_config(metric="maybe_nan", mode="max") is None
    assert ea.get_best_trial(metric="inf", mode="max") is None, "infinite scores are filtered too"
    assert ea.get_best_trial(metric="maybe_nan", mode="max", filter_nan_and_inf=False) is not None
    # scope="all": each trial's best ever (42 at the 4th report) counts.
    assert ea.get_best_trial(metric="maybe_nan", mode="max", scope="all") is not None
    assert ea.get_best_trial(metric="never_reported", mode="max") is None
    # Checkpoints: the best by a metric, NaN ones skipped; the latest by training_iteration.
    assert checkpoint_step(ea.get_best_checkpoint(by_id[3])) == 5
    assert checkpoint_step(ea.get_best_checkpoint(by_id[3], metric="descending", mode="max")) == 1
    assert checkpoint_step(ea.get_best_checkpoint(by_id[3], metric="maybe_nan", mode="max")) == 4
    assert ea.get_best_checkpoint(by_id[3], metric="never_reported", mode="max") is None
    assert checkpoint_step(ea.best_checkpoint) == 5
    assert checkpoint_step(ea.get_last_checkpoint()) == 5
    assert checkpoint_step(ea.get_last_checkpoint(trial=by_id[1])) == 5
    # Keyed by trial id, as Ray 2.60.
    ids = {t.trial_id for t in ea.trials}
    assert set(ea.results) == ids and set(ea.get_all_configs()) == ids and set(ea.trial_dataframes) == ids
    assert list(ea.best_dataframe["ascending"]) == [3 * i for i in range(1, 8)]
    assert set(ea.results_df.index) == ids and ea.results_df.loc[by_id[3].trial_id, "ascending"] == 21
    assert ea.best_result_df.loc[by_id[3].trial_id, "ascending"] == 21
    assert sorted(ea.dataframe(metric="descending", mode="max")["descending"]) == [-3, -2, -1]
    with pytest.raises(ValueError, match="needs metric= too"):
        ea.dataframe(mode="max")


def test_the_analysis_tune_run_returns_skips_nan_and_inf(analysis):
    check(analysis)


def test_the_analysis_read_from_the_directory_does_the_same(analysis):
    read = ExperimentAnalysis(analysis.experiment_path, default_metric="ascending", default_mode="max")
    check(read)
    assert {k: len(v) for k, v in read.fetch_trial_dataframes().items()} == dict.fromkeys(
        {t.trial_id for t in read.trials}, 7
    )
    assert read.stats()["start_time"] > 0


def test_best_properties_need_a_default_metric_and_mode(analysis):
    read = ExperimentAnalysis(analysis.experiment_path)
    with pytest.raises(ValueError, match="pass a `metric` and `mode`"):
        _ = read.best_trial
    with pytest.raises(ValueError, match="needs a metric"):
        read.get_best_trial(mode="max")
    with pytest.raises(ValueError, match="mode='best'"):
        read.get_best_trial(metric="ascending", mode="best")
    assert read.get_best_trial(metric="ascending", mode="min").config == {"id": 1}
