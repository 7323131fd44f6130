"""`ray.air` as Ray 2.60 keeps it for Tune users: `ray.air.constants` (the same values
as `ray.tune.result`) and the configs, loaded on first use only."""

import subprocess
import sys


def test_air_constants_are_rays_names_and_values():
    import oxray as ray
    from oxray.air.constants import (
        EXPR_ERROR_FILE,
        EXPR_ERROR_PICKLE_FILE,
        EXPR_PARAM_FILE,
        EXPR_PARAM_PICKLE_FILE,
        EXPR_PROGRESS_FILE,
        EXPR_RESULT_FILE,
        TIME_THIS_ITER_S,
        TIMESTAMP,
        TRAINING_ITERATION,
    )
    from oxray.tune import result

    assert (EXPR_PARAM_FILE, EXPR_PARAM_PICKLE_FILE, EXPR_PROGRESS_FILE, EXPR_RESULT_FILE) == (
        "params.json",
        "params.pkl",
        "progress.csv",
        "result.json",
    )
    assert (EXPR_ERROR_FILE, EXPR_ERROR_PICKLE_FILE) == ("error.txt", "error.pkl")
    assert (TRAINING_ITERATION, TIME_THIS_ITER_S, TIMESTAMP) == (
        result.TRAINING_ITERATION,
        result.TIME_THIS_ITER_S,
        result.TIMESTAMP,
    )
    assert ray.air.constants.TIME_TOTAL_S == result.TIME_TOTAL_S == "time_total_s"
    assert ray.air.RunConfig is ray.tune.RunConfig and ray.air.ScalingConfig is ray.train.ScalingConfig


def test_import_oxray_does_not_load_air_or_tune():
    code = "import sys, oxray; assert not {'oxray.air', 'oxray.tune'} & set(sys.modules), sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)
