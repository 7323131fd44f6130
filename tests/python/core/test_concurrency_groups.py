"""Ray's concurrency groups: `@remote(concurrency_groups={...})` on an actor,
`@method(concurrency_group=...)` on its methods or `.options(concurrency_group=...)`
on a call. Each group runs up to its size of calls at once, apart from the others."""

import threading

import pytest

import oxray as ray


@ray.remote(concurrency_groups={"io": 2, "compute": 1})
class Service:
    def __init__(self):
        self.io_barrier = threading.Barrier(2, timeout=60)
        self.gate = threading.Event()

    @ray.method(concurrency_group="io")
    def io_pair(self):
        # Returns only once two io calls run at the same time.
        self.io_barrier.wait()
        return threading.current_thread().name

    @ray.method(concurrency_group="io")
    def io_blocked(self):
        return self.gate.wait(timeout=60)

    def open_gate(self):
        self.gate.set()
        return "default group"

    def thread(self):
        return threading.current_thread().name


def test_a_group_runs_its_calls_at_once_and_apart_from_the_default_group(ray_cluster):
    service = Service.remote()
    names = ray.get([service.io_pair.remote(), service.io_pair.remote()], timeout=60)
    assert all(n.startswith("oxray-group-io") for n in names)
    # Both io threads wait on the gate; the default group still runs, and opens it.
    blocked = [service.io_blocked.remote(), service.io_blocked.remote()]
    assert ray.get(service.open_gate.remote(), timeout=60) == "default group"
    assert ray.get(blocked, timeout=60) == [True, True]
    # A call can pick its group.
    assert ray.get(service.thread.options(concurrency_group="compute").remote()).startswith("oxray-group-compute")


def test_an_unknown_group_fails_the_call_and_bad_groups_are_refused(ray_cluster):
    service = Service.remote()
    with pytest.raises(ValueError, match="concurrency group 'nope'"):
        ray.get(service.thread.options(concurrency_group="nope").remote(), timeout=60)
    assert ray.get(service.thread.remote(), timeout=60)  # the actor carries on
    with pytest.raises(ValueError, match="concurrency_groups\\['io'\\]"):
        Service.options(concurrency_groups={"io": 0})
    with pytest.raises(TypeError, match="concurrency_groups"):
        Service.options(concurrency_groups=["io"])


@ray.remote(concurrency_groups={"io": 2})
class AsyncService:
    def __init__(self):
        # Each group runs on an event loop of its own (as in Ray): a signal between groups
        # must be thread-safe, which an asyncio.Event is not.
        self.event = threading.Event()

    @ray.method(concurrency_group="io")
    async def wait(self):
        import asyncio

        assert await asyncio.get_running_loop().run_in_executor(None, self.event.wait, 60)
        return "released"

    async def release(self):
        self.event.set()
        return "default group"


def test_groups_on_an_async_actor(ray_cluster):
    service = AsyncService.remote()
    waiting = [service.wait.remote(), service.wait.remote()]
    assert ray.get(service.release.remote(), timeout=60) == "default group"
    assert ray.get(waiting, timeout=60) == ["released", "released"]


@ray.remote(concurrency_groups={"other": 1})
class BlockingAsync:
    def __init__(self):
        self.started = threading.Event()
        self.gate = threading.Event()

    async def block_the_loop(self):
        # Blocks the default group's event loop itself (no await), as careless code does.
        self.started.set()
        return self.gate.wait(60)

    @ray.method(concurrency_group="other")
    async def release(self):
        assert self.started.wait(60)
        self.gate.set()
        return "released"


def test_each_group_of_an_async_actor_has_its_own_event_loop(ray_cluster):
    actor = BlockingAsync.remote()
    blocked = actor.block_the_loop.remote()
    # With one loop for the whole actor, `release` would wait behind the blocked call forever.
    assert ray.get(actor.release.remote(), timeout=60) == "released"
    assert ray.get(blocked, timeout=60) is True


@ray.remote
class OneThread:
    def __init__(self):
        self.gate = threading.Event()

    def block(self):
        return self.gate.wait(timeout=60)

    def open_gate(self):
        self.gate.set()
        return "opened"

    def ping(self):
        return "pong"


def test_every_actor_has_rays_system_group(ray_cluster):
    # A one-thread actor with no groups declared: a call sent to `_ray_system` runs on a thread
    # of its own, so it does not hold up the actor's other calls.
    actor = OneThread.remote()
    stuck = actor.block.options(concurrency_group="_ray_system").remote()
    assert ray.get(actor.ping.remote(), timeout=60) == "pong"
    assert ray.get(actor.open_gate.remote(), timeout=60) == "opened"
    assert ray.get(stuck, timeout=60) is True
    # A group a one-thread actor lacks is an error naming it, not a silent default.
    with pytest.raises(ValueError, match="concurrency group 'io'"):
        ray.get(actor.ping.options(concurrency_group="io").remote(), timeout=60)


@ray.remote
def wait_for_signal(signal):
    return ray.get(signal.block.remote())


@ray.remote(concurrency_groups={"group_a": 1, "group_b": 1})
class TwoGroups:
    @ray.method(concurrency_group="group_a")
    def slow(self, _dependency):
        return "a"

    @ray.method(concurrency_group="group_b")
    def fast(self, i):
        return f"b{i}"


def test_a_call_waiting_for_its_arguments_holds_back_only_its_own_group(ray_cluster):
    signal = OneThread.options(max_concurrency=2).remote()
    actor = TwoGroups.remote()
    waiting = actor.slow.remote(wait_for_signal.remote(signal))
    # As in Ray, each group keeps its own order: group_b's calls need not wait for group_a's.
    assert ray.get([actor.fast.remote(i) for i in range(5)], timeout=60) == [f"b{i}" for i in range(5)]
    ray.get(signal.open_gate.remote(), timeout=60)
    assert ray.get(waiting, timeout=60) == "a"
