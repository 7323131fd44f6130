"""Failures: worker crashes and retries, actor restarts, bad arguments and
options, and cleanup of processes and shared memory on shutdown/driver exit."""

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

import oxray as ray
from oxray_testutil import (
    live_children,
    oxray_shm_entries,
    pid_alive,
    session_shm_entries,
    wait_until,
)

TIMEOUT = 60


@ray.remote
def crash_once(pid_file, marker):
    """First run: record the pid and block (the test SIGKILLs it).
    A retry sees the marker and returns normally."""
    if os.path.exists(marker):
        return "recovered", os.getpid()
    open(marker, "w").close()
    with open(pid_file + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(pid_file + ".tmp", pid_file)
    never = pid_file + ".never"
    wait_until("the test to kill this task", lambda: os.path.exists(never), timeout=60)
    return "not killed", os.getpid()


@ray.remote
class Survivor:
    def __init__(self):
        self.calls = 0
        self.created_pid = os.getpid()

    def bump(self):
        self.calls += 1
        return self.calls, os.getpid()


@ray.remote
def getpid():
    return os.getpid()


@ray.remote
def identity(x):
    return x


@ray.remote
class PidActor:
    def pid(self):
        return os.getpid()

    def echo(self, x):
        return x


def _read_pid(path):
    wait_until("the task to start", lambda: os.path.exists(path), timeout=60)
    with open(path) as f:
        return int(f.read())


def _kill_and_wait(pid):
    os.kill(pid, signal.SIGKILL)
    wait_until(f"pid {pid} to die", lambda: not pid_alive(pid), timeout=30)


def test_killed_worker_task_is_retried(ray_cluster, tmp_path):
    pid_file, marker = str(tmp_path / "pid"), str(tmp_path / "marker")
    ref = crash_once.options(max_retries=1).remote(pid_file, marker)
    first_pid = _read_pid(pid_file)
    assert first_pid != os.getpid()
    _kill_and_wait(first_pid)
    status, retry_pid = ray.get(ref, timeout=TIMEOUT)
    assert status == "recovered"
    assert retry_pid != first_pid


def test_killed_worker_without_retries_raises_worker_crashed(ray_cluster, tmp_path):
    pid_file, marker = str(tmp_path / "pid"), str(tmp_path / "marker")
    ref = crash_once.options(max_retries=0).remote(pid_file, marker)
    _kill_and_wait(_read_pid(pid_file))
    with pytest.raises(ray.exceptions.WorkerCrashedError):
        ray.get(ref, timeout=TIMEOUT)
    assert issubclass(ray.exceptions.WorkerCrashedError, ray.exceptions.RayError)
    # The cluster replaces the worker and keeps running tasks.
    assert ray.get(identity.remote(5), timeout=TIMEOUT) == 5


def test_actor_restarts_once_then_dies(ray_cluster):
    actor = Survivor.options(max_restarts=1).remote()
    assert ray.get(actor.bump.remote(), timeout=TIMEOUT)[0] == 1
    calls, pid1 = ray.get(actor.bump.remote(), timeout=TIMEOUT)
    assert calls == 2
    _kill_and_wait(pid1)

    # While restarting, calls may fail with an actor error; once restarted the
    # constructor has run again in a new process, so the state starts over.
    def call_after_restart():
        try:
            return ray.get(actor.bump.remote(), timeout=TIMEOUT)
        except ray.exceptions.RayActorError:
            return None

    calls, pid2 = wait_until(
        "the actor to come back after its first crash", call_after_restart, timeout=60, interval=0.2
    )
    assert pid2 != pid1
    assert calls == 1, "state must be reset: the constructor runs again on restart"

    _kill_and_wait(pid2)

    # No restarts left: calls fail with ActorDiedError (never succeed).
    def call_until_dead():
        try:
            value = ray.get(actor.bump.remote(), timeout=TIMEOUT)
        except ray.exceptions.ActorDiedError:
            return True
        except ray.exceptions.RayActorError:
            return False
        raise AssertionError(f"call on a dead actor succeeded: {value!r}")

    wait_until("calls to fail with ActorDiedError", call_until_dead, timeout=60, interval=0.2)
    with pytest.raises(ray.exceptions.ActorDiedError):
        ray.get(actor.bump.remote(), timeout=TIMEOUT)


def test_unpicklable_argument_raises_at_call_site(ray_cluster):
    lock = threading.Lock()
    with pytest.raises((TypeError, ray.exceptions.RayError)) as ei:
        identity.remote(lock)
    text = str(ei.value).lower()
    assert "lock" in text, text
    assert "pickl" in text or "serializ" in text, text
    # Nested inside a container, and as an actor method argument.
    with pytest.raises((TypeError, ray.exceptions.RayError)) as ei:
        identity.remote([1, {"k": lock}])
    assert "lock" in str(ei.value).lower()
    actor = PidActor.remote()
    with pytest.raises((TypeError, ray.exceptions.RayError)) as ei:
        actor.echo.remote(lock)
    assert "lock" in str(ei.value).lower()
    # Nothing was broken by the failed submissions.
    assert ray.get(actor.echo.remote("ok"), timeout=TIMEOUT) == "ok"


def test_invalid_option_name(ray_cluster):
    with pytest.raises(ValueError) as ei:
        identity.options(num_cpu=1).remote(1)
    assert re.search(r"\bnum_cpu\b", str(ei.value)), str(ei.value)
    with pytest.raises(ValueError) as ei:
        PidActor.options(num_cpu=1).remote()
    assert re.search(r"\bnum_cpu\b", str(ei.value)), str(ei.value)


def test_invalid_option_type(ray_cluster):
    with pytest.raises((TypeError, ValueError)) as ei:
        identity.options(num_cpus="two").remote(1)
    assert "num_cpus" in str(ei.value)
    with pytest.raises((TypeError, ValueError)) as ei:
        identity.options(resources="custom_a").remote(1)
    assert "resources" in str(ei.value)


def test_negative_resources(ray_cluster):
    with pytest.raises(ValueError) as ei:
        identity.options(num_cpus=-1).remote(1)
    # Ray: "The quantity of resource num_cpus cannot be negative".
    text = str(ei.value)
    assert "num_cpus" in text and ("-1" in text or "negative" in text), text
    with pytest.raises(ValueError) as ei:
        identity.options(num_gpus=-2).remote(1)
    text = str(ei.value)
    assert "num_gpus" in text and ("-2" in text or "negative" in text), text
    with pytest.raises(ValueError) as ei:
        identity.options(resources={"custom_a": -1}).remote(1)
    text = str(ei.value)
    assert "custom_a" in text and ("-1" in text or "negative" in text), text


def test_invalid_decorator_option(ray_cluster):
    with pytest.raises((ValueError, TypeError)) as ei:

        @ray.remote(foo=1)
        def f():
            return 1

    assert re.search(r"\bfoo\b", str(ei.value)), str(ei.value)


def test_get_on_non_ref(ray_cluster):
    with pytest.raises((TypeError, ValueError)) as ei:
        ray.get(42)
    assert "ObjectRef" in str(ei.value)
    with pytest.raises((TypeError, ValueError)) as ei:
        ray.get([ray.put(1), "not a ref"])
    assert "ObjectRef" in str(ei.value)


def test_shutdown_leaves_no_processes_or_shared_memory(fresh_cluster):
    np = pytest.importorskip("numpy")
    children_before = live_children()
    fresh_cluster(num_cpus=2)
    pids = set(ray.get([getpid.remote() for _ in range(4)], timeout=TIMEOUT))
    actor = PidActor.remote()
    pids.add(ray.get(actor.pid.remote(), timeout=TIMEOUT))
    assert pids and os.getpid() not in pids
    assert all(pid_alive(p) for p in pids)
    big = ray.put(np.ones(4 * 1024**2))  # a 32 MiB shared-memory object
    view = ray.get(big, timeout=TIMEOUT)
    assert view.sum() == 4 * 1024**2
    # This cluster's /dev/shm/oxray* entries: those its processes use.  (Other
    # oxray clusters may be running on the same machine; they are left out.)
    ours = session_shm_entries(extra_pids=pids)
    del view, big
    ray.shutdown()
    wait_until(
        lambda: f"the workers to exit (alive: {[p for p in pids if pid_alive(p)]})",
        lambda: not any(pid_alive(p) for p in pids),
        timeout=30,
    )
    # Nor any helper process the driver started for the cluster (agents, stores).
    wait_until(
        lambda: f"the cluster's helper processes to exit (alive: {sorted(live_children() - children_before)})",
        lambda: not (live_children() - children_before),
        timeout=30,
    )
    wait_until(
        lambda: f"the cluster's /dev/shm entries to go (left: {sorted(ours & oxray_shm_entries())})",
        lambda: not (ours & oxray_shm_entries()),
        timeout=30,
    )


DRIVER_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    import oxray as ray

    # address="local": always a new cluster of its own, never the test's.
    ray.init(address="local", num_cpus=2)

    @ray.remote
    def getpid():
        return os.getpid()

    @ray.remote
    class A:
        def pid(self):
            return os.getpid()

    a = A.remote()
    pids = set(ray.get([getpid.remote() for _ in range(4)], timeout=60))
    pids.add(ray.get(a.pid.remote(), timeout=60))
    print("WORKER_PIDS=" + ",".join(str(p) for p in sorted(pids)), flush=True)
    if sys.argv[1] == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    # "exit": fall off the end without ray.shutdown()
    """
)


@pytest.mark.parametrize("how", ["exit", "sigkill"])
def test_driver_exit_without_shutdown_leaves_no_workers(tmp_path, how):
    script = tmp_path / "driver.py"
    script.write_text(DRIVER_SCRIPT)
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run(
        [sys.executable, str(script), how],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=str(tmp_path),
    )
    match = re.search(r"^WORKER_PIDS=([\d,]+)$", proc.stdout, re.M)
    assert match, f"driver failed (rc={proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    pids = [int(p) for p in match.group(1).split(",")]
    assert pids
    wait_until(
        lambda: f"the workers to exit (alive: {[p for p in pids if pid_alive(p)]})",
        lambda: not any(pid_alive(p) for p in pids),
        timeout=30,
    )


@ray.remote
def first_element(arr):
    return float(arr[0])


def test_large_arguments_in_a_submission_loop_all_arrive(ray_cluster):
    """Large arguments are put in the store and their refs dropped at once: their
    frees must never overtake the queued tasks that use them."""
    np = pytest.importorskip("numpy")
    refs = [first_element.remote(np.full(200_000, float(i))) for i in range(40)]
    assert ray.get(refs, timeout=60) == [float(i) for i in range(40)]


@ray.remote(max_restarts=1)
class KeepsBigArg:
    def __init__(self, arr):
        self.total = float(arr.sum())

    def state(self):
        return os.getpid(), self.total


def test_restarted_actor_gets_its_large_constructor_argument_again(ray_cluster):
    np = pytest.importorskip("numpy")
    actor = KeepsBigArg.remote(np.ones(300_000))
    pid, total = ray.get(actor.state.remote(), timeout=60)
    assert total == 300_000.0
    os.kill(pid, signal.SIGKILL)
    new_pid, total = wait_until("the actor to restart", lambda: _try_state(actor), timeout=60)
    assert new_pid != pid and total == 300_000.0


def _try_state(actor):
    try:
        return ray.get(actor.state.remote(), timeout=30)
    except ray.exceptions.RayActorError:
        return None


# ---- owner death: a worker that created actors or submitted tasks dies ----


@ray.remote(num_cpus=0, max_retries=0)
def blocks_until(path, pid_file):
    """Records its pid, then waits for `path` (the owner-death tests never create it)."""
    with open(pid_file + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(pid_file + ".tmp", pid_file)
    wait_until(f"{path} to appear", lambda: os.path.exists(path), timeout=120)
    return 1


@ray.remote(num_cpus=0)
class HoldsDependency:
    def __init__(self, dependency):
        self.dependency = dependency

    def value(self):
        return self.dependency


@ray.remote(num_cpus=0)
class OwnerWorker:
    def pid(self):
        return os.getpid()

    def make_actor_on_pending_dependency(self, caller, never, pid_file):
        """Creates an actor whose constructor argument never becomes ready,
        hands it to `caller`, and dies once the caller has started."""
        actor = HoldsDependency.remote(blocks_until.remote(never, pid_file))
        call = caller.call.remote(os.getpid(), actor)
        ray.wait([call], timeout=0)  # sends the queued call now
        started = pid_file + ".caller"
        wait_until("the caller to start", lambda: os.path.exists(started), timeout=60)
        os._exit(0)

    def submit_pending(self, never, pid_file):
        return [blocks_until.remote(never, pid_file)]

    def die(self):
        os._exit(0)


@ray.remote(num_cpus=0)
class CallsAfterOwnerDies:
    def __init__(self, started_file):
        self.started_file = started_file
        self.outcome = None

    def call(self, owner_pid, actor):
        open(self.started_file, "w").close()
        wait_until("the owner to die", lambda: not pid_alive(owner_pid), timeout=60)
        try:
            self.outcome = ("value", ray.get(actor.value.remote(), timeout=60))
        except Exception as e:  # noqa: BLE001 - the test checks which one
            self.outcome = (type(e).__name__, str(e))

    def result(self):
        return self.outcome


def test_actor_whose_owner_dies_before_its_dependency_is_ready_dies_too(ray_cluster, tmp_path):
    # Ray's test_actor_owner_worker_dies_before_dependency_ready: the actor
    # shares its owner's fate, so a call raises ActorDiedError instead of hanging.
    owner = OwnerWorker.remote()
    owner_pid = ray.get(owner.pid.remote(), timeout=TIMEOUT)
    pid_file = str(tmp_path / "pending.pid")
    caller = CallsAfterOwnerDies.remote(pid_file + ".caller")
    owner.make_actor_on_pending_dependency.remote(caller, str(tmp_path / "never"), pid_file)
    wait_until("the owner to die", lambda: not pid_alive(owner_pid), timeout=60)
    outcome = wait_until("the caller's outcome", lambda: ray.get(caller.result.remote(), timeout=TIMEOUT), timeout=90)
    assert outcome[0] == "ActorDiedError" and "owner" in outcome[1], outcome
    # The task the dead owner left running is stopped too.
    wait_until("the pending task to start", lambda: os.path.exists(pid_file), timeout=60)
    pending_pid = int(open(pid_file).read())
    wait_until("the dead owner's task to stop", lambda: not pid_alive(pending_pid), timeout=60)


def test_object_whose_owner_died_before_it_was_made_raises_owner_died(ray_cluster, tmp_path):
    owner = OwnerWorker.remote()
    owner_pid = ray.get(owner.pid.remote(), timeout=TIMEOUT)
    pid_file = str(tmp_path / "pending.pid")
    [pending] = ray.get(owner.submit_pending.remote(str(tmp_path / "never"), pid_file), timeout=TIMEOUT)
    wait_until("the pending task to start", lambda: os.path.exists(pid_file), timeout=60)
    owner.die.remote()
    wait_until("the owner to die", lambda: not pid_alive(owner_pid), timeout=60)
    with pytest.raises(ray.exceptions.OwnerDiedError, match="owner"):
        ray.get(pending, timeout=30)
    # An actor call that depends on it fails with it as well, promptly.
    with pytest.raises(ray.exceptions.OwnerDiedError):
        ray.get(Echo.remote().echo.remote(pending), timeout=30)
    pending_pid = int(open(pid_file).read())
    wait_until("the dead owner's task to stop", lambda: not pid_alive(pending_pid), timeout=60)


@ray.remote(num_cpus=0)
class Echo:
    def echo(self, x):
        return x


@ray.remote
class ExitsOnce:
    """`sys.exit()` in a method ends the actor's process, as in Ray: the actor restarts
    (max_restarts) and the call is retried (max_task_retries)."""

    def __init__(self, marker):
        self.marker = marker

    def call(self):
        if not os.path.exists(self.marker):
            open(self.marker, "w").close()
            sys.exit(1)
        return os.getpid()


def test_sys_exit_in_an_actor_method_ends_its_process(ray_cluster, tmp_path):
    marker = str(tmp_path / "exited")
    actor = ExitsOnce.options(max_restarts=1, max_task_retries=1).remote(marker)
    pid = ray.get(actor.call.remote(), timeout=TIMEOUT)  # exited once, restarted, retried
    assert os.path.exists(marker) and pid != os.getpid()
    doomed = ExitsOnce.remote(str(tmp_path / "exits-for-good"))
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(doomed.call.remote(), timeout=TIMEOUT)


@ray.remote(max_retries=1)
def exits_once(marker):
    if not os.path.exists(marker):
        open(marker, "w").close()
        sys.exit(3)
    return "retried"


def test_sys_exit_in_a_task_is_a_worker_failure_and_retried(ray_cluster, tmp_path):
    assert ray.get(exits_once.remote(str(tmp_path / "task-exited")), timeout=TIMEOUT) == "retried"
    with pytest.raises(ray.exceptions.WorkerCrashedError):
        ray.get(exits_once.options(max_retries=0).remote(str(tmp_path / "no-retry")), timeout=TIMEOUT)


@ray.remote
class NeverOpens:
    def wait(self):
        threading.Event().wait()


@ray.remote(max_retries=0)
def fails_now():
    raise ValueError("failed first")


def test_get_raises_a_failure_without_waiting_for_the_rest(ray_cluster):
    # As in Ray: one failed object ends the get, though another will never be ready.
    gate = NeverOpens.remote()
    never = gate.wait.remote()
    with pytest.raises(ValueError, match="failed first"):
        ray.get([never, fails_now.remote()], timeout=120)
    assert ray.get([ray.put(1), ray.put(2)]) == [1, 2]
    with pytest.raises(ray.exceptions.GetTimeoutError):
        ray.get([never, ray.put(3)], timeout=0.5)
    ray.kill(gate)
