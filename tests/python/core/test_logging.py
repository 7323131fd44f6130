"""The engine's log goes to stderr through `tracing`, filtered by OXRAY_LOG."""

import os
import subprocess
import sys

SCRIPT = """
import oxray as ray

ray.init(num_cpus=1)

@ray.remote(resources={"no_such_resource": 1})
def never():
    return 1

try:
    ray.get(never.remote())
except ray.exceptions.TaskUnschedulableError:
    print("unschedulable")
ray.shutdown()
"""


def run_with_log_filter(value):
    env = dict(os.environ)
    env.pop("OXRAY_LOG", None)
    if value is not None:
        env["OXRAY_LOG"] = value
    return subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120)


def test_warnings_are_logged_by_default_and_oxray_log_filters_them():
    default = run_with_log_filter(None)
    assert default.returncode == 0 and "unschedulable" in default.stdout, default.stderr
    warning = [line for line in default.stderr.splitlines() if "no_such_resource" in line]
    assert warning and "WARN" in warning[0], default.stderr

    quiet = run_with_log_filter("error")
    assert quiet.returncode == 0 and "unschedulable" in quiet.stdout, quiet.stderr
    assert "no_such_resource" not in quiet.stderr, quiet.stderr


def test_a_bad_oxray_log_is_reported_not_ignored():
    bad = run_with_log_filter("oxray_runtime=notalevel")
    assert bad.returncode == 0, bad.stderr
    assert "ignoring OXRAY_LOG" in bad.stderr and "notalevel" in bad.stderr, bad.stderr
