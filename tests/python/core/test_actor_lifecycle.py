"""An actor's life as Ray's tests drive it: `__ray_ready__`, `__ray_terminate__`,
`ray.actor.exit_actor()`, `__ray_shutdown__` and atexit handlers, `__ray_call__`,
and async actors (`async def` methods on the actor's event loop)."""

import asyncio
import os

import pytest

import oxray as ray
from oxray.exceptions import RayActorError
from oxray_testutil import pid_alive, wait_until


@ray.remote
class Journal:
    """Writes what happens to it into `path`, one line per event."""

    def __init__(self, path):
        import atexit

        self.path = path
        atexit.register(self.note, "atexit")

    def note(self, line):
        with open(self.path, "a") as f:
            f.write(line + "\n")
        return line

    def leave(self):
        ray.actor.exit_actor()

    def pid(self):
        return os.getpid()

    def __ray_shutdown__(self):
        self.note("shutdown")


def lines(path):
    with open(path) as f:
        return f.read().split()


def test_ready_resolves_once_the_actor_is_up(ray_cluster):
    a = Journal.remote("/dev/null")
    assert ray.get(a.__ray_ready__.remote()) is True


def test_terminate_runs_queued_calls_then_shutdown_and_atexit(ray_cluster, tmp_path):
    path = str(tmp_path / "journal")
    a = Journal.remote(path)
    before = [a.note.remote(f"call{i}") for i in range(3)]
    done = a.__ray_terminate__.remote()
    assert ray.get(before) == ["call0", "call1", "call2"]
    with pytest.raises(RayActorError, match="__ray_terminate__"):
        ray.get(done)
    with pytest.raises(RayActorError):
        ray.get(a.note.remote("after"))
    assert lines(path) == ["call0", "call1", "call2", "shutdown", "atexit"]


def test_exit_actor_ends_it_for_good_despite_restarts(ray_cluster, tmp_path):
    path = str(tmp_path / "journal")
    a = Journal.options(max_restarts=3).remote(path)
    ray.get(a.pid.remote())
    with pytest.raises(RayActorError, match="exit_actor"):
        ray.get(a.leave.remote())
    # Not restarted: every later call fails at once.
    with pytest.raises(RayActorError, match="exit_actor"):
        ray.get(a.pid.remote())
    assert lines(path) == ["shutdown", "atexit"]


def test_kill_skips_shutdown_and_atexit(ray_cluster, tmp_path):
    path = str(tmp_path / "journal")
    a = Journal.remote(path)
    ray.get(a.note.remote("alive"))
    ray.kill(a)
    with pytest.raises(RayActorError):
        ray.get(a.note.remote("after"))
    assert lines(path) == ["alive"]


@ray.remote
class AsyncLeaver:
    async def leave(self):
        ray.actor.exit_actor()

    async def ping(self):
        return "pong"


@pytest.mark.parametrize("concurrency", [None, 4], ids=["async", "threaded-async"])
def test_exit_actor_in_an_async_actor_ends_it_on_purpose(ray_cluster, concurrency):
    # The exit is asked for from a thread that is not the worker's main one: the agent must still
    # learn it was on purpose before the process goes.
    actor = AsyncLeaver.options(max_restarts=2, max_concurrency=concurrency).remote()
    assert ray.get(actor.ping.remote()) == "pong"
    with pytest.raises(RayActorError, match="exit_actor"):
        ray.get(actor.leave.remote())
    with pytest.raises(RayActorError, match="exit_actor"):
        ray.get(actor.ping.remote())


@ray.remote
class AsyncJournal:
    """Ray's cases of an async actor ending itself: a call that catches what `exit_actor()`
    raises, and a background task (started by `__init__`, on the event loop) that calls it."""

    def __init__(self, path, leave_from_init=False):
        import atexit

        self.path = path
        atexit.register(self.note, "atexit")
        self.gate = asyncio.Event()
        if leave_from_init:
            asyncio.create_task(self.leave_later())

    def note(self, line):
        with open(self.path, "a") as f:
            f.write(line + "\n")
        return line

    async def leave_but_catch(self):
        try:
            ray.actor.exit_actor()
        except ray.exceptions.AsyncioActorExit:
            return "caught"

    async def start_leaving(self):
        asyncio.create_task(self.leave_later())

    async def leave_later(self):
        await self.gate.wait()
        ray.actor.exit_actor()
        self.note("after exit_actor")  # never runs

    async def open_gate(self):
        self.gate.set()


