"""The worker process: takes assignments from its node agent and runs them."""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import importlib
import inspect
import os
import signal
import socket
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

import cloudpickle

from oxray import _native, exceptions
from oxray._native import TaskKind
from oxray._private import serialization
from oxray._private.actor import (
    RECLAIM_METHOD,
    RECLAIMED_CAUSE,
    ActorExitRequest,
    ActorHandle,
    is_async_class,
    public_methods,
)
from oxray._private.generator import StreamEnd, is_streaming_task, stream_item_id, yielded_values
from oxray._private.object_ref import ObjectRef
from oxray._private.state import CURRENT, STATE, run_after_task


class _UserCode:
    """Runs a task's user code; a non-force cancel (SIGINT) interrupts only there.

    A SIGINT carries no task id, and may arrive outside user code: while the
    assignment is read or its arguments unpickled, or just after a task ended
    (meant for it, not for the next). So an interrupt is only raised once the
    agent confirms that the task running now is cancelled, and one that came
    outside user code is remembered and checked when user code starts.
    """

    client = None
    running = False
    interrupted = False  # a SIGINT came outside user code, not checked yet

    def __enter__(self):
        _UserCode.running = True
        if _UserCode.interrupted:
            _UserCode.interrupted = False
            _raise_if_cancelled()

    def __exit__(self, *exc):
        _UserCode.running = False


def _raise_if_cancelled():
    task_id = getattr(CURRENT, "task_id", None)
    try:
        cancelled = task_id is not None and _UserCode.client.task_cancelled(task_id)
    except _native.OxrayRpcError:
        cancelled = True  # the agent is gone: stop, as the cancel asked
    if cancelled:
        raise KeyboardInterrupt


def _on_sigint(signum, frame):
    if _UserCode.running:
        _raise_if_cancelled()
    else:
        _UserCode.interrupted = True


# Frames of the worker itself (this loop, argument unpacking), left out of the
# tracebacks users see, as in Ray.
_RUNTIME_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _user_traceback(e: BaseException) -> str:
    """Ray's remote traceback text: user code's frames only, each chained exception's
    too, and oxray's exception classes under Ray's name (`ray.exceptions.RayTaskError`)."""
    top = traceback.TracebackException(type(e), e, e.__traceback__)
    todo, seen = [top], set()
    while todo:
        te = todo.pop()
        if id(te) in seen:
            continue
        seen.add(id(te))
        te.stack = _user_frames(te.stack)
        todo.extend(t for t in (te.__cause__, te.__context__, *(getattr(te, "exceptions", None) or ())) if t)
    ours = exceptions.__name__ + "."
    text = "".join(
        "ray.exceptions." + chunk[len(ours) :] if chunk.startswith(ours) else chunk for chunk in top.format()
    )
    # The first line becomes the `ray::f() (pid=..)` header, even with no frame to show.
    return text if text.startswith("Traceback ") else "Traceback (most recent call last):\n" + text


class _DependencyFailed(Exception):
    """An argument's object holds an error (its task failed): this task fails with it."""

    def __init__(self, error: BaseException):
        super().__init__(error)
        self.error = error


def _constructed(e: BaseException):
    """The instance whose `__init__` raised `e` (the outermost `__init__` frame's `self`)."""
    tb = e.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "__init__" and not frame.f_code.co_filename.startswith(_RUNTIME_DIR):
            return frame.f_locals.get("self")
        tb = tb.tb_next
    return None


def _user_frames(stack):
    """The frames of a stack users see: the worker's own (anywhere) and the standard library's
    that lead from them into user code are left out. An error raised by the runtime itself
    (no user frame) keeps every frame: they are all there is."""
    stdlib = os.path.dirname(os.__file__) + os.sep
    runtime = [f.filename.startswith(_RUNTIME_DIR) for f in stack]
    library = [f.filename.startswith(stdlib) and "-packages" not in f.filename for f in stack]
    first_user = next((i for i, f in enumerate(stack) if not runtime[i] and not library[i]), None)
    if first_user is None:
        return stack
    drop_lead = any(runtime[:first_user])
    kept = [f for i, f in enumerate(stack) if not runtime[i] and (i >= first_user or not drop_lead)]
    return traceback.StackSummary.from_list(kept)


