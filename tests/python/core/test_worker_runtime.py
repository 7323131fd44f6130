"""The worker process runtime: nested submissions leave a running task at once,
cancels are never lost, worker output survives any bytes, tasks see their job's
namespace, and remote tracebacks show only the user's frames."""

import os
import sys

import pytest

import oxray as ray
from oxray_testutil import printed_output, wait_until

TIMEOUT = 60


# ------------------------------------------------- nested submissions (item 12)


@ray.remote(max_retries=0)
def touch(path):
    with open(path, "w") as f:
        f.write(str(os.getpid()))
    return True


@ray.remote(max_retries=0)
def submits_then_waits_without_get(path):
    child = touch.remote(path)  # kept, never waited on with get/wait
    seen = wait_until("the child to run", lambda: os.path.exists(path), timeout=60)
    del child
    return seen


@ray.remote
class Coordinator:
    """Fans out fire-and-forget children and waits for their side effects."""

    def fan_out(self, directory, n):
        for i in range(n):
            touch.remote(os.path.join(directory, str(i)))  # ref dropped at once
        return wait_until(f"{n} children to run", lambda: len(os.listdir(directory)) >= n, timeout=60, interval=0.02)


def test_a_task_submitted_from_a_running_task_starts_while_its_parent_runs(fresh_cluster, tmp_path):
    fresh_cluster(num_cpus=2)
    # The parent holds one CPU and never blocks in get: the child must still be
    # dispatched to the other CPU while the parent waits for its file.
    assert ray.get(submits_then_waits_without_get.remote(str(tmp_path / "child")), timeout=TIMEOUT) is True


def test_a_coordinator_actor_fans_out_fire_and_forget_children(fresh_cluster, tmp_path):
    fresh_cluster(num_cpus=2)
    directory = tmp_path / "children"
    directory.mkdir()
    coordinator = Coordinator.remote()
    assert ray.get(coordinator.fan_out.remote(str(directory), 6), timeout=TIMEOUT) is True
    assert sorted(os.listdir(directory)) == [str(i) for i in range(6)]


# ----------------------------------------------------- sticky cancel (item 13)


def runs_until_cancelled_body(ran_marker=None):
    if ran_marker:
        open(ran_marker, "w").close()
    # Short sleeps: a non-forced cancel interrupts Python between bytecodes.
    wait_until("a cancel to interrupt the task", lambda: False, timeout=120, interval=0.02)


runs_until_cancelled = ray.remote(max_retries=0)(runs_until_cancelled_body)


class SlowToUnpickle:
    """An argument whose unpickling, in the worker, announces itself and then
    waits for a gate: a cancel sent meanwhile arrives outside user code."""

    def __init__(self, unpickling, gate):
        self.unpickling = unpickling
        self.gate = gate

    def __reduce__(self):
        return (_restore_slowly, (self.unpickling, self.gate))


def _restore_slowly(unpickling, gate):
    open(unpickling, "w").close()
    wait_until("the gate to open", lambda: os.path.exists(gate), timeout=60)
    return "restored"


@ray.remote(max_retries=0)
def takes_slow_argument(arg, ran_marker):
    return runs_until_cancelled_body(ran_marker)


def test_a_cancel_during_argument_unpickling_is_not_lost(fresh_cluster, tmp_path):
    fresh_cluster(num_cpus=1)
    for i in range(3):
        unpickling, gate, ran = (str(tmp_path / f"{name}{i}") for name in ("unpickling", "gate", "ran"))
        ref = takes_slow_argument.remote(SlowToUnpickle(unpickling, gate), ran)
        wait_until("the worker to start unpickling the argument", lambda p=unpickling: os.path.exists(p), timeout=60)
        ray.cancel(ref)
        open(gate, "w").close()
        with pytest.raises(ray.exceptions.TaskCancelledError):
            ray.get(ref, timeout=20)
        # The cancel stopped it before the function body ran.
        assert not os.path.exists(ran)
    # The worker and its CPU are free for the next task.
    assert ray.get(touch.remote(str(tmp_path / "after")), timeout=TIMEOUT) is True


