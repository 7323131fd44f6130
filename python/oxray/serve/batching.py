"""`@serve.batch`: callers pass one item each; the decorated `async def` gets them
as lists (one per argument) and returns a list, whose item `i` goes to caller
`i`. A batch starts with the first queued call and closes at `max_batch_size`
calls (or `batch_size_fn`'s size) or `batch_wait_timeout_s` after its first,
whichever comes first; at most `max_concurrent_batches` run at once. Queues live
on the replica's event loop, one per decorated function, or per method and instance."""

from __future__ import annotations

import asyncio
import functools
import inspect
from typing import Callable, Optional

from oxray.serve.exceptions import RayServeException


def _check(max_batch_size, batch_wait_timeout_s, max_concurrent_batches) -> None:
    if isinstance(max_batch_size, bool) or not isinstance(max_batch_size, int) or max_batch_size < 1:
        raise ValueError(f"max_batch_size={max_batch_size!r}: expected an int of at least 1")
    if (
        isinstance(batch_wait_timeout_s, bool)
        or not isinstance(batch_wait_timeout_s, (int, float))
        or (batch_wait_timeout_s < 0)
    ):
        raise ValueError(f"batch_wait_timeout_s={batch_wait_timeout_s!r}: expected a number of seconds, 0 or more")
    if (
        isinstance(max_concurrent_batches, bool)
        or not isinstance(max_concurrent_batches, int)
        or (max_concurrent_batches < 1)
    ):
        raise ValueError(f"max_concurrent_batches={max_concurrent_batches!r}: expected an int of at least 1")


class _Queue:
    """One decorated function's (or one instance's method's) waiting calls and running batches."""

    def __init__(self, settings: dict, call: Callable):
        self.settings, self.call = settings, call
        self.items: Optional[asyncio.Queue] = None
        self.slots: Optional[asyncio.Semaphore] = None
        self.batcher = None

    async def submit(self, args: tuple, kwargs: dict):
        if self.items is None:
            self.items = asyncio.Queue()
            self.slots = asyncio.Semaphore(self.settings["max_concurrent_batches"])
            self.batcher = asyncio.get_running_loop().create_task(self._form_batches())
        future = asyncio.get_running_loop().create_future()
        self.items.put_nowait((args, kwargs, future))
        return await future

    def _size(self, batch: list) -> int:
        size_fn = self.settings["batch_size_fn"]
        return size_fn([args[0] if args else None for args, _, _ in batch]) if size_fn else len(batch)

    async def _form_batches(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self.items.get()]
            try:
                await self._fill(loop, batch)
            except Exception as e:  # noqa: BLE001 - batch_size_fn raised: its batch fails, the queue goes on
                for _, _, future in batch:
                    if not future.done():
                        future.set_exception(e)
            batch = [item for item in batch if not item[2].done()]
            if batch:
                await self.slots.acquire()
                loop.create_task(self._run(batch))

    async def _fill(self, loop, batch: list) -> None:
        """Adds waiting calls to `batch` until it is full or its wait is over."""
        if self.settings["batch_size_fn"] and self._size(batch) > self.settings["max_batch_size"]:
            batch[0][2].set_exception(RuntimeError("Size of item is greater than max_batch_size; it cannot be batched"))
            return
        deadline = loop.time() + self.settings["batch_wait_timeout_s"]
        while self._size(batch) < self.settings["max_batch_size"]:
            left = deadline - loop.time()
            if left <= 0:
                break
            try:
                item = await asyncio.wait_for(self.items.get(), left)
            except asyncio.TimeoutError:
                break
            batch.append(item)  # before batch_size_fn sees it: if that raises, this caller fails too
            if self.settings["batch_size_fn"] and self._size(batch) > self.settings["max_batch_size"]:
                self.items.put_nowait(batch.pop())  # it opens the next batch
                break

    async def _run(self, batch: list) -> None:
        try:
            arity = len(batch[0][0])
            columns = [[args[i] for args, _, _ in batch] for i in range(arity)]
            keyword = {key: [kwargs[key] for _, kwargs, _ in batch] for key in batch[0][1]}
            results = self.call(*columns, **keyword)
            if inspect.isawaitable(results):
                results = await results
            if not isinstance(results, (list, tuple)) or len(results) != len(batch):
                length = len(results) if hasattr(results, "__len__") else "no"
                raise RayServeException(
                    "Batched function doesn't preserve batch size. The input list has length "
                    f"{len(batch)} but the returned list has length {length}."
                )
            for (_, _, future), result in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(result)
        except Exception as e:  # noqa: BLE001 - an exception fails the whole batch
            for _, _, future in batch:
                if not future.done():
                    future.set_exception(e)
        finally:
            self.slots.release()


def batch(
    _func: Optional[Callable] = None,
    *,
    max_batch_size: int = 10,
    batch_wait_timeout_s: float = 0.01,
    max_concurrent_batches: int = 1,
    batch_size_fn: Optional[Callable] = None,
):
    """`@serve.batch` or `@serve.batch(max_batch_size=..., batch_wait_timeout_s=..., ...)`."""
    _check(max_batch_size, batch_wait_timeout_s, max_concurrent_batches)

    def wrap(func: Callable):
        if not inspect.iscoroutinefunction(func):
            raise TypeError("Functions decorated with @serve.batch must be 'async def'")
        settings = {
            "max_batch_size": max_batch_size,
            "batch_wait_timeout_s": batch_wait_timeout_s,
            "max_concurrent_batches": max_concurrent_batches,
            "batch_size_fn": batch_size_fn,
        }
        # A method's queue is kept on its instance (the class is pickled to the replicas, so no
        # table of instances travels with it); a function's in `plain`.
        attribute = f"_serve_batch_queue_{func.__name__}"
        plain: list = []

        @functools.wraps(func)
        async def batched(*args, **kwargs):
            owner = args[0] if args and getattr(type(args[0]), func.__name__, None) is batched else None
            if owner is not None:
                queue = owner.__dict__.get(attribute)
                if queue is None:
                    queue = _Queue(settings, functools.partial(func, owner))
                    setattr(owner, attribute, queue)
                return await queue.submit(args[1:], kwargs)
            if not plain:
                plain.append(_Queue(settings, func))
            return await plain[0].submit(args, kwargs)

        def set_max_batch_size(size: int) -> None:
            _check(size, settings["batch_wait_timeout_s"], settings["max_concurrent_batches"])
            settings["max_batch_size"] = size

        def set_batch_wait_timeout_s(timeout_s: float) -> None:
            _check(settings["max_batch_size"], timeout_s, settings["max_concurrent_batches"])
            settings["batch_wait_timeout_s"] = timeout_s

        batched.set_max_batch_size = set_max_batch_size
        batched.set_batch_wait_timeout_s = set_batch_wait_timeout_s
        batched._serve_batch_settings = settings
        return batched

    return wrap(_func) if _func is not None else wrap