class Worker:
    def __init__(self, client):
        self.client = client
        self.actor = None
        self.pool = None
        self.ip = socket.gethostbyname("localhost")
        # GPUs and resources are assigned when an actor is created and hold for all its calls.
        self.actor_gpus = ""
        self.actor_resources = {}
        self.actor_captures_children = False
        # Calls of each function with `max_calls` this worker has run.
        self.calls = {}
        self.actor_env = {}
        self.group_pools = {}
        self.method_groups = {}
        self.qualified_names = {}
        self.actor_function_prefix = ""
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
        # The modules imported before the running task (refreshed only when the count
        # changed), to clean up after a cancel that cuts an import short.
        self.modules_before = set(sys.modules)

    def load(self, function_id):
        fn = STATE.functions.get(function_id)
        if fn is None:
            fn, qualname = cloudpickle.loads(self.client.get_function(function_id))
            if qualname is not None and inspect.isclass(fn):
                fn.__qualname__ = qualname  # see `submission.function_id_for`
            STATE.functions[function_id] = fn
        return fn

    def qualified_name_of(self, function_id, fn) -> str:
        """A function's `module.qualname` (the runtime context's), worked out once per function."""
        name = self.qualified_names[function_id] = _qualified_name(fn)
        return name

    def run(self, a: _native.Assignment):
        kind = a.kind
        if kind == TaskKind.ACTOR_CREATION:
            self.actor_gpus = _node_gpu_names(a.cuda_visible_devices)
            self.actor_resources = dict(a.resources)
            self.actor_captures_children = a.capture_child_tasks
        # An actor's calls run on the GPUs it was created with.
        gpus = self.actor_gpus if kind == TaskKind.ACTOR_TASK else _node_gpu_names(a.cuda_visible_devices)
        CURRENT.task_id = a.task_id
        CURRENT.job_id = a.job_id
        # The job of threads the task starts (they do not see CURRENT): the worker's latest.
        STATE.job_id = a.job_id
        CURRENT.task_name = a.name
        if self.pool is None:  # one call at a time: the title names it (Ray's `ray::f`, `ray::A.m`)
            _native.set_process_title(f"ray::{a.name}")
        resources = self.actor_resources if kind == TaskKind.ACTOR_TASK else a.resources  # a fresh dict
        CURRENT.resources = resources
        CURRENT.capture_child_tasks = (
            self.actor_captures_children if kind == TaskKind.ACTOR_TASK else a.capture_child_tasks
        )
        CURRENT.function_name = f"{self.actor_function_prefix}.{a.method_name}" if kind == TaskKind.ACTOR_TASK else None
        STATE.functions_generation = a.functions_generation
        if kind != TaskKind.ACTOR_TASK:
            # `get_actor(name)` and the runtime context look in the job's namespace
            # (an actor keeps its creator's).
            STATE.namespace = a.job_namespace
        CURRENT.cuda_visible_devices = gpus
        if len(sys.modules) != len(self.modules_before):
            self.modules_before = set(sys.modules)
        saved_env = {}
        env = dict(a.env_vars)
        if kind == TaskKind.ACTOR_CREATION:
            self.actor_env = dict(env)
        CURRENT.env_vars = self.actor_env if kind == TaskKind.ACTOR_TASK else dict(env)
        noset_cuda = _truthy(env[_NOSET_CUDA]) if _NOSET_CUDA in env else _NOSET_CUDA_AT_START
        if "CUDA_VISIBLE_DEVICES" in env and not noset_cuda:
            env["CUDA_VISIBLE_DEVICES"] = gpus  # the GPUs given win over the job's own setting
        else:
            # Left set between tasks (each sets its own), so a run of tasks does not rewrite the environment.
            _set_env_if_changed("CUDA_VISIBLE_DEVICES", _CUDA_AT_START if noset_cuda else gpus)
        if kind != TaskKind.ACTOR_TASK and "OMP_NUM_THREADS" not in env and not _USER_OMP_NUM_THREADS:
            _set_env_if_changed("OMP_NUM_THREADS", _omp_threads(resources))
        if kind != TaskKind.ACTOR_CREATION:
            for k, v in env.items():
                saved_env[k] = os.environ.get(k)
                os.environ[k] = v
        else:
            os.environ.update(env)
        # The job's import path (its working_dir, py_modules, pip packages) for this task;
        # an actor keeps it.
        added_paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
        if added_paths:
            sys.path[:0] = added_paths
            importlib.invalidate_caches()
        if kind == TaskKind.ACTOR_CREATION:
            added_paths = []
        returns_ids = a.return_ids
        name = a.name
        method_names = []
        try:
            try:
                args = [serialization.deserialize(b, False) for b in a.args]
            except exceptions.RayError as e:
                raise _DependencyFailed(e) from None
            kwarg_names = a.kwarg_names
            n_kw = len(kwarg_names)
            kwargs = dict(zip(kwarg_names, args[len(args) - n_kw :], strict=True)) if n_kw else {}
            positional = args[: len(args) - n_kw]
            if kind == TaskKind.NORMAL:
                fn = self.load(a.function_id)
                CURRENT.function_name = self.qualified_names.get(a.function_id) or self.qualified_name_of(
                    a.function_id, fn
                )
                with _UserCode():
                    result = fn(*positional, **kwargs)
                    if is_streaming_task(a.task_id, returns_ids):
                        result = self.stream(a, result, name)
            elif kind == TaskKind.ACTOR_CREATION:
                cls = self.load(a.function_id)
                STATE.actor_id = a.actor_id
                self.creation_task_id = a.task_id
                is_async = is_async_class(cls)
                # As Ray names them: an async actor's methods by their full `__qualname__`.
                async_name = f"{cls.__module__ or '__main__'}.{cls.__qualname__}"
                self.actor_function_prefix = async_name if is_async else _qualified_name(cls)
                CURRENT.function_name = f"{self.actor_function_prefix}.__init__"
                _native.set_process_title(f"ray::{cls.__name__}.__init__")  # Ray's title while it is built
                if is_async:
                    # As in Ray, an async actor's `__init__` runs on its event loop (it may start tasks there).
                    STATE.async_actor = True
                    self.event_loop = _start_event_loop("oxray-actor-loop")
                    self.group_loops = {
                        name: _start_event_loop(f"oxray-actor-loop-{name}") for name in a.concurrency_groups
                    }
                with _UserCode():
                    self.actor = self.on_actor_thread(lambda: cls(*positional, **kwargs))
                method_names = [
                    n for n in dir(self.actor) if callable(getattr(self.actor, n, None)) and not n.startswith("__")
                ]
                STATE.current_actor = ActorHandle(a.actor_id, cls.__name__, public_methods(cls))
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
                result = None
            else:
                if a.cancelled_before_start or self.cancelled_before_start(a.task_id):
                    raise asyncio.CancelledError(f"{name} was cancelled before it started")
                result = self.call_method(a.method_name, positional, kwargs)
                if is_streaming_task(a.task_id, returns_ids):
                    result = self.stream(a, result, name)
            if STATE.actor_exit_cause:  # the call caught what `exit_actor()` raised: the actor still ends
                raise ActorExitRequest(STATE.actor_exit_cause)
            prepared, nested = self.prepare_returns(returns_ids, result, name)
            self.client.task_done(a.task_id, prepared, False, nested, method_names, retire=self.retires_after(a))
        except ActorExitRequest as e:
            self.exit_actor(a.task_id, e.cause)
        except SystemExit as e:
            # User code called sys.exit(): as in Ray, the worker process exits. The node agent sees
            # a worker die, so the task is retried, or the actor restarted, as their options allow.
            _exit_process(e.code)
        except BaseException as e:  # noqa: BLE001 - every failure becomes the task's error
            if STATE.actor_exit_cause:  # `exit_actor()` in an async actor raises AsyncioActorExit
                self.exit_actor(a.task_id, STATE.actor_exit_cause)
            if kind != TaskKind.ACTOR_TASK:
                _UserCode.running = False  # an interrupt may have cut `__enter__`/`__exit__` short
            if isinstance(e, KeyboardInterrupt):
                self.forget_half_imported()
            if self.stopped_by_cancel(a, e):
                # As in Ray: a running task stopped by `cancel()` fails with RayTaskError(TaskCancelledError).
                e = exceptions.TaskCancelledError(f"Task: TaskID({a.task_id.hex()}) was cancelled.")
            try:
                self.report_error(a, returns_ids, name, e)
            except BaseException as report_failure:  # noqa: BLE001 - the task must still be reported
                print(f"(oxray) could not report the failure of {name}: {report_failure!r}", file=sys.stderr)
                self.client.task_done(a.task_id, [], True, [], [], str(e))
        finally:
            for p in added_paths:
                if p in sys.path:
                    sys.path.remove(p)
            for k, v in saved_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            CURRENT.task_id = None
            if kind == TaskKind.ACTOR_TASK and self.calls_here:
                with self.calls_lock:
                    self.calls_here.discard(a.task_id)
                    self.cancelled_calls.discard(a.task_id)
                    self.calls_lock.notify_all()
            if self.pool is None:
                _native.set_process_title(self.idle_title())

    def stream(self, a, gen, name) -> StreamEnd:
        """Runs a streaming task's generator, sealing each value as its item as it is
        yielded. A failure keeps the items made before it alive: they are pinned to the
        error the caller gets after them."""
        if not (inspect.isgenerator(gen) or inspect.isasyncgen(gen)):
            raise TypeError(
                f"{name} was called with num_returns='streaming' but returned {type(gen).__name__}, "
                "not a generator: yield its values, or declare it with num_returns=1"
            )
        items = []
        try:
            for value in yielded_values(gen, self.loop_here(), CURRENT.fields()):
                items.append(self.seal_item(a, len(items), value, name))
        except BaseException as e:
            try:
                e._oxray_stream_items = [ref._id for ref in items]
            except AttributeError:
                pass
            raise
        return StreamEnd(items)

    def seal_item(self, a, index: int, value, name) -> ObjectRef:
        item_id = stream_item_id(a.return_ids[0], index)
        data, buffers, nested = serialization.serialize(value, f"item {index} yielded by {name}")
        ref = ObjectRef(item_id, a.task_id)
        try:
            prepared = self.client.prepare(item_id, data, buffers, serialization.FLAG_VALUE)
            self.client.seal(prepared, nested)
        except _native.OxrayRpcError as e:
            # A retried attempt yields what an earlier one delivered: the first copy stays.
            if "already exists" not in str(e):
                raise
        return ref

    def idle_title(self) -> str:
        """Ray's title between calls: `ray::IDLE` for a pool worker, `ray::<Class>` for an actor."""
        actor = STATE.current_actor
        return f"ray::{actor._class_name}" if actor is not None else "ray::IDLE"

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

    def stopped_by_cancel(self, a, e: BaseException) -> bool:
        """Whether `e` is how a cancel stopped this call: a task's interrupt (raised only once
        the agent confirmed the cancel), or an async actor call's CancelledError."""
        if a.kind == TaskKind.NORMAL:
            return isinstance(e, KeyboardInterrupt)
        if a.kind == TaskKind.ACTOR_TASK and isinstance(e, (asyncio.CancelledError, concurrent.futures.CancelledError)):
            with self.calls_lock:
                return a.task_id in self.cancelled_calls
        return False

    def cancelled_before_start(self, task_id: bytes) -> bool:
        if not self.cancelled_calls:
            return False
        with self.calls_lock:
            return task_id in self.cancelled_calls

    def exit_actor(self, task_id: bytes, cause: str):
        """Ends this actor on purpose (`exit_actor()`, `__ray_terminate__`): its
        `__ray_shutdown__` and atexit handlers run, then the agent marks it dead for
        good (no restart), failing the call that asked (`task_id`; the creation task's when
        no call asked) and its queued calls with the cause, and kills this process. The
        request rides the worker's stream, behind the results of the calls that finished
        before it. Only the first of several threads that get here ends the actor."""
        if not self.exit_lock.acquire(blocking=False):
            while True:  # another thread is ending this process
                time.sleep(1.0)
        shutdown = getattr(self.actor, "__ray_shutdown__", None)
        if callable(shutdown):
            try:
                self.on_actor_thread(shutdown)
            except BaseException as e:  # noqa: BLE001 - the actor still ends
                print(f"(oxray) __ray_shutdown__ raised: {e!r}", file=sys.stderr)
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        class_name = STATE.current_actor._class_name if STATE.current_actor is not None else "actor"
        try:
            self.client.task_done(task_id, [], actor_exit=f"The actor {class_name} exited on purpose: {cause}")
            # Waiting on the stream sends it; the agent's kill ends the wait (and this process). On a
            # pool thread the main thread already waits on the stream (it reads it alone): wait aside.
            deadline = time.monotonic() + _EXIT_WAIT_S
            on_main_thread = threading.current_thread() is threading.main_thread()
            while time.monotonic() < deadline:
                if on_main_thread:
                    self.client.next_assignment(1.0)
                else:
                    time.sleep(0.05)
        except BaseException:  # noqa: BLE001 - the agent is gone or killed us: nothing left to do
            pass
        finally:
            os._exit(0)

    def submit_call(self, a) -> None:
        """Hands a call to its concurrency group's threads (the default group's: `self.pool`)."""
        with self.calls_lock:
            self.calls_here.add(a.task_id)
        group = a.concurrency_group or self.method_groups.get(a.method_name, "")
        if not group:
            self.pool.submit(self.run, a)
        elif group == SYSTEM_CONCURRENCY_GROUP:
            self.system_pool().submit(self.run_in_group, group, a)
        elif group in self.group_pools:
            self.group_pools[group].submit(self.run_in_group, group, a)
        else:
            error = ValueError(
                f"{a.name}: concurrency group {group!r} is not one of the actor's "
                f"({', '.join(sorted(self.group_pools)) or 'it has none'}): declare it with "
                "@remote(concurrency_groups={...})"
            )
            self.report_error(a, a.return_ids, a.name, error)

    def system_pool(self) -> ThreadPoolExecutor:
        """Ray's `_ray_system` concurrency group, which every actor has: one thread of its own,
        so a call sent there runs beside the actor's other calls."""
        with self.calls_lock:
            if SYSTEM_CONCURRENCY_GROUP not in self.group_pools:
                self.group_pools[SYSTEM_CONCURRENCY_GROUP] = ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix=f"oxray-group-{SYSTEM_CONCURRENCY_GROUP}"
                )
            return self.group_pools[SYSTEM_CONCURRENCY_GROUP]

    def run_in_group(self, group: str, a) -> None:
        self.group_of_thread.name = group  # `on_actor_thread` runs an async call on the group's loop
        self.run(a)

    def retires_after(self, a) -> bool:
        """Whether this call reaches its function's `max_calls` here: the worker then
        exits (the agent sends it no other task), freeing what the function held."""
        if a.kind != TaskKind.NORMAL or a.max_calls <= 0:
            return False
        count = self.calls.get(a.function_id, 0) + 1
        self.calls[a.function_id] = count
        return count >= a.max_calls

    def forget_half_imported(self):
        """A cancel (KeyboardInterrupt) that cut an import short leaves the package's
        finished submodules behind without the package: importing it again would then
        fail for the rest of this worker's life (pandas: "Option ... has already been
        registered"). Those orphans are dropped, so the next import starts clean."""
        for name in set(sys.modules) - self.modules_before:
            if name.partition(".")[0] not in sys.modules:
                sys.modules.pop(name, None)

    def prepare_returns(self, return_ids, result, name):
        if len(return_ids) == 0:
            return [], []
        if len(return_ids) == 1:
            values = [result]
        else:
            # A generator with a fixed num_returns (Ray's static generator): its values are the returns.
            is_sequence = isinstance(result, (list, tuple)) or inspect.isgenerator(result)
            values = list(result) if is_sequence else None
            if values is None or len(values) != len(return_ids):
                raise ValueError(
                    f"Task {name} declared num_returns={len(return_ids)} but returned {result!r}; "
                    f"return a tuple or list of {len(return_ids)} values"
                )
        prepared, nested = [], []
        for rid, value in zip(return_ids, values, strict=True):
            data, buffers, inner = serialization.serialize(value, f"the return value of {name}")
            prepared.append(self.client.prepare(rid, data, buffers, serialization.FLAG_VALUE))
            nested.extend(inner)
        return prepared, nested

    def error_fields(self, a, name, e) -> dict:
        """The parts of a task error's `ray::f() (pid=.., ip=.., actor_id=.., repr=..)` header
        besides pid and ip: Ray's process title (a function's plain name unless the task was
        named) and, for an actor, its id and repr."""
        kind = a.kind
        if kind == TaskKind.NORMAL:
            try:
                fn = self.load(a.function_id)  # not yet loaded when an argument failed
            except Exception:  # noqa: BLE001 - the function itself may be what failed to load
                fn = None
            if fn is not None and name == getattr(fn, "__qualname__", None):
                name = getattr(fn, "__name__", name)
            return {"proctitle": f"ray::{name}"}
        if kind == TaskKind.ACTOR_CREATION:
            name = f"{name}.__init__"
            instance = _constructed(e)  # its constructor failed: only its own frame holds it
        else:
            instance = self.actor
        if instance is None:  # it never ran (an argument failed): name the class
            cls = STATE.functions.get(a.function_id)
            actor_repr = f"<{_qualified_name(cls)} object>" if cls is not None else name
        else:
            try:
                actor_repr = repr(instance)
            except Exception:  # noqa: BLE001 - a __repr__ that needs what the constructor never set
                actor_repr = object.__repr__(instance)
        return {"proctitle": f"ray::{name}", "actor_repr": actor_repr, "actor_id": a.actor_id.hex()}

    def report_error(self, a, return_ids, name, e):
        if isinstance(e, _DependencyFailed):
            # As Ray: the note, then the input's own error (which the caller gets as the cause).
            e = e.error
            traceback_str = (
                "Traceback (most recent call last):\n"
                "  At least one of the input arguments for this task could not be computed:\n"
                f"{exceptions.type_name(type(e))}: {e}"
            )
        else:
            traceback_str = _user_traceback(e)
        fields = self.error_fields(a, name, e)
        # As Ray: a task error raised here (by a `get()` in user code, or a failed input) is not
        # nested: its cause becomes this error's, so callers still catch the root exception's class.
        cause = e.cause if isinstance(e, exceptions.RayTaskError) else e
        error = exceptions.RayTaskError(name, traceback_str, cause, pid=os.getpid(), ip=self.ip, **fields)
        try:
            data = serialization.serialize_error(error)
        except Exception:  # noqa: BLE001 - a cause that pickles but its error does not: send the text
            error = exceptions.RayTaskError(name, traceback_str, None, pid=os.getpid(), ip=self.ip, **fields)
            data = serialization.serialize_error(error)
        ids = return_ids or [os.urandom(16)]
        prepared = [self.client.prepare(rid, data, [], serialization.FLAG_APPLICATION_ERROR) for rid in ids]
        if not return_ids:
            prepared = []
        # The agent keeps a failed constructor's text as the actor's death cause (Ray's wording).
        text = exceptions.CREATION_TASK_FAILED + str(error) if a.kind == TaskKind.ACTOR_CREATION else str(error)
        retryable = not a.retry_exception_types or isinstance(e, cloudpickle.loads(a.retry_exception_types))
        # A streaming task's items made before the failure live as long as its error.
        stream_items = list(getattr(e, "_oxray_stream_items", ()))
        self.client.task_done(
            a.task_id,
            prepared,
            True,
            stream_items,
            [],
            text,
            retire=self.retires_after(a),
            not_retryable=not retryable,
        )

    def loop(self):
        preload = _preload_names()
        while True:
            if STATE.actor_exit_cause:
                # `exit_actor()` outside any call (an async actor's background task), as Ray checks
                # between tasks: the actor ends now.
                self.exit_actor(self.creation_task_id, STATE.actor_exit_cause)
            try:
                a = self.client.next_assignment(_IDLE_BEFORE_PRELOAD_S if preload else 1.0)
            except KeyboardInterrupt:
                continue  # a cancel that arrived between tasks
            except _native.OxrayRpcError:
                return  # the agent is gone
            if a is not None and a.exit:
                return  # retired: its function's max_calls reached
            if a is not None and a.cancel_task_id:
                self.cancel_call(a.cancel_task_id)
                continue
            if a is None:
                if preload:
                    _preload(preload)
                    preload = []
                continue
            if a.kind == TaskKind.ACTOR_TASK and (self.pool is not None or a.concurrency_group):
                self.submit_call(a)  # threads of its own, or a call to a group this actor lacks
            else:
                try:
                    self.run(a)
                except KeyboardInterrupt:
                    continue
                except _native.OxrayRpcError:
                    return  # the agent is gone
                run_after_task()


