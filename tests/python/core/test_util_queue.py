"""`oxray.util.queue.Queue`, used the way Ray's docs use `ray.util.queue.Queue`:
shared by tasks, blocking `get` woken by another task's `put`, batches, and shutdown."""

import asyncio

import pytest

import oxray as ray
from oxray.exceptions import GetTimeoutError, RayActorError
from oxray.util.queue import Empty, Full, Queue


@ray.remote
def take(queue):
    return queue.get(block=True)


def test_items_come_out_in_order(ray_cluster):
    q = Queue()
    for item in range(5):
        q.put(item)
    assert q.qsize() == 5 and len(q) == 5 and not q.empty()
    assert [q.get() for _ in range(5)] == list(range(5))
    assert q.empty()


def test_a_blocked_get_in_a_task_wakes_on_put(ray_cluster):
    q = Queue()
    waiting = take.remote(q)
    with pytest.raises(GetTimeoutError):
        ray.get(waiting, timeout=0.1)
    q.put("hello")
    assert ray.get(waiting, timeout=60) == "hello"


def test_full_empty_and_timeouts(ray_cluster):
    q = Queue(1)
    q.put(0, block=False)
    assert q.full()
    with pytest.raises(Full):
        q.put_nowait(1)
    with pytest.raises(Full):
        q.put(1, timeout=0.05)
    with pytest.raises(ValueError, match="timeout"):
        q.put(1, timeout=-1)
    assert q.get_nowait() == 0
    with pytest.raises(Empty):
        q.get_nowait()
    with pytest.raises(Empty):
        q.get(timeout=0.05)


def test_batches_are_all_or_nothing(ray_cluster):
    q = Queue(1)
    with pytest.raises(Full, match="Cannot add 2 items"):
        q.put_nowait_batch([1, 2])
    with pytest.raises(Empty, match="Cannot get 1 items"):
        q.get_nowait_batch(1)
    big = Queue(100)
    big.put_nowait_batch(list(range(100)))
    assert big.get_nowait_batch(100) == list(range(100))
    with pytest.raises(TypeError):
        big.put_nowait_batch((1, 2))


def test_async_put_and_get(ray_cluster):
    async def roundtrip():
        q = Queue()
        await q.put_async("x")
        return await q.get_async(timeout=5)

    assert asyncio.run(roundtrip()) == "x"


def test_shutdown_ends_the_actor(ray_cluster):
    q = Queue()
    actor = q.actor
    q.shutdown()
    assert q.actor is None
    with pytest.raises(RayActorError):
        ray.get(actor.empty.remote(), timeout=60)
