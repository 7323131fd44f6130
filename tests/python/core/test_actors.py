"""Actors: state, ordering, concurrency, naming, kill, handles, context, errors."""

import os
import threading

import pytest

import oxray as ray
from oxray_testutil import wait_until

TIMEOUT = 60


@ray.remote
class Counter:
    def __init__(self, start=0):
        self.value = start

    def incr(self, by=1):
        self.value += by
        return self.value

    def get(self):
        return self.value

    def pid(self):
        return os.getpid()

    def actor_id(self):
        return ray.get_runtime_context().get_actor_id()


@ray.remote
class Recorder:
    def __init__(self):
        self.items = []

    def append(self, i):
        self.items.append(i)

    def items_list(self):
        return list(self.items)


@ray.remote(max_concurrency=4)
class Overlapper:
    def __init__(self, parties):
        self.barrier = threading.Barrier(parties)

    def meet(self):
        # Returns only once `parties` calls are inside the actor at the same time;
        # raises BrokenBarrierError if they never are.
        return self.barrier.wait(timeout=TIMEOUT)


@ray.remote
class FailingInit:
    def __init__(self):
        raise ValueError("constructor exploded 1234")

    def ping(self):
        return "pong"


@ray.remote
def call_counter_from_task(counter, times):
    return [ray.get(counter.incr.remote(), timeout=TIMEOUT) for _ in range(times)]


def test_actor_keeps_state_across_calls(ray_cluster):
    c = Counter.remote(10)
    assert ray.get(c.incr.remote(), timeout=TIMEOUT) == 11
    assert ray.get(c.incr.remote(5), timeout=TIMEOUT) == 16
    assert ray.get(c.incr.remote(by=4), timeout=TIMEOUT) == 20
    assert ray.get(c.get.remote(), timeout=TIMEOUT) == 20
    # Two actors of the same class have independent state.
    d = Counter.remote()
    assert ray.get(d.incr.remote(), timeout=TIMEOUT) == 1
    assert ray.get(c.get.remote(), timeout=TIMEOUT) == 20
    # Actors live in their own worker processes.
    pids = ray.get([c.pid.remote(), d.pid.remote()], timeout=TIMEOUT)
    assert os.getpid() not in pids and pids[0] != pids[1]


def test_actor_calls_execute_in_submission_order(ray_cluster):
    r = Recorder.remote()
    refs = [r.append.remote(i) for i in range(200)]  # no waiting in between
    assert ray.get(r.items_list.remote(), timeout=TIMEOUT) == list(range(200))
    assert ray.get(refs, timeout=TIMEOUT) == [None] * 200


def test_max_concurrency_lets_calls_overlap(ray_cluster):
    a = Overlapper.remote(4)
    # Each call waits at a barrier for the other three: they all return only if
    # the four ran at once, and the barrier hands each a distinct arrival index.
    arrivals = ray.get([a.meet.remote() for _ in range(4)], timeout=TIMEOUT * 2)
    assert sorted(arrivals) == [0, 1, 2, 3]


def test_named_actor_get_actor_and_namespace(ray_cluster):
    a = Counter.options(name="oxray-test-counter").remote()
    ray.get(a.incr.remote(3), timeout=TIMEOUT)
    same = ray.get_actor("oxray-test-counter")
    assert ray.get(same.incr.remote(), timeout=TIMEOUT) == 4
    assert ray.get(a.get.remote(), timeout=TIMEOUT) == 4

    # A second actor with the same name in the same namespace is refused.
    with pytest.raises(ValueError):
        Counter.options(name="oxray-test-counter").remote()

    # Names are scoped by namespace.
    b = Counter.options(name="oxray-ns-counter", namespace="oxray-ns1").remote(100)
    ray.get(b.get.remote(), timeout=TIMEOUT)
    in_ns = ray.get_actor("oxray-ns-counter", namespace="oxray-ns1")
    assert ray.get(in_ns.incr.remote(), timeout=TIMEOUT) == 101
    with pytest.raises(ValueError):
        ray.get_actor("oxray-ns-counter")  # not in the driver's namespace
    # The same name can be reused in another namespace.
    c = Counter.options(name="oxray-ns-counter", namespace="oxray-ns2").remote(7)
    assert ray.get(c.get.remote(), timeout=TIMEOUT) == 7
    assert ray.get(in_ns.get.remote(), timeout=TIMEOUT) == 101

    with pytest.raises(ValueError):
        ray.get_actor("oxray-no-such-actor")


