"""Trial actors forked from a worker template that imported Tune: a script that
imported Tune before `init()` (as Ray's Tune docs do) gets one; with
`OXRAY_TUNE_TEMPLATE_AT_INIT=0`, or Tune imported only after `init()`, the
node's own template forks them. Each case is a driver process of its own."""

import json
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import json
    import os
    import sys

    import psutil

    if sys.argv[1] == "tune-first":
        from oxray import tune  # noqa: F401 - imported before init, as Ray's Tune docs do
    import oxray as ray

    ray.init(num_cpus=2)
    from oxray import tune


    def trainable(config):
        parent = psutil.Process(os.getppid())
        tune.report(
            {
                "preload": os.environ.get("OXRAY_TEMPLATE_PRELOAD", ""),
                "parent_is_template": "oxray._private.worker_template" in " ".join(parent.cmdline()),
                "parent_preload": parent.environ().get("OXRAY_TEMPLATE_PRELOAD", ""),
            }
        )


    results = tune.Tuner(
        trainable,
        param_space={"i": tune.grid_search([0, 1, 2])},
        run_config=tune.RunConfig(storage_path=sys.argv[2], name="exp", verbose=0),
    ).fit()
    assert results.num_errors == 0, results.errors
    print("RESULTS " + json.dumps([{k: r.metrics[k] for k in ("preload", "parent_is_template", "parent_preload")}
                                    for r in results]))
    """
)


def run_driver(tmp_path, order: str, at_init: str) -> list:
    tmp_path.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OXRAY_TUNE_TEMPLATE_AT_INIT": at_init}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, order, str(tmp_path / "experiments")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULTS ")]
    assert out.returncode == 0 and lines, out.stdout + out.stderr
    return json.loads(lines[-1][len("RESULTS ") :])


def test_a_script_that_imported_tune_first_forks_its_trial_actors_from_a_template_that_imported_tune(tmp_path):
    for trial in run_driver(tmp_path, "tune-first", "1"):
        assert trial == {
            "preload": "oxray.tune._internal.trial_actor",
            "parent_is_template": True,
            "parent_preload": "oxray.tune._internal.trial_actor",
        }


def test_without_the_setting_or_with_tune_imported_after_init_the_nodes_own_template_forks_them(tmp_path):
    for order, at_init in (("tune-first", "0"), ("init-first", "1")):
        for trial in run_driver(tmp_path / order, order, at_init):
            assert trial == {"preload": "", "parent_is_template": True, "parent_preload": ""}, (order, at_init)