def test_an_async_actor_that_catches_its_exit_still_ends(ray_cluster, tmp_path):
    path = str(tmp_path / "journal")
    actor = AsyncJournal.remote(path)
    ray.get(actor.__ray_ready__.remote())
    with pytest.raises(RayActorError, match="exit_actor"):
        ray.get(actor.leave_but_catch.remote())
    with pytest.raises(RayActorError):
        ray.get(actor.note.remote("after"))
    assert lines(path) == ["atexit"]


@pytest.mark.parametrize("from_init", [False, True], ids=["from-a-call", "from-init"])
def test_exit_actor_from_a_background_task_ends_the_async_actor(ray_cluster, tmp_path, from_init):
    path = str(tmp_path / "journal")
    actor = AsyncJournal.options(max_restarts=2).remote(path, leave_from_init=from_init)
    ray.get(actor.__ray_ready__.remote())
    if not from_init:
        ray.get(actor.start_leaving.remote())
    # The background task's exit_actor() runs outside any call: the actor still ends, for good.
    actor.open_gate.remote()
    wait_until(
        "the actor's atexit handler to run", lambda: os.path.exists(path) and "atexit" in lines(path), timeout=60
    )
    with pytest.raises(RayActorError, match="exit_actor"):
        ray.get(actor.note.remote("after"), timeout=30)
    assert lines(path) == ["atexit"]


def test_exit_actor_outside_an_actor_is_a_type_error(ray_cluster):
    with pytest.raises(TypeError, match="exit_actor API is called on a non-actor worker"):
        ray.actor.exit_actor()

    @ray.remote
    def task():
        try:
            ray.actor.exit_actor()
        except TypeError as e:
            return str(e)

    assert "non-actor worker" in ray.get(task.remote())


def test_ray_call_runs_a_function_on_the_actor(ray_cluster):
    a = Journal.remote("/dev/null")
    assert ray.get(a.__ray_call__.remote(lambda self, x: (self.path, x), 5)) == ("/dev/null", 5)


@ray.remote
class AsyncGate:
    def __init__(self):
        self.opened = asyncio.Event()
        self.inflight = 0
        self.peak = 0
        self.started = asyncio.Event()
        self.full = asyncio.Event()

    async def wait(self):
        self.started.set()
        await self.opened.wait()
        return ray.get_runtime_context().get_task_id()

    async def open(self):
        self.opened.set()

    async def until_started(self):
        await self.started.wait()

    async def held(self, together):
        # The first calls return only once `together` of them run at the same time.
        self.inflight += 1
        self.peak = max(self.peak, self.inflight)
        if self.inflight >= together:
            self.full.set()
        await self.full.wait()
        self.inflight -= 1
        return self.peak

    async def await_ref(self, refs):
        return await refs[0]

    def sync_method(self):
        return "sync"


def test_async_methods_run_concurrently_on_the_event_loop(ray_cluster):
    gate = AsyncGate.remote()
    waiting = [gate.wait.remote() for _ in range(5)]
    ray.get(gate.until_started.remote())
    # The waits are all parked on the loop; one more call still gets through and opens them.
    ray.get(gate.open.remote())
    task_ids = ray.get(waiting)
    # Each call saw its own task id, though all ran on one thread.
    assert task_ids == [ref.task_id().hex() for ref in waiting]
    assert ray.get(gate.sync_method.remote()) == "sync"


def test_max_concurrency_caps_an_async_actor(ray_cluster):
    gate = AsyncGate.options(max_concurrency=2).remote()
    peaks = ray.get([gate.held.remote(2) for _ in range(6)])
    assert max(peaks) == 2


