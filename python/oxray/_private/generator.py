"""Streaming generators (`num_returns="streaming"`): a task's yielded values, each an
object the caller can get while the task still runs.

The ids tie the two sides together without a channel of their own. A streaming task's
single return id is derived from its task id (which is how its worker knows to stream),
and its item `i` is stored under an id derived from that return id and `i`. The caller
holds item `i`'s id before it exists and waits for "item `i` or the task's end"; the
worker seals each item as it is yielded. A retried attempt yields the items already
delivered under the same ids, and the agent keeps the first copy of each, so the caller
sees every item once. The task's return is a `StreamEnd` listing the items (they live as
long as it does); a failure is stored there instead, with the items made before it pinned
to the error, and the caller gets that error as the item after the last one.

Across nodes the items of a task forwarded elsewhere reach the caller when the task
ends (the end lists them), not one by one.
"""

from __future__ import annotations

import hashlib
import inspect
import time

from oxray._private.object_ref import ObjectRef

STREAMING = "streaming"


def stream_end_id(task_id: bytes) -> bytes:
    """The single return id of a streaming task (the mark its worker looks for)."""
    return hashlib.blake2b(b"oxray-stream-end:" + task_id, digest_size=16).digest()


def stream_item_id(end_id: bytes, index: int) -> bytes:
    return hashlib.blake2b(end_id + index.to_bytes(8, "little"), digest_size=16).digest()


def is_streaming_task(task_id: bytes, return_ids) -> bool:
    return len(return_ids) == 1 and return_ids[0] == stream_end_id(task_id)


def default_num_returns(function, options: dict):
    """Ray's default: a generator function streams; anything else returns one value."""
    if "num_returns" in options and options["num_returns"] is not None:
        return options["num_returns"]
    target = inspect.unwrap(function) if callable(function) else function
    if inspect.isgeneratorfunction(target) or inspect.isasyncgenfunction(target):
        return STREAMING
    return 1


class StreamEnd:
    """A streaming task's return value: the refs of every item it yielded, in order."""

    __slots__ = ("items",)

    def __init__(self, items):
        self.items = list(items)

    def __reduce__(self):
        return (StreamEnd, (self.items,))


def yielded_values(gen, event_loop, context_fields):
    """The values of a generator, or of an async generator stepped on `event_loop` (an
    async actor's) or on a loop of its own (a task's)."""
    if not inspect.isasyncgen(gen):
        yield from gen
        return
    from oxray._private.state import CURRENT

    done = object()

    async def step():
        CURRENT.restore(context_fields)
        try:
            return await gen.__anext__()
        except StopAsyncIteration:
            return done

    import asyncio  # here, not at import: a worker that never streams an async generator skips it

    own_loop = asyncio.new_event_loop() if event_loop is None else None
    try:
        while True:
            if own_loop is not None:
                value = own_loop.run_until_complete(step())
            else:
                value = asyncio.run_coroutine_threadsafe(step(), event_loop).result()
            if value is done:
                return
            yield value
    finally:
        if own_loop is not None:
            own_loop.close()


class ObjectRefGenerator:
    """What `.remote()` returns for a streaming task: iterating it gives an `ObjectRef`
    per yielded value as soon as that value exists (Ray's `ObjectRefGenerator`). An error
    in the task is the last item: getting it raises."""

    def __init__(self, end_ref: ObjectRef):
        self._end = end_ref
        self._index = 0
        self._next_ref = None  # the next item's ref, held while waiting for it
        self._finished = False

    def __iter__(self):
        return self

    def __next__(self) -> ObjectRef:
        ref = self._next(None)
        if ref is None:  # pragma: no cover - no timeout given
            raise StopIteration
        return ref

    def __aiter__(self):
        return self

    async def __anext__(self) -> ObjectRef:
        import asyncio

        loop = asyncio.get_running_loop()
        # StopIteration cannot cross a future: the end comes back as None.
        ref = await loop.run_in_executor(None, self._next_or_none)
        if ref is None:
            raise StopAsyncIteration
        return ref

    def _next_or_none(self):
        try:
            return self._next(None)
        except StopIteration:
            return None

    def _next_sync(self, timeout_s=None):
        """Ray's `_next_sync`: the next ref, or None when `timeout_s` passed first."""
        return self._next(timeout_s)

    def completed(self) -> ObjectRef:
        """A ref that is ready once the task has ended; getting it raises the task's error."""
        return self._end

    def is_finished(self) -> bool:
        return self._finished

    def task_id(self):
        return self._end.task_id()

    def _next(self, timeout_s):
        if self._finished:
            raise StopIteration
        from oxray._private.api import _client

        client = _client()
        if self._next_ref is None:
            self._next_ref = ObjectRef(
                stream_item_id(self._end._id, self._index),
                self._end._task_id,
                job_id=self._end._job_id,
                actor_id=self._end._actor_id,
            )
            client.flush_refs()  # the agent must know the item is awaited before the wait below
        item = self._next_ref
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = client.wait([item._id, self._end._id], 1, 1.0 if left is None else min(left, 1.0))
            if item._id in ready:
                return self._take(item)
            if self._end._id in ready:
                # The task seals every item before its end: one not there now never will be.
                if item._id in client.wait([item._id], 1, 0.0):
                    return self._take(item)
                return self._end_reached()
            if left is not None and left <= 0:
                return None

    def _take(self, item: ObjectRef) -> ObjectRef:
        self._index += 1
        self._next_ref = None
        return item

    def _end_reached(self) -> ObjectRef:
        from oxray._private.api import get

        self._finished = True
        self._next_ref = None
        try:
            end = get(self._end)
        except BaseException:  # noqa: BLE001 - the task failed: its error is the last item
            return self._end
        if isinstance(end, StreamEnd):
            raise StopIteration
        raise TypeError(
            f"A task declared with num_returns='streaming' returned {type(end).__name__}, not a generator: "
            "yield its values, or declare it with num_returns=1"
        )

    def __reduce__(self):
        return (ObjectRefGenerator, (self._end,))

    def __repr__(self):
        return f"ObjectRefGenerator({self._end.hex()})"