# A package whose import waits on a gate after a submodule registered a name
# (as pandas registers its options): importing it twice in one process fails.
HALF_IMPORTED_PACKAGE = {
    "registry.py": """
NAMES = set()


def register(name):
    if name in NAMES:
        raise ValueError(f"{name} is already registered")
    NAMES.add(name)
""",
    "__init__.py": """
import os
import time

from . import registry

registry.register("option")
open(os.environ["IMPORTING"], "w").close()
while not os.path.exists(os.environ["GATE"]):
    time.sleep(0.01)
READY = True
""",
}


@ray.remote(max_retries=0)
def import_package(directory):
    sys.path.insert(0, directory)
    import halfpkg

    return halfpkg.READY


def test_a_cancel_during_an_import_leaves_the_worker_able_to_import_it_again(fresh_cluster, tmp_path, monkeypatch):
    package = tmp_path / "halfpkg"
    package.mkdir()
    for name, text in HALF_IMPORTED_PACKAGE.items():
        (package / name).write_text(text)
    importing, gate = tmp_path / "importing", tmp_path / "gate"
    monkeypatch.setenv("IMPORTING", str(importing))
    monkeypatch.setenv("GATE", str(gate))
    fresh_cluster(num_cpus=1)
    ref = import_package.remote(str(tmp_path))
    wait_until("the task to start importing", importing.exists, timeout=60)
    ray.cancel(ref)
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(ref, timeout=20)
    gate.touch()
    # The same (only) worker imports the package again from scratch.
    assert ray.get(import_package.remote(str(tmp_path)), timeout=TIMEOUT) is True


def test_a_cancel_the_instant_a_task_is_dispatched_is_not_lost(fresh_cluster, tmp_path):
    fresh_cluster(num_cpus=1)
    # Warm a worker, so the task is handed to it at once.
    assert ray.get(touch.remote(str(tmp_path / "warm")), timeout=TIMEOUT) is True
    for _ in range(40):
        ref = runs_until_cancelled.remote()
        ray.cancel(ref)
        with pytest.raises(ray.exceptions.TaskCancelledError):
            ray.get(ref, timeout=20)
    # No cancelled task kept the only CPU.
    assert ray.get(touch.remote(str(tmp_path / "after")), timeout=TIMEOUT) is True


def test_a_cancel_of_a_finished_task_does_not_hit_the_next_one(fresh_cluster, tmp_path):
    fresh_cluster(num_cpus=1)
    for i in range(20):
        done = touch.remote(str(tmp_path / f"first{i}"))
        # Race the cancel against the task's end; whichever wins, the next task
        # on the same worker runs to completion.
        ray.cancel(done)
        nxt = touch.remote(str(tmp_path / f"next{i}"))
        assert ray.get(nxt, timeout=TIMEOUT) is True


# ----------------------------------------------------------- output (item 6)


@ray.remote(max_retries=0)
def prints_bad_bytes_and_a_huge_line(marker):
    sys.stdout.buffer.write(b"invalid utf-8 \xff\xfe\x80 here\n")
    sys.stdout.flush()
    sys.stdout.write("y" * (10 * 1024 * 1024) + "\n")
    sys.stdout.flush()
    print(f"{marker}-same-task")
    return os.getpid()


@ray.remote(max_retries=0)
def prints_marker(marker):
    print(marker)
    return os.getpid()