# Ray's concurrency group that every actor has, beside those it declares.
SYSTEM_CONCURRENCY_GROUP = "_ray_system"

# How long an actor that ended itself waits for its agent to kill it before it exits alone.
_EXIT_WAIT_S = 30.0

# Ray's: set, the workers leave CUDA_VISIBLE_DEVICES as it is (get_gpu_ids() still names the GPUs given).
_NOSET_CUDA = "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"
# An OMP_NUM_THREADS the node's environment already sets wins, as in Ray.
_USER_OMP_NUM_THREADS = "OMP_NUM_THREADS" in os.environ


def _truthy(value) -> bool:
    return str(value or "").strip().lower() not in ("", "0", "false", "no")


# Read once: the worker's own environment does not change under it.
_NOSET_CUDA_AT_START = _truthy(os.environ.get(_NOSET_CUDA))
_CUDA_AT_START = os.environ.get("CUDA_VISIBLE_DEVICES")
# The node's own CUDA_VISIBLE_DEVICES (workers inherit it): the GPUs it counts are these, in order.
STATE.preset_gpu_ids = [x.strip() for x in (_CUDA_AT_START or "").split(",") if x.strip()]


def _node_gpu_names(indices: str) -> str:
    """The GPUs given (indices among those the node counts) as CUDA names them: as in Ray, when the
    node was started with CUDA_VISIBLE_DEVICES set (`2,3`, or GPU UUIDs), index i is its i-th entry."""
    preset = STATE.preset_gpu_ids
    if not indices or not preset:
        return indices
    names = []
    for index in indices.split(","):
        index = index.strip()
        names.append(preset[int(index)] if index.isdigit() and int(index) < len(preset) else index)
    return ",".join(names)


