"""The actor a worker hosts: building it, and running its calls.

Calls run one at a time on the worker's main thread, or on threads of their own when the
actor has `max_concurrency > 1` or concurrency groups; an async actor's run on its event
loop (each concurrency group's on a loop of its own). An actor ends on purpose here too
(`exit_actor()`, `__ray_terminate__`, or the agent's reclamation once no handle is left).
"""

from __future__ import annotations

import atexit
import inspect
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from oxray._private.actor import (
    RECLAIM_METHOD,
    RECLAIMED_CAUSE,
    ActorExitRequest,
    ActorHandle,
    is_async_class,
    public_methods,
)
from oxray._private.state import CURRENT, STATE
from oxray._private.task_environment import Placement, UserCode, qualified_name, set_process_title

if TYPE_CHECKING:
    import asyncio

# Ray's concurrency group that every actor has, beside those it declares.
SYSTEM_CONCURRENCY_GROUP = "_ray_system"

# How long an actor that ended itself waits for its agent to kill it before it exits alone.
_EXIT_WAIT_S = 30.0


class ActorHost:
    """The actor of a worker (none until its creation task comes) and what runs its calls."""

    def __init__(self, client):
        self.client = client
        self.actor = None
        # The default group's threads (max_concurrency), when calls do not run one at a time.
        self.pool = None
        # GPUs, resources and env vars are assigned when the actor is created and hold for all its calls.
        self.placement = Placement()
        self.function_prefix = ""
        self.group_pools = {}
        self.method_groups = {}
        # An async actor's event loop, on a thread of its own: every call runs there.
        self.event_loop = None
        # An async actor's concurrency groups each have a loop of their own (as in Ray), so
        # a call that blocks one group's loop does not hold up the others.
        self.group_loops = {}
        self.group_of_thread = threading.local()
        # Actor calls handed to this worker and not finished, the futures of the async ones
        # running on the event loop, and those cancelled before they started.
        self.calls_here = set()
        self.async_calls = {}
        self.cancelled_calls = set()
        # A Condition: a reclamation waits on it for the other calls to finish.
        self.calls_lock = threading.Condition()
        self.creation_task_id = b""
        self.exit_lock = threading.Lock()

    # ---- Creation -------------------------------------------------------------------------

    def create(self, a, cls, args, kwargs) -> list:
        """Builds the actor, `cls(*args, **kwargs)`, and what runs its calls; the names of its
        methods (the agent's)."""
        STATE.actor_id = a.actor_id
        self.creation_task_id = a.task_id
        is_async = is_async_class(cls)
        # As Ray names them: an async actor's methods by their full `__qualname__`.
        async_name = f"{cls.__module__ or '__main__'}.{cls.__qualname__}"
        self.function_prefix = async_name if is_async else qualified_name(cls)
        CURRENT.function_name = f"{self.function_prefix}.__init__"
        set_process_title(f"ray::{cls.__name__}.__init__")  # Ray's title while it is built
        if is_async:
            self.start_event_loops(a.concurrency_groups)
        with UserCode():
            self.actor = self.on_actor_thread(lambda: cls(*args, **kwargs))
        method_names = [n for n in dir(self.actor) if callable(getattr(self.actor, n, None)) and not n.startswith("__")]
        STATE.current_actor = ActorHandle(a.actor_id, cls.__name__, public_methods(cls))
        self.start_pools(a, cls)
        return method_names

    def start_event_loops(self, concurrency_groups) -> None:
        """As in Ray, an async actor's `__init__` runs on its event loop (it may start tasks there)."""
        STATE.async_actor = True
        self.event_loop = _start_event_loop("oxray-actor-loop")
        self.group_loops = {name: _start_event_loop(f"oxray-actor-loop-{name}") for name in concurrency_groups}

    def start_pools(self, a, cls) -> None:
        if a.max_concurrency > 1 or a.concurrency_groups:
            # An async actor's calls wait here on its loop, where they run.
            self.pool = ThreadPoolExecutor(max_workers=a.max_concurrency)
        # Ray's concurrency groups: each runs at most its size of calls at once, beside
        # the default group (max_concurrency).
        self.group_pools = {
            name: ThreadPoolExecutor(max_workers=size, thread_name_prefix=f"oxray-group-{name}")
            for name, size in a.concurrency_groups.items()
        }
        self.method_groups = {
            name: options["concurrency_group"]
            for name, options in public_methods(cls).items()
            if options.get("concurrency_group")
        }

    # ---- Calls ----------------------------------------------------------------------------

    def function_name(self, a) -> str:
        """The runtime context's function name of call `a`."""
        return f"{self.function_prefix}.{a.method_name}"

    def call(self, a, args, kwargs):
        """Call `a`'s result, unless it was cancelled before it started."""
        if a.cancelled_before_start or self.cancelled_before_start(a.task_id):
            import asyncio

            raise asyncio.CancelledError(f"{a.name} was cancelled before it started")
        return self.call_method(a.method_name, args, kwargs)

    def call_method(self, method_name, args, kwargs):
        """An actor call: a method of the user's class, or one of Ray's built-in ones."""
        if method_name == "__ray_ready__":
            return True
        if method_name == "__ray_terminate__":
            raise ActorExitRequest("__ray_terminate__ was called")
        if method_name == RECLAIM_METHOD:
            # Sent by the agent once no strong handle to this actor is left (see `_put_handle_token`):
            # as in Ray, the calls already running (an async or threaded actor's) finish first.
            this_call = {CURRENT.task_id}
            with self.calls_lock:
                self.calls_lock.wait_for(lambda: self.calls_here <= this_call)
            raise ActorExitRequest(RECLAIMED_CAUSE)
        if method_name == "__ray_call__":
            fn, *rest = args
            return self.on_actor_thread(lambda: fn(self.actor, *rest, **kwargs))
        method = _method_of(self.actor, method_name)
        return self.on_actor_thread(lambda: method(*args, **kwargs))

    def on_actor_thread(self, call):
        """Runs `call` here, or for an async actor on its event loop (awaiting what it
        returns), with this task's context: ids, name and resources."""
        if self.event_loop is None:
            return call()
        import asyncio  # loaded already: the actor has an event loop

        fields = CURRENT.fields()
        task_id = CURRENT.task_id

        async def in_loop():
            CURRENT.restore(fields)
            with self.calls_lock:
                if task_id in self.cancelled_calls:
                    raise asyncio.CancelledError
                self.async_calls[task_id] = asyncio.current_task()
            try:
                result = call()
                # Only an `async def` method's coroutine is awaited: a returned ObjectRef (awaitable
                # too) is the method's value, as in Ray.
                if inspect.iscoroutine(result):
                    result = await result
                return result
            finally:
                with self.calls_lock:
                    self.async_calls.pop(task_id, None)

        return asyncio.run_coroutine_threadsafe(in_loop(), self.loop_here()).result()

    def loop_here(self):
        """The event loop of the concurrency group whose thread this is (an async actor's)."""
        return self.group_loops.get(getattr(self.group_of_thread, "name", ""), self.event_loop)

    def calls_running(self) -> bool:
        """Whether calls handed to this worker's threads have not ended."""
        with self.calls_lock:
            return bool(self.calls_here)

    def call_ended(self, task_id: bytes) -> None:
        """A call handed to this worker is done (a reclamation may be waiting for it)."""
        if self.calls_here:
            with self.calls_lock:
                self.calls_here.discard(task_id)
                self.cancelled_calls.discard(task_id)
                self.calls_lock.notify_all()

    # ---- Calls on threads of their own ----------------------------------------------------

    def submit(self, a, run, report_error) -> None:
        """Hands call `a` to `run` on its concurrency group's threads (the default group's:
        `self.pool`); `report_error` fails a call to a group the actor lacks."""
        with self.calls_lock:
            self.calls_here.add(a.task_id)
        group = a.concurrency_group or self.method_groups.get(a.method_name, "")
        if not group:
            self.pool.submit(run, a)
        elif group == SYSTEM_CONCURRENCY_GROUP:
            self.system_pool().submit(self.run_in_group, run, group, a)
        elif group in self.group_pools:
            self.group_pools[group].submit(self.run_in_group, run, group, a)
        else:
            error = ValueError(
                f"{a.name}: concurrency group {group!r} is not one of the actor's "
                f"({', '.join(sorted(self.group_pools)) or 'it has none'}): declare it with "
                "@remote(concurrency_groups={...})"
            )
            report_error(a, a.return_ids, a.name, error)

    def system_pool(self) -> ThreadPoolExecutor:
        """Ray's `_ray_system` concurrency group, which every actor has: one thread of its own,
        so a call sent there runs beside the actor's other calls."""
        with self.calls_lock:
            if SYSTEM_CONCURRENCY_GROUP not in self.group_pools:
                self.group_pools[SYSTEM_CONCURRENCY_GROUP] = ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix=f"oxray-group-{SYSTEM_CONCURRENCY_GROUP}"
                )
            return self.group_pools[SYSTEM_CONCURRENCY_GROUP]

    def run_in_group(self, run, group: str, a) -> None:
        self.group_of_thread.name = group  # `on_actor_thread` runs an async call on the group's loop
        run(a)

    # ---- Cancels --------------------------------------------------------------------------

    def cancel_call(self, task_id: bytes) -> None:
        """The agent cancelled an actor call sent here: an async one running on the event
        loop gets CancelledError (as in Ray); one not started yet never runs; a sync one
        runs on (it can poll `is_canceled()`). Its result is TaskCancelledError."""
        with self.calls_lock:
            if task_id not in self.calls_here:
                return  # finished already
            self.cancelled_calls.add(task_id)
            running = self.async_calls.get(task_id)
        if running is not None:
            # Cancelled on its loop, the call's own `except CancelledError` runs before it ends.
            running.get_loop().call_soon_threadsafe(running.cancel)

    def was_cancelled(self, task_id: bytes) -> bool:
        with self.calls_lock:
            return task_id in self.cancelled_calls

    def cancelled_before_start(self, task_id: bytes) -> bool:
        if not self.cancelled_calls:
            return False
        with self.calls_lock:
            return task_id in self.cancelled_calls

    # ---- Ending ---------------------------------------------------------------------------

    def exit(self, task_id: bytes, cause: str):
        """Ends this actor on purpose (`exit_actor()`, `__ray_terminate__`): its
        `__ray_shutdown__` and atexit handlers run, then the agent marks it dead for
        good (no restart), failing the call that asked (`task_id`; the creation task's when
        no call asked) and its queued calls with the cause, and kills this process. The
        request rides the worker's stream, behind the results of the calls that finished
        before it. Only the first of several threads that get here ends the actor."""
        if not self.exit_lock.acquire(blocking=False):
            while True:  # another thread is ending this process
                time.sleep(1.0)
        self.shut_down()
        class_name = STATE.current_actor._class_name if STATE.current_actor is not None else "actor"
        try:
            self.client.task_done(task_id, [], actor_exit=f"The actor {class_name} exited on purpose: {cause}")
            self.wait_to_be_killed()
        except BaseException:  # noqa: BLE001 - the agent is gone or killed us: nothing left to do
            pass
        finally:
            os._exit(0)

    def shut_down(self) -> None:
        """The actor's `__ray_shutdown__`, then the process's atexit handlers."""
        shutdown = getattr(self.actor, "__ray_shutdown__", None)
        if callable(shutdown):
            try:
                self.on_actor_thread(shutdown)
            except BaseException as e:  # noqa: BLE001 - the actor still ends
                print(f"(oxray) __ray_shutdown__ raised: {e!r}", file=sys.stderr)
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()

    def wait_to_be_killed(self) -> None:
        """Waiting on the stream sends what is queued on it; the agent's kill ends the wait (and
        this process). On a pool thread the main thread already waits on the stream (it reads it
        alone): wait aside."""
        deadline = time.monotonic() + _EXIT_WAIT_S
        on_main_thread = threading.current_thread() is threading.main_thread()
        while time.monotonic() < deadline:
            if on_main_thread:
                self.client.next_assignment(1.0)
            else:
                time.sleep(0.05)


def _method_of(actor, name: str):
    """The class's method `name` bound to the actor, as Ray resolves calls: an instance
    attribute of the same name (`self.called = False` beside `def called`) does not hide it."""
    own = type(actor).__dict__.get(name)
    if inspect.isfunction(own):  # defined on the class itself: every call's case, without the MRO walk
        return own.__get__(actor)
    static = inspect.getattr_static(type(actor), name, None)
    if inspect.isfunction(static):
        return static.__get__(actor)
    return getattr(actor, name)


def _start_event_loop(thread_name: str) -> asyncio.AbstractEventLoop:
    # Imported by the async actors that need it: a worker's start skips asyncio's ~50 ms import.
    import asyncio

    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name=thread_name, daemon=True).start()
    return loop
