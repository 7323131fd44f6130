"""Ray's `ray.util.queue.Queue`: a first-in, first-out queue that tasks and actors
share, kept by an async actor. Blocking calls wait in the actor, so a `get()` in one
task wakes when another task `put()`s."""

from __future__ import annotations

import asyncio
import queue as _stdlib_queue
from typing import Any, List, Optional


class Empty(_stdlib_queue.Empty):
    """Raised by a non-blocking or timed-out `get` on an empty queue."""


class Full(_stdlib_queue.Full):
    """Raised by a non-blocking or timed-out `put` on a full queue."""


class _QueueActor:
    """The queue's state. Replies are `(True, value)` or `(False, message)`, so the
    caller raises `Empty`/`Full` itself rather than unwrapping a task error."""

    def __init__(self, maxsize: int):
        self.maxsize = maxsize
        self.items: asyncio.Queue = asyncio.Queue(maxsize)

    def qsize(self) -> int:
        return self.items.qsize()

    def empty(self) -> bool:
        return self.items.empty()

    def full(self) -> bool:
        return self.items.full()

    async def put(self, item, timeout: Optional[float] = None):
        try:
            await asyncio.wait_for(self.items.put(item), timeout)
        except asyncio.TimeoutError:
            return False, f"the queue stayed full for {timeout} s"
        return True, None

    async def get(self, timeout: Optional[float] = None):
        try:
            return True, await asyncio.wait_for(self.items.get(), timeout)
        except asyncio.TimeoutError:
            return False, f"the queue stayed empty for {timeout} s"

    def put_nowait(self, item):
        try:
            self.items.put_nowait(item)
        except asyncio.QueueFull:
            return False, f"the queue is full (maxsize {self.maxsize})"
        return True, None

    def put_nowait_batch(self, items: list):
        if self.maxsize > 0 and len(items) + self.items.qsize() > self.maxsize:
            return False, (
                f"Cannot add {len(items)} items to queue of size {self.items.qsize()} and maxsize {self.maxsize}."
            )
        for item in items:
            self.items.put_nowait(item)
        return True, None

    def get_nowait(self):
        try:
            return True, self.items.get_nowait()
        except asyncio.QueueEmpty:
            return False, "the queue is empty"

    def get_nowait_batch(self, num_items: int):
        if num_items > self.items.qsize():
            return False, f"Cannot get {num_items} items from queue of size {self.items.qsize()}."
        return True, [self.items.get_nowait() for _ in range(num_items)]


def _check_timeout(timeout) -> None:
    if timeout is not None and timeout < 0:
        raise ValueError(f"'timeout' must be a non-negative number, got {timeout!r}")


def _full(reply):
    ok, message = reply
    if not ok:
        raise Full(message)


def _item(reply):
    ok, value = reply
    if not ok:
        raise Empty(value)
    return value


class Queue:
    """`Queue(maxsize=0)` (0: unbounded). `actor_options` go to the actor that keeps it
    (by default it holds no resources)."""

    def __init__(self, maxsize: int = 0, hint_ip: Optional[str] = None, actor_options: Optional[dict] = None):
        import oxray

        if hint_ip is not None:
            raise NotImplementedError(
                "Queue(hint_ip=...) is not supported by oxray: place the queue's actor with "
                "actor_options={'label_selector': ...} or a scheduling_strategy instead"
            )
        if not isinstance(maxsize, int) or isinstance(maxsize, bool) or maxsize < 0:
            raise ValueError(f"Queue(maxsize={maxsize!r}): expected an integer >= 0 (0: unbounded)")
        self.maxsize = maxsize
        options = {"num_cpus": 0, **(actor_options or {})}
        self.actor = oxray.remote(_QueueActor).options(**options).remote(maxsize)

    def __len__(self) -> int:
        return self.size()

    def size(self) -> int:
        import oxray

        return oxray.get(self.actor.qsize.remote())

    def qsize(self) -> int:
        return self.size()

    def empty(self) -> bool:
        import oxray

        return oxray.get(self.actor.empty.remote())

    def full(self) -> bool:
        import oxray

        return oxray.get(self.actor.full.remote())

    def put(self, item: Any, block: bool = True, timeout: Optional[float] = None) -> None:
        """Adds `item`; waits for room when `block` (at most `timeout` s), else raises `Full`."""
        import oxray

        if not block:
            return _full(oxray.get(self.actor.put_nowait.remote(item)))
        _check_timeout(timeout)
        _full(oxray.get(self.actor.put.remote(item, timeout)))

    async def put_async(self, item: Any, block: bool = True, timeout: Optional[float] = None) -> None:
        if not block:
            return _full(await self.actor.put_nowait.remote(item))
        _check_timeout(timeout)
        _full(await self.actor.put.remote(item, timeout))

    def get(self, block: bool = True, timeout: Optional[float] = None) -> Any:
        """Takes the oldest item; waits for one when `block` (at most `timeout` s), else raises `Empty`."""
        import oxray

        if not block:
            return _item(oxray.get(self.actor.get_nowait.remote()))
        _check_timeout(timeout)
        return _item(oxray.get(self.actor.get.remote(timeout)))

    async def get_async(self, block: bool = True, timeout: Optional[float] = None) -> Any:
        if not block:
            return _item(await self.actor.get_nowait.remote())
        _check_timeout(timeout)
        return _item(await self.actor.get.remote(timeout))

    def put_nowait(self, item: Any) -> None:
        self.put(item, block=False)

    def put_nowait_batch(self, items: List[Any]) -> None:
        """Adds all of `items` at once, or none (raising `Full`)."""
        import oxray

        if not isinstance(items, list):
            raise TypeError(f"put_nowait_batch() takes a list of items, got {type(items).__name__}")
        _full(oxray.get(self.actor.put_nowait_batch.remote(items)))

    def get_nowait(self) -> Any:
        return self.get(block=False)

    def get_nowait_batch(self, num_items: int) -> List[Any]:
        """Takes `num_items` items at once, or none (raising `Empty`)."""
        import oxray

        if not isinstance(num_items, int) or isinstance(num_items, bool):
            raise TypeError(f"get_nowait_batch() takes an integer number of items, got {num_items!r}")
        if num_items < 0:
            raise ValueError(f"get_nowait_batch(): the number of items must be >= 0, got {num_items}")
        return _item(oxray.get(self.actor.get_nowait_batch.remote(num_items)))

    def shutdown(self, force: bool = False, grace_period_s: int = 5) -> None:
        """Ends the queue's actor: at once with `force`, else after the calls already made
        (killed if that takes longer than `grace_period_s`)."""
        import oxray

        if self.actor is None:
            return
        if force:
            oxray.kill(self.actor, no_restart=True)
        else:
            done = self.actor.__ray_terminate__.remote()
            finished, _ = oxray.wait([done], timeout=grace_period_s)
            if not finished:
                oxray.kill(self.actor, no_restart=True)
        self.actor = None