def _method_of(actor, name: str):
    """The class's method `name` bound to the actor, as Ray resolves calls: an instance
    attribute of the same name (`self.called = False` beside `def called`) does not hide it."""
    static = inspect.getattr_static(type(actor), name, None)
    if inspect.isfunction(static):
        return static.__get__(actor)
    return getattr(actor, name)


def _exit_process(code) -> None:
    """Ends this worker at once, as `sys.exit(code)` would end a plain Python process."""
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)


def _set_env_if_changed(name: str, value: str | None) -> None:
    """Sets (or, for None, unsets) one variable, skipping the write when it already holds that."""
    if os.environ.get(name) != value:
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _omp_threads(resources) -> str:
    """Ray's OMP_NUM_THREADS for a task or actor: its whole CPUs, at least 1, so
    numeric libraries do not each start a thread per core of the machine."""
    cpus = resources.get("CPU")
    if cpus is None:  # drawn from a placement group (`CPU_group_<pg>`), or no CPUs asked for
        from oxray._private.options import requested_names

        cpus = requested_names(resources).get("CPU", 1)
    return str(max(1, int(cpus)))


def _start_event_loop(thread_name: str) -> asyncio.AbstractEventLoop:
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name=thread_name, daemon=True).start()
    return loop


def _qualified_name(obj) -> str:
    """Ray's function name for the runtime context: `module.name` (`module.Class` for an actor's
    class), without the enclosing function of one defined inside another."""
    return f"{getattr(obj, '__module__', None) or '__main__'}.{getattr(obj, '__name__', repr(obj))}"