def test_an_async_actor_awaits_object_refs(ray_cluster):
    gate = AsyncGate.remote()
    assert ray.get(gate.await_ref.remote([ray.put("value")])) == "value"


@ray.remote
def takes_all_cpus():
    return "ran"


@ray.remote
def hand_back(handle):
    return handle


@ray.remote(num_cpus=0, max_concurrency=2)
class Gate:
    def __init__(self):
        import threading

        self.event = threading.Event()

    def wait(self):
        return self.event.wait(120)

    def open(self):
        self.event.set()


def test_an_actor_whose_handle_is_gone_is_reclaimed_after_its_calls(ray_cluster, tmp_path):
    path = str(tmp_path / "journal")
    a = Journal.options(num_cpus=2).remote(path)
    last = a.note.remote("last call")
    del a
    assert ray.get(last) == "last call"
    # The actor held every CPU: this task runs only once it is gone.
    assert ray.get(takes_all_cpus.options(num_cpus=2).remote()) == "ran"
    assert lines(path) == ["last", "call", "shutdown", "atexit"]


def test_a_copy_of_the_handle_keeps_the_actor_until_it_is_gone_too(ray_cluster, tmp_path):
    path = str(tmp_path / "journal")
    a = Journal.remote(path)
    pid = ray.get(a.pid.remote())
    copy = ray.get(hand_back.remote(a))  # the handle went through a task and came back
    del a
    assert ray.get(copy.note.remote("still here")) == "still here"
    assert pid_alive(pid)
    del copy  # the last strong handle
    wait_until("the actor's process to exit", lambda: not pid_alive(pid), timeout=60)
    assert lines(path)[-2:] == ["shutdown", "atexit"]


@ray.remote
def call_later(handle, gate):
    ray.get(gate[0])  # in a list: the task starts at once and waits here
    return ray.get(handle.note.remote("from the task"))


@ray.remote
class SelfHolder:
    def keep_self(self, self_handle):
        # Its own handle (weak) and a strong copy passed in: neither may keep it alive after.
        self.weak = ray.get_runtime_context().current_actor
        return "kept"

    def pid(self):
        return os.getpid()


def test_a_handle_passed_to_a_waiting_task_keeps_the_actor_until_the_task_ends(ray_cluster, tmp_path):
    path = str(tmp_path / "journal")
    a = Journal.remote(path)
    pid = ray.get(a.pid.remote())
    gate = Gate.remote()
    result = call_later.remote(a, [gate.wait.remote()])
    del a
    assert pid_alive(pid)
    ray.get(gate.open.remote())
    assert ray.get(result) == "from the task"
    wait_until("the actor's process to exit", lambda: not pid_alive(pid), timeout=60)


def test_an_actors_own_handle_does_not_keep_it_alive(ray_cluster):
    holder = SelfHolder.remote()
    pid = ray.get(holder.pid.remote())
    for _ in range(3):
        assert ray.get(holder.keep_self.remote(holder)) == "kept"
    del holder
    wait_until("the actor's process to exit", lambda: not pid_alive(pid), timeout=60)


def test_a_name_does_not_keep_an_actor_alive(ray_cluster, tmp_path):
    # As in Ray, handles from get_actor are weak: the creator's handle going away ends a named,
    # non-detached actor; a detached one stays.
    named = Journal.options(name="weak-by-name").remote(str(tmp_path / "named"))
    assert ray.get(ray.get_actor("weak-by-name").note.remote("by name")) == "by name"
    del named

    def gone():
        try:
            ray.get_actor("weak-by-name")
        except ValueError:
            return True
        return False

    wait_until("the actor to be gone", gone, timeout=60)
    kept = Journal.options(name="kept-detached", lifetime="detached").remote(str(tmp_path / "detached"))
    del kept
    assert ray.get(ray.get_actor("kept-detached").note.remote("still here")) == "still here"
    ray.kill(ray.get_actor("kept-detached"))