def test_non_utf8_output_and_a_huge_line_do_not_break_the_worker(fresh_cluster):
    fresh_cluster(num_cpus=1)
    marker = f"oxray-after-bad-bytes-{os.getpid()}"
    with printed_output() as printed:
        pid = ray.get(prints_bad_bytes_and_a_huge_line.remote(marker), timeout=TIMEOUT)
        # The same worker keeps running tasks, and what it prints still arrives.
        assert ray.get(prints_marker.remote(f"{marker}-next-task"), timeout=TIMEOUT) == pid

        def both_lines():
            return f"{marker}-same-task" in printed.out and f"{marker}-next-task" in printed.out

        wait_until(
            lambda: f"the later output to reach the driver; it printed {printed.out[-2000:]!r}",
            both_lines,
            timeout=60,
            interval=0.1,
        )
    text = printed.out
    assert "invalid utf-8 \ufffd\ufffd\ufffd here" in text
    # The huge line is cut for the terminal, not forwarded whole.
    longest = max(len(line) for line in text.splitlines())
    assert longest < 1024 * 1024


# -------------------------------------------------------- namespace (item 16)


@ray.remote
class Named:
    def ping(self):
        return "pong"


@ray.remote
def look_up_named(name):
    handle = ray.get_actor(name)
    return ray.get_runtime_context().namespace, ray.get(handle.ping.remote())


@ray.remote
class LooksUp:
    def look_up(self, name):
        handle = ray.get_actor(name)
        return ray.get_runtime_context().namespace, ray.get(handle.ping.remote())


def test_get_actor_in_tasks_and_actors_uses_the_jobs_namespace(fresh_cluster):
    fresh_cluster(namespace="ns1")
    named = Named.options(name="oxray-ns-target").remote()
    assert ray.get(named.ping.remote(), timeout=TIMEOUT) == "pong"
    assert ray.get(look_up_named.remote("oxray-ns-target"), timeout=TIMEOUT) == ("ns1", "pong")
    looker = LooksUp.remote()
    assert ray.get(looker.look_up.remote("oxray-ns-target"), timeout=TIMEOUT) == ("ns1", "pong")
    # An actor registered under another namespace still runs in the job's namespace.
    elsewhere = LooksUp.options(namespace="other").remote()
    assert ray.get(elsewhere.look_up.remote("oxray-ns-target"), timeout=TIMEOUT) == ("ns1", "pong")


# ------------------------------------------------------- tracebacks (item 11)


@ray.remote(max_retries=0)
def user_function_that_raises(x):
    return user_helper_that_raises(x)


def user_helper_that_raises(x):
    raise ValueError(f"user failure {x}")


@ray.remote
class RaisesInMethod:
    def fail(self):
        raise KeyError("method failure")


def _frames(text):
    return [line.strip() for line in text.splitlines() if line.strip().startswith("File ")]


def test_remote_tracebacks_show_only_the_users_frames(ray_cluster):
    with pytest.raises(ValueError) as task_error:
        ray.get(user_function_that_raises.remote(7), timeout=TIMEOUT)
    with pytest.raises(KeyError) as method_error:
        ray.get(RaisesInMethod.remote().fail.remote(), timeout=TIMEOUT)
    for err, user_frames in (
        (task_error.value, ["user_function_that_raises", "user_helper_that_raises"]),
        (method_error.value, ["fail"]),
    ):
        text = str(err)
        frames = _frames(text)
        assert frames, text
        assert not any("oxray" + os.sep + "_private" in f for f in frames), text
        assert "worker_main" not in text
        assert [f.rsplit(" in ", 1)[1] for f in frames] == user_frames, text


def test_after_this_task_runs_once_the_task_is_done_before_the_next_call(ray_cluster):
    """`after_this_task` (how Data hands Arrow's cached memory back after a shuffle task): the
    call runs once per task, after its results are stored and before the worker's next call."""

    @ray.remote
    class Counter:
        def __init__(self):
            self.after = 0

        def ask_twice(self):
            from oxray._private.state import after_this_task

            after_this_task(self.bump)
            after_this_task(self.bump)  # the same call asked again: still once
            return self.after

        def bump(self):
            self.after += 1

        def count(self):
            return self.after

    counter = Counter.remote()
    assert ray.get(counter.ask_twice.remote()) == 0, "it runs after the task, not during it"
    assert ray.get(counter.count.remote()) == 1