# Modules a worker imports once it has been idle for `_IDLE_BEFORE_PRELOAD_S`, so
# the first task that needs them does not pay the import: numpy's alone is 60-110
# ms, which was most of a worker's "first read" of an ndarray. The import runs on
# the worker's main thread between tasks, never beside one: two threads importing
# numpy at once can see it partially initialized. `OXRAY_WORKER_PRELOAD` is a
# comma-separated list; empty turns preloading off.
_DEFAULT_PRELOAD = "numpy"
_IDLE_BEFORE_PRELOAD_S = 0.25


def _preload_names():
    return [n.strip() for n in os.environ.get("OXRAY_WORKER_PRELOAD", _DEFAULT_PRELOAD).split(",") if n.strip()]


def _preload(names):
    import importlib.util

    for name in names:
        try:
            if importlib.util.find_spec(name) is None:
                if "OXRAY_WORKER_PRELOAD" in os.environ:
                    print(f"oxray: OXRAY_WORKER_PRELOAD names {name!r}, which is not installed", file=sys.stderr)
                continue
            importlib.import_module(name)
        except Exception as e:  # a broken optional module must not take the worker down
            print(f"oxray: preloading {name!r} failed: {type(e).__name__}: {e}", file=sys.stderr)


def main():
    client = _native.Client(
        os.environ["OXRAY_AGENT_ADDRESS"], os.environ["OXRAY_TOKEN"], bytes.fromhex(os.environ["OXRAY_WORKER_ID"])
    )
    STATE.epoch += 1
    STATE.client = client
    STATE.mode = "worker"
    STATE.worker_id = client.client_id
    STATE.node_id = os.environ.get("OXRAY_NODE_ID", "")
    STATE.driver_task_id = b""
    # The token is not needed past this point; keep it out of user code's environment.
    os.environ.pop("OXRAY_TOKEN", None)
    _UserCode.client = client
    signal.signal(signal.SIGINT, _on_sigint)
    client.worker_connect()
    _native.set_process_title("ray::IDLE")
    Worker(client).loop()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
