"""Cancelling actor calls, as Ray does: an async call gets `asyncio.CancelledError` where
it awaits, a call not started never runs, a running sync call can poll `is_canceled()`,
and `force=True` is refused. A running task that handles its interrupt returns its value."""

import asyncio

import pytest

import oxray as ray
from oxray_testutil import wait_until


@ray.remote
class Gate:
    def __init__(self):
        self.event = asyncio.Event()
        self.waiters = 0

    async def wait(self):
        self.waiters += 1
        await self.event.wait()

    async def open(self):
        self.event.set()

    async def count(self):
        return self.waiters


@ray.remote
class Sleeper:
    def __init__(self):
        self.cancelled = False
        self.ran = []

    async def sleep(self, gate):
        try:
            await gate.wait.remote()
        except asyncio.CancelledError:
            self.cancelled = True  # the call's own handler runs before it ends
            raise
        return "woke"

    async def mark(self, i):
        self.ran.append(i)

    async def state(self):
        return self.cancelled, self.ran


def _wait_for_waiters(gate, n):
    wait_until(f"{n} calls to wait on the gate", lambda: ray.get(gate.count.remote()) >= n, timeout=60)


def test_cancelling_an_async_call_raises_cancelled_error_in_it(ray_cluster):
    gate = Gate.remote()
    sleeper = Sleeper.remote()
    ref = sleeper.sleep.remote(gate)
    _wait_for_waiters(gate, 1)
    ray.cancel(ref)
    with pytest.raises(ray.exceptions.TaskCancelledError, match=ref.task_id().hex()):
        ray.get(ref, timeout=60)
    assert ray.get(sleeper.state.remote())[0] is True


def test_a_call_cancelled_before_it_starts_never_runs(ray_cluster):
    gate = Gate.remote()
    sleeper = Sleeper.options(max_concurrency=1).remote()
    blocker = sleeper.sleep.remote(gate)
    _wait_for_waiters(gate, 1)
    queued = [sleeper.mark.remote(i) for i in range(5)]
    for ref in queued:
        ray.cancel(ref)
    gate.open.remote()
    assert ray.get(blocker, timeout=60) == "woke"
    for ref in queued:
        with pytest.raises(ray.exceptions.TaskCancelledError):
            ray.get(ref, timeout=60)
    assert ray.get(sleeper.state.remote())[1] == []


@ray.remote
class Poller:
    def check(self, gate):
        ray.get(gate.wait.remote())
        return ray.get_runtime_context().is_canceled()


def test_a_running_sync_call_sees_is_canceled_and_fails_as_cancelled(ray_cluster):
    gate = Gate.remote()
    poller = Poller.remote()
    ref = poller.check.remote(gate)
    _wait_for_waiters(gate, 1)
    ray.cancel(ref, recursive=False)
    gate.open.remote()
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(ref, timeout=60)


def test_is_canceled_is_refused_in_an_async_actor(ray_cluster):
    @ray.remote
    class AsyncActor:
        async def check(self):
            return ray.get_runtime_context().is_canceled()

    with pytest.raises(RuntimeError, match="not supported in an async actor"):
        ray.get(AsyncActor.remote().check.remote())


def test_force_cancel_of_an_actor_call_is_a_value_error(ray_cluster):
    sleeper = Sleeper.remote()
    ref = sleeper.mark.remote(0)
    with pytest.raises(ValueError, match="force=True is not supported for actor tasks"):
        ray.cancel(ref, force=True)
    ray.get(ref)


@ray.remote
def handles_interrupt(gate):
    try:
        ray.get(gate.wait.remote())
    except KeyboardInterrupt:
        return "handled" if ray.get_runtime_context().is_canceled() else "not cancelled?"
    return "completed"


def test_a_task_that_handles_its_cancel_returns_its_value(ray_cluster):
    gate = Gate.remote()
    ref = handles_interrupt.remote(gate)
    _wait_for_waiters(gate, 1)
    ray.cancel(ref)
    assert ray.get(ref, timeout=60) == "handled"


@ray.remote
def waits(gate):
    ray.get(gate.wait.remote())


def test_an_interrupted_task_fails_with_ray_task_error_of_task_cancelled(ray_cluster):
    gate = Gate.remote()
    ref = waits.remote(gate)
    _wait_for_waiters(gate, 1)
    ray.cancel(ref)
    with pytest.raises(ray.exceptions.RayTaskError, match="TaskCancelledError") as info:
        ray.get(ref, timeout=60)
    assert isinstance(info.value, ray.exceptions.TaskCancelledError)
