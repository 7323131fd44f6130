"""ObjectRef: a reference to a value in the object store, counted by the runtime."""

from __future__ import annotations

import types

from oxray._private import serialization
from oxray._private.state import STATE, current_job_id


class ObjectRef:
    __slots__ = ("_id", "_task_id", "_job_id", "_epoch", "_actor_call", "_actor_id", "__weakref__")

    # `ObjectRef[T]` in type hints, as Ray's ObjectRef is generic: a `types.GenericAlias`
    # (`typing.get_args(ObjectRef[int]) == (int,)`), as for the standard library's generics.
    __class_getitem__ = classmethod(types.GenericAlias)

    def __init__(
        self,
        object_id: bytes,
        task_id: bytes | None = None,
        actor_call: bool = False,
        job_id: bytes | None = None,
        actor_id: bytes | None = None,
    ):
        if not isinstance(object_id, bytes) or len(object_id) != 16:
            raise ValueError(f"ObjectRef needs a 16-byte id, got {object_id!r}")
        self._id = object_id
        # The task that makes the object (for put(), the task or driver that called it).
        self._task_id = task_id
        # Its job: that of the code that made the ref, unless the ref was passed in.
        self._job_id = current_job_id() if job_id is None else job_id
        # Made by an actor call: `cancel(force=True)` does not apply to it.
        self._actor_call = actor_call
        # The actor an actor call's result comes from: names it in a RayActorError's `actor_id`.
        self._actor_id = actor_id
        self._epoch = STATE.epoch
        client = STATE.client
        if client is not None:
            client.incref(object_id)

    def __del__(self):
        try:
            client = STATE.client
            if client is not None and self._epoch == STATE.epoch:
                client.decref(self._id)
        except Exception:  # noqa: BLE001 - never raise from a finalizer (e.g. at exit)
            pass

    def binary(self) -> bytes:
        return self._id

    def hex(self) -> str:
        return self._id.hex()

    def task_id(self):
        """The id of the task that creates this object (Ray's `ObjectRef.task_id()`);
        nil for a ref built from bare bytes."""
        from oxray._private.ids import TaskID

        return TaskID(self._task_id) if self._task_id else TaskID.nil()

    def job_id(self):
        """The id of the job whose task or driver created this object (Ray's `ObjectRef.job_id()`)."""
        from oxray._private.ids import JobID

        return JobID(self._job_id)

    def __eq__(self, other):
        return isinstance(other, ObjectRef) and other._id == self._id

    def __hash__(self):
        return hash(self._id)

    def __repr__(self):
        return f"ObjectRef({self._id.hex()})"

    def __reduce__(self):
        serialization.note_nested_ref(self._id)
        return (ObjectRef, (self._id, self._task_id, self._actor_call, self._job_id, self._actor_id))

    def as_future(self):
        """An `asyncio.Future` for the value, on the current event loop (as Ray's). Cancelling
        the future does not cancel the task."""
        import asyncio

        return asyncio.wrap_future(self.future())

    def future(self):
        """A `concurrent.futures.Future` for the value (or the error `get` would raise)."""
        import concurrent.futures

        from oxray._private import api

        fut = concurrent.futures.Future()

        def resolve():
            # Running from here on: a cancel() (an asyncio wrapper's, say) no longer applies.
            if not fut.set_running_or_notify_cancel():
                return
            try:
                fut.set_result(api.get(self))
            except BaseException as e:  # noqa: BLE001
                fut.set_exception(e)

        import threading

        threading.Thread(target=resolve, daemon=True).start()
        return fut

    def _on_completed(self, callback) -> None:
        """Calls `callback(value)` once the object is ready, from another thread; a failed
        task's error is passed as the value (Ray's)."""

        def done(fut):
            error = fut.exception()
            callback(error if error is not None else fut.result())

        self.future().add_done_callback(done)

    def __await__(self):
        import asyncio

        return asyncio.wrap_future(self.future()).__await__()
