"""Streaming generators, the way Ray's docs use them: a generator task (or actor method)
returns an `ObjectRefGenerator`, and each yielded value can be read while the task runs.
A failure is the item after the last one; retries with `retry_exceptions` deliver each
item once; `ray.cancel` stops the stream."""

import asyncio

import pytest

import oxray as ray


@ray.remote
class Gate:
    """Opened by the test: a generator waits here after its first item."""

    def __init__(self):
        self.event = asyncio.Event()
        self.count = 0

    async def open(self):
        self.event.set()

    async def wait(self):
        await self.event.wait()

    async def bump(self):
        self.count += 1
        return self.count


@ray.remote
def numbers(n):
    for i in range(n):
        yield i


def test_a_generator_task_streams_its_values(ray_cluster):
    gen = numbers.remote(5)
    assert isinstance(gen, ray.ObjectRefGenerator)
    assert [ray.get(ref) for ref in gen] == [0, 1, 2, 3, 4]
    with pytest.raises(StopIteration):
        next(gen)


@ray.remote
def first_then_wait(gate):
    yield "first"
    ray.get(gate.wait.remote())
    yield "second"


def test_an_item_is_readable_before_the_task_ends(ray_cluster):
    gate = Gate.remote()
    gen = first_then_wait.remote(gate)
    # The task cannot end until the gate opens, so this item came while it ran.
    assert ray.get(next(gen), timeout=60) == "first"
    assert not ray.wait([gen.completed()], timeout=0)[0]
    gate.open.remote()
    assert ray.get(next(gen), timeout=60) == "second"
    with pytest.raises(StopIteration):
        next(gen)


@ray.remote(max_retries=0)
def fails_at(n):
    for i in range(5):
        if i == n:
            raise ValueError(f"failed at {i}")
        yield i


def test_a_failure_is_the_item_after_the_last_one(ray_cluster):
    gen = fails_at.remote(2)
    assert ray.get(next(gen)) == 0
    assert ray.get(next(gen)) == 1
    with pytest.raises(ValueError, match="failed at 2"):
        ray.get(next(gen))
    for _ in range(2):
        with pytest.raises(StopIteration):
            next(gen)


def test_items_made_before_a_failure_outlive_it(ray_cluster):
    gen = fails_at.remote(3)
    # Read nothing until the task has failed: the items must still be there.
    with pytest.raises(ValueError):
        ray.get(gen.completed())
    assert [ray.get(next(gen)) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(ray.exceptions.RayTaskError):
        ray.get(next(gen))


@ray.remote(max_retries=2, retry_exceptions=[KeyError])
def flaky(counter):
    attempt = ray.get(counter.bump.remote())
    yield "a"
    if attempt < 3:
        raise KeyError("transient")
    yield "b"


def test_a_retried_generator_delivers_each_item_once(ray_cluster):
    counter = Gate.remote()
    gen = flaky.remote(counter)
    assert [ray.get(ref) for ref in gen] == ["a", "b"]
    assert ray.get(counter.bump.remote()) == 4  # three attempts ran


@ray.remote
class Producer:
    def words(self):
        yield from ["x", "y"]

    async def slow_words(self):
        for w in ["p", "q"]:
            await asyncio.sleep(0)
            yield w

    @ray.method(num_returns="streaming")
    def declared(self, n):
        return (i * i for i in range(n))


def test_actor_methods_stream_sync_and_async(ray_cluster):
    p = Producer.remote()
    assert [ray.get(r) for r in p.words.remote()] == ["x", "y"]
    assert [ray.get(r) for r in p.slow_words.remote()] == ["p", "q"]
    assert [ray.get(r) for r in p.declared.remote(4)] == [0, 1, 4, 9]


def test_a_generator_with_fixed_num_returns_returns_its_values(ray_cluster):
    a, b = numbers.options(num_returns=2).remote(2)
    assert ray.get([a, b]) == [0, 1]


def test_async_iteration_of_a_generator(ray_cluster):
    async def collect():
        return [await ref async for ref in numbers.remote(3)]

    assert asyncio.run(collect()) == [0, 1, 2]


@ray.remote
def returns_a_list():
    return [1, 2]


def test_streaming_a_function_that_returns_no_generator_is_an_error(ray_cluster):
    gen = returns_a_list.options(num_returns="streaming").remote()
    with pytest.raises(TypeError, match="not a generator"):
        ray.get(next(gen))


def test_cancel_stops_a_stream(ray_cluster):
    gate = Gate.remote()
    gen = first_then_wait.remote(gate)
    assert ray.get(next(gen), timeout=60) == "first"
    ray.cancel(gen)
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(next(gen), timeout=60)
    with pytest.raises(StopIteration):
        next(gen)