def test_get_if_exists_returns_the_same_actor(ray_cluster):
    first = Counter.options(name="oxray-singleton", get_if_exists=True).remote()
    assert ray.get(first.incr.remote(), timeout=TIMEOUT) == 1
    second = Counter.options(name="oxray-singleton", get_if_exists=True).remote(500)
    # Constructor arguments are ignored for the existing actor: same state.
    assert ray.get(second.incr.remote(), timeout=TIMEOUT) == 2
    assert ray.get(first.get.remote(), timeout=TIMEOUT) == 2
    assert ray.get(first.actor_id.remote(), timeout=TIMEOUT) == ray.get(second.actor_id.remote(), timeout=TIMEOUT)


def test_kill_actor_then_calls_raise_actor_died(ray_cluster):
    a = Counter.remote()
    assert ray.get(a.incr.remote(), timeout=TIMEOUT) == 1
    ray.kill(a)
    with pytest.raises(ray.exceptions.ActorDiedError):
        ray.get(a.incr.remote(), timeout=TIMEOUT)
    assert issubclass(ray.exceptions.ActorDiedError, ray.exceptions.RayActorError)
    assert issubclass(ray.exceptions.ActorDiedError, ray.exceptions.RayError)
    # A named actor's name is released when it is killed.
    n = Counter.options(name="oxray-killed").remote()
    ray.get(n.get.remote(), timeout=TIMEOUT)
    ray.kill(n)

    def name_free():
        try:
            ray.get_actor("oxray-killed")
            return False
        except ValueError:
            return True

    wait_until("the killed actor's name to be free", name_free, timeout=30)


def test_actor_handle_passed_to_task(ray_cluster):
    c = Counter.remote()
    assert ray.get(call_counter_from_task.remote(c, 3), timeout=TIMEOUT) == [1, 2, 3]
    # The task talked to the very same actor.
    assert ray.get(c.incr.remote(), timeout=TIMEOUT) == 4


def test_actor_id_in_runtime_context(ray_cluster):
    a, b = Counter.remote(), Counter.remote()
    id_a = ray.get(a.actor_id.remote(), timeout=TIMEOUT)
    id_b = ray.get(b.actor_id.remote(), timeout=TIMEOUT)
    for value in (id_a, id_b):
        assert isinstance(value, str) and value
        int(value, 16)
    assert id_a != id_b
    # Stable for the life of the actor.
    assert ray.get(a.actor_id.remote(), timeout=TIMEOUT) == id_a
    # The driver is not an actor.
    assert ray.get_runtime_context().get_actor_id() is None


def test_failing_constructor_makes_calls_raise(ray_cluster):
    a = FailingInit.remote()
    with pytest.raises((ray.exceptions.ActorDiedError, ray.exceptions.RayTaskError)) as ei:
        ray.get(a.ping.remote(), timeout=TIMEOUT)
    assert "constructor exploded 1234" in str(ei.value)


def test_the_head_keeps_a_bounded_history_of_dead_actors(fresh_cluster, monkeypatch):
    from oxray._private.state import STATE

    monkeypatch.setenv("OXRAY_HEAD_HISTORY", "10")
    fresh_cluster(num_cpus=2)
    for _ in range(50):
        c = Counter.remote()
        assert ray.get(c.incr.remote(), timeout=60) == 1
        ray.kill(c)
    keeper = Counter.remote()
    assert ray.get(keeper.incr.remote(), timeout=60) == 1

    def listed():
        actors = STATE.client.list_actors()
        return len(actors) <= 11 and sum(a.state == "DEAD" for a in actors) == 10 and actors

    wait_until(
        lambda: f"10 dead actors kept (states: {[a.state for a in STATE.client.list_actors()]})", listed, timeout=60
    )
