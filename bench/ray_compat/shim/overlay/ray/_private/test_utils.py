"""The test utilities of Ray's ``ray._private.test_utils`` that use only Ray's public API,
written for the harness on oxray's public API. Other names are Ray internals: a test
file may import them at module level (they are placeholders then), and the tests
using them are excluded by the filter."""

import contextlib
import os
import subprocess
import sys
import time

from _ray_compat_shim import lenient_getattr
from ray._common.test_utils import driver_env, run_driver, run_string_as_driver, wait_for_condition  # noqa: F401

import oxray as ray

__getattr__ = lenient_getattr(__name__)


def client_test_enabled() -> bool:
    """Ray Client mode is never on here (oxray has no Ray Client)."""
    return False


def external_redis_test_enabled() -> bool:
    return False


def run_string_as_driver_nonblocking(driver_script: str, env=None):
    """Starts ``driver_script`` in a new Python process; returns the Popen (stdout, stderr piped)."""
    script = "; ".join(
        [
            "import sys",
            "script = sys.stdin.read()",
            "sys.stdin.close()",
            "del sys",
            'exec("del script\\n" + script)',
        ]
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=driver_env(env),
    )
    proc.stdin.write(driver_script.encode("ascii"))
    proc.stdin.close()
    return proc


def run_string_as_driver_stdout_stderr(driver_script: str, env=None, encode: str = "utf-8"):
    """Runs ``driver_script`` in a new Python process; its (stdout, stderr)."""
    proc, out, err = run_driver(driver_script, env, encode)
    out, err = out.decode(encode, errors="replace"), err.decode(encode, errors="replace")
    if proc.returncode:
        print(out)
        print(err)
        raise subprocess.CalledProcessError(proc.returncode, proc.args, out, err)
    return out, err


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except OSError:
        return False


def wait_for_pid_to_exit(pid: int, timeout: float = 20):
    start = time.time()
    while time.time() - start < timeout:
        if not _pid_alive(pid):
            return
        time.sleep(0.1)
    raise TimeoutError(f"Timed out while waiting for process {pid} to exit.")


def wait_for_assertion(assertion_predictor, timeout=10, retry_interval_ms=100, raise_exceptions=False, **kwargs):
    """Waits until ``assertion_predictor(**kwargs)`` stops raising AssertionError."""

    def holds():
        try:
            assertion_predictor(**kwargs)
            return True
        except AssertionError:
            return False

    try:
        wait_for_condition(
            holds, timeout=timeout, retry_interval_ms=retry_interval_ms, raise_exceptions=raise_exceptions
        )
    except RuntimeError:
        assertion_predictor(**kwargs)


def wait_until_succeeded_without_exception(
    func, exceptions, *args, timeout_ms=1000, retry_interval_ms=100, raise_last_ex=False
):
    """Calls ``func(*args)`` until it returns without one of ``exceptions``; whether it did in time."""
    start = time.time()
    last_error = None
    while (time.time() - start) * 1000 <= timeout_ms:
        try:
            func(*args)
            return True
        except exceptions as e:
            last_error = e
            time.sleep(retry_interval_ms / 1000.0)
    if raise_last_ex:
        raise Exception(f"Timed out while testing: {last_error!r}")
    return False


def same_elements(elems_a, elems_b) -> bool:
    """Whether two iterables hold the same elements (which need not be hashable)."""
    a, b = list(elems_a), list(elems_b)
    return all(x in b for x in a) and all(x in a for x in b)


@contextlib.contextmanager
def chdir(d: str):
    old = os.getcwd()
    os.chdir(d)
    try:
        yield
    finally:
        os.chdir(old)


def check_call_subprocess(argv, capture_stdout=False, capture_stderr=False):
    stdout = subprocess.PIPE if capture_stdout else None
    stderr = subprocess.STDOUT if capture_stderr and capture_stdout else subprocess.PIPE if capture_stderr else None
    proc = subprocess.Popen(argv, stdout=stdout, stderr=stderr)
    out, err = proc.communicate()
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, argv, out, err)
    return b"".join(s for s in (out, err) if s is not None)


def check_call_ray(args, capture_stdout=False, capture_stderr=False):
    """Runs the ``ray`` CLI (the harness puts oxray's, via a shim, first on PATH)."""
    check_call_subprocess(["ray"] + list(args), capture_stdout, capture_stderr)


def is_placement_group_removed(pg) -> bool:
    table = ray.util.placement_group_table(pg)
    return table.get("state") == "REMOVED"


def placement_group_assert_no_leak(pgs_created):
    """Removes ``pgs_created`` and waits until every resource they held is free again."""
    for pg in pgs_created:
        ray.util.remove_placement_group(pg)

    def all_removed():
        return all(entry["state"] == "REMOVED" for entry in ray.util.placement_group_table().values())

    wait_for_condition(all_removed)
    total = ray.cluster_resources()
    total.pop("memory")
    total.pop("object_store_memory")

    def recovered():
        for resource, value in ray.available_resources().items():
            if resource in total and total[resource] != value:
                return False
            if "_group_" in resource:
                return False
        return True

    wait_for_condition(recovered)


def kill_actor_and_wait_for_failure(actor, timeout=10, retry_interval_ms=100):
    """``ray.kill(actor)``, then waits (State API) until it is dead or has restarted."""
    from ray.util.state import get_actor

    actor_id = actor._actor_id.hex()
    restarts = get_actor(id=actor_id).num_restarts
    ray.kill(actor)
    start = time.time()
    while time.time() - start <= timeout:
        state = get_actor(id=actor_id)
        if state.state == "DEAD" or state.num_restarts > restarts:
            return
        time.sleep(retry_interval_ms / 1000.0)
    raise RuntimeError(f"It took too much time to kill an actor: {actor_id}")


def wait_for_num_actors(num_actors, state=None, timeout=10):
    """Waits (State API) until at least ``num_actors`` actors (in ``state``, a name) exist."""
    from ray.util.state import list_actors

    start = time.time()
    while time.time() - start < timeout:
        filters = [("state", "=", state)] if state else None
        if len(list_actors(filters=filters, limit=num_actors)) >= num_actors:
            return
        time.sleep(0.1)
    raise TimeoutError("Timed out while waiting for global state.")
