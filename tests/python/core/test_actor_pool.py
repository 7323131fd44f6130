"""`oxray.util.ActorPool`, used the way Ray's docs use `ray.util.ActorPool`."""

import pytest

import oxray as ray
from oxray.util import ActorPool


@ray.remote
class Doubler:
    def double(self, v):
        return 2 * v

    def wait_then_double(self, gate, v):
        ray.get(gate.wait.remote())
        return 2 * v


@ray.remote
class Gate:
    """Holds calls until `open()`: a call's readiness without timing windows."""

    def __init__(self):
        import threading

        self.event = threading.Event()

    def open(self):
        self.event.set()

    def wait(self):
        self.event.wait()


def test_map_keeps_the_order_of_the_values(ray_cluster):
    pool = ActorPool([Doubler.remote(), Doubler.remote()])
    assert list(pool.map(lambda a, v: a.double.remote(v), [1, 2, 3, 4, 5])) == [2, 4, 6, 8, 10]
    assert sorted(pool.map_unordered(lambda a, v: a.double.remote(v), [1, 2, 3])) == [2, 4, 6]


def test_submit_queues_when_every_actor_is_busy(ray_cluster):
    pool = ActorPool([Doubler.remote()])
    for v in range(4):
        pool.submit(lambda a, v: a.double.remote(v), v)
    assert not pool.has_free()
    assert [pool.get_next() for _ in range(4)] == [0, 2, 4, 6]
    assert not pool.has_next() and pool.has_free()
    with pytest.raises(StopIteration, match="No more results"):
        pool.get_next()


def test_get_next_unordered_returns_what_is_ready_first(ray_cluster):
    gate = Gate.options(max_concurrency=4).remote()
    slow, fast = Doubler.remote(), Doubler.remote()
    pool = ActorPool([fast, slow])  # the last actor listed takes the first submission
    pool.submit(lambda a, v: a.wait_then_double.remote(gate, v), 1)
    pool.submit(lambda a, v: a.double.remote(v), 2)
    assert pool.get_next_unordered() == 4
    # The first is still held by the gate: a timeout says so.
    with pytest.raises(TimeoutError):
        pool.get_next_unordered(timeout=0)
    ray.get(gate.open.remote())
    assert pool.get_next_unordered() == 2
    # Once a later call was handed back out of order, in-order collection is refused.
    gate = Gate.options(max_concurrency=4).remote()
    pool.submit(lambda a, v: a.wait_then_double.remote(gate, v), 3)
    pool.submit(lambda a, v: a.double.remote(v), 4)
    assert pool.get_next_unordered() == 8
    with pytest.raises(ValueError, match="not allowed to call get_next"):
        pool.get_next()
    ray.get(gate.open.remote())
    assert pool.get_next_unordered() == 6


def test_pop_idle_and_push(ray_cluster):
    a, b = Doubler.remote(), Doubler.remote()
    pool = ActorPool([a])
    assert pool.pop_idle() == a and pool.pop_idle() is None
    pool.push(a)
    with pytest.raises(ValueError, match="already belongs"):
        pool.push(a)
    pool.push(b)
    assert list(pool.map(lambda actor, v: actor.double.remote(v), [7, 8])) == [14, 16]
