"""The worker process: takes assignments from its node agent and runs them.

Each task runs under its task environment (`Worker.enter_task_environment`, see `task_environment`);
an actor's creation and calls go to the worker's actor host (`actor_host.ActorHost`).
"""

from __future__ import annotations

import concurrent.futures
import inspect
import os
import signal
import sys
import time
import traceback

import cloudpickle

from oxray import _native, exceptions
from oxray._native import TaskKind
from oxray._private import serialization
from oxray._private.actor import ActorExitRequest
from oxray._private.actor_host import ActorHost
from oxray._private.generator import StreamEnd, is_streaming_task, stream_item_id, yielded_values
from oxray._private.object_ref import ObjectRef
from oxray._private.state import CURRENT, STATE, run_after_task
from oxray._private.task_environment import (
    UserCode,
    adopt_setproctitle,
    apply_environment,
    on_sigint,
    placement_of,
    qualified_name,
    set_process_title,
    set_runtime_context,
)

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


def _is_cancellation(e: BaseException) -> bool:
    """A cancelled call's error; asyncio's only when something (an async actor) has imported it."""
    asyncio = sys.modules.get("asyncio")
    return isinstance(e, concurrent.futures.CancelledError) or (
        asyncio is not None and isinstance(e, asyncio.CancelledError)
    )


class Worker:
    def __init__(self, client):
        self.client = client
        # The actor this worker hosts, once an actor creation task came.
        self.actors = ActorHost(client)
        # The node's address (`--node-ip-address`), as a task error's header names it in Ray.
        self.ip = os.environ.get("OXRAY_AGENT_ADDRESS", "127.0.0.1:0").rsplit(":", 1)[0].strip("[]")
        # Calls of each function with `max_calls` this worker has run.
        self.calls = {}
        self.qualified_names = {}
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
            adopt_setproctitle()  # the function's module may have imported it just now
        return fn

    def qualified_name_of(self, function_id, fn) -> str:
        """A function's `module.qualname` (the runtime context's), worked out once per function."""
        name = self.qualified_names[function_id] = qualified_name(fn)
        return name

    def run(self, a: _native.Assignment, *, after_task: bool = False):
        """Runs assignment `a` under its task environment; with `after_task`, the calls
        `after_this_task` asked for run once that environment is closed, the task's arguments
        and results dropped (not after a failure to run it)."""
        # Plain enter/leave rather than a generator context manager: this is every call's path.
        restore_environment = self.enter_task_environment(a)
        try:
            self.execute(a)
        finally:
            self.leave_task_environment(a, restore_environment)
        if after_task:
            run_after_task()

    def enter_task_environment(self, a: _native.Assignment):
        """Sets what task `a` runs under (see `task_environment`): the runtime context, its env
        vars and import path, the process title, and the modules to forget should a cancel cut
        an import short. Returns what `leave_task_environment` restores."""
        if a.kind == TaskKind.ACTOR_TASK:
            placement = self.actors.placement  # an actor's calls run on what it was created with
        else:
            placement = placement_of(a)
        if a.kind == TaskKind.ACTOR_CREATION:
            self.actors.placement = placement
        set_runtime_context(a, placement, self.actors.function_name(a) if a.kind == TaskKind.ACTOR_TASK else None)
        if self.actors.pool is None:  # one call at a time: the title names it (Ray's `ray::f`, `ray::A.m`)
            set_process_title(f"ray::{a.name}")
        if len(sys.modules) != len(self.modules_before):
            self.modules_before = set(sys.modules)
        return apply_environment(a)

    def leave_task_environment(self, a: _native.Assignment, restore_environment) -> None:
        """Restores what `enter_task_environment` set for task `a`."""
        if restore_environment is not None:
            restore_environment()
        CURRENT.task_id = None
        if a.kind == TaskKind.ACTOR_TASK:
            self.actors.call_ended(a.task_id)
        if self.actors.pool is None:
            set_process_title(self.idle_title())

    def execute(self, a: _native.Assignment) -> None:
        """Runs task `a` and reports how it ended: its results, its error, or its actor's exit."""
        try:
            result, method_names = self.call(a)
            if STATE.actor_exit_cause:  # the call caught what `exit_actor()` raised: the actor still ends
                raise ActorExitRequest(STATE.actor_exit_cause)
            prepared, nested = self.prepare_returns(a.return_ids, result, a.name)
            self.client.task_done(a.task_id, prepared, False, nested, method_names, retire=self.retires_after(a))
        except ActorExitRequest as e:
            self.actors.exit(a.task_id, e.cause)
        except SystemExit as e:
            # User code called sys.exit(): as in Ray, the worker process exits. The node agent sees
            # a worker die, so the task is retried, or the actor restarted, as their options allow.
            _exit_process(e.code)
        except BaseException as e:  # noqa: BLE001 - every failure becomes the task's error
            self.fail(a, e)

    def call(self, a: _native.Assignment):
        """Runs task `a`'s code: its result, and the method names of the actor it created."""
        args, kwargs = _arguments(a)
        if a.kind == TaskKind.NORMAL:
            return self.call_function(a, args, kwargs), []
        if a.kind == TaskKind.ACTOR_CREATION:
            return None, self.actors.create(a, self.load(a.function_id), args, kwargs)
        result = self.actors.call(a, args, kwargs)
        if is_streaming_task(a.task_id, a.return_ids):
            result = self.stream(a, result, a.name)
        return result, []

    def call_function(self, a: _native.Assignment, args, kwargs):
        fn = self.load(a.function_id)
        CURRENT.function_name = self.qualified_names.get(a.function_id) or self.qualified_name_of(a.function_id, fn)
        with UserCode():
            result = fn(*args, **kwargs)
            if is_streaming_task(a.task_id, a.return_ids):
                result = self.stream(a, result, a.name)
        return result

    def fail(self, a: _native.Assignment, e: BaseException) -> None:
        """Reports task `a`'s failure, `e`, as its error (an actor's exit asked for first)."""
        if STATE.actor_exit_cause:  # `exit_actor()` in an async actor raises AsyncioActorExit
            self.actors.exit(a.task_id, STATE.actor_exit_cause)
        if a.kind != TaskKind.ACTOR_TASK:
            UserCode.running = False  # an interrupt may have cut `__enter__`/`__exit__` short
        if isinstance(e, KeyboardInterrupt):
            self.forget_half_imported()
        if self.stopped_by_cancel(a, e):
            # As in Ray: a running task stopped by `cancel()` fails with RayTaskError(TaskCancelledError).
            e = exceptions.TaskCancelledError(f"Task: TaskID({a.task_id.hex()}) was cancelled.")
        try:
            self.report_error(a, a.return_ids, a.name, e)
        except BaseException as report_failure:  # noqa: BLE001 - the task must still be reported
            print(f"(oxray) could not report the failure of {a.name}: {report_failure!r}", file=sys.stderr)
            self.client.task_done(a.task_id, [], True, [], [], str(e))

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
            for value in yielded_values(gen, self.actors.loop_here(), CURRENT.fields()):
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

    def stopped_by_cancel(self, a, e: BaseException) -> bool:
        """Whether `e` is how a cancel stopped this call: a task's interrupt (raised only once
        the agent confirmed the cancel), or an async actor call's CancelledError."""
        if a.kind == TaskKind.NORMAL:
            return isinstance(e, KeyboardInterrupt)
        if a.kind == TaskKind.ACTOR_TASK and _is_cancellation(e):
            return self.actors.was_cancelled(a.task_id)
        return False

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
            instance = self.actors.actor
        if instance is None:  # it never ran (an argument failed): name the class
            cls = STATE.functions.get(a.function_id)
            actor_repr = f"<{qualified_name(cls)} object>" if cls is not None else name
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
        exit_seen = None
        while True:
            timeout = _IDLE_BEFORE_PRELOAD_S if preload else None
            if STATE.actor_exit_cause:
                # `exit_actor()` (it woke this loop): a call that made it ends the actor itself,
                # failing that call. Outside any call (an async actor's background task), or
                # when the calls running do not end soon, the actor ends from here.
                exit_seen = exit_seen or time.monotonic()
                if not self.actors.calls_running() or time.monotonic() - exit_seen > _EXIT_FROM_LOOP_AFTER_S:
                    self.actors.exit(self.actors.creation_task_id, STATE.actor_exit_cause)
                timeout = 0.05
            try:
                # No timeout once the preloads are done: an idle worker sleeps until the agent
                # (or `exit_actor()`, through `wake_worker_loop`) has something for it.
                a = self.client.next_assignment(timeout)
            except KeyboardInterrupt:
                continue  # a cancel that arrived between tasks
            except _native.OxrayRpcError:
                return  # the agent is gone
            if a is not None and a.exit:
                return  # retired: its function's max_calls reached
            if a is not None and a.cancel_task_id:
                self.actors.cancel_call(a.cancel_task_id)
                continue
            if a is None:
                if preload and not self.actors.creation_task_id:
                    _preload(preload)
                preload = []
                continue
            if a.kind == TaskKind.ACTOR_TASK and (self.actors.pool is not None or a.concurrency_group):
                # Threads of its own, or a call to a group this actor lacks.
                self.actors.submit(a, self.run, self.report_error)
            else:
                try:
                    self.run(a, after_task=True)
                except KeyboardInterrupt:
                    continue
                except _native.OxrayRpcError:
                    return  # the agent is gone


def _arguments(a: _native.Assignment):
    """Task `a`'s positional and keyword arguments, unpickled (an argument whose object holds
    an error fails the task with it)."""
    try:
        args = [serialization.deserialize(b, False) for b in a.args]
    except exceptions.RayError as e:
        raise _DependencyFailed(e) from None
    kwarg_names = a.kwarg_names
    n_kw = len(kwarg_names)
    kwargs = dict(zip(kwarg_names, args[len(args) - n_kw :], strict=True)) if n_kw else {}
    return args[: len(args) - n_kw], kwargs


def _exit_process(code) -> None:
    """Ends this worker at once, as `sys.exit(code)` would end a plain Python process."""
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)


# Modules a pool worker imports once it has been idle for `_IDLE_BEFORE_PRELOAD_S`, so
# the first task that needs them does not pay the import: numpy's alone is 60-110
# ms, which was most of a worker's "first read" of an ndarray. An actor's worker does not:
# a thousand actors would spend a minute of CPU importing numpy most of them never use. The import runs on
# the worker's main thread between tasks, never beside one: two threads importing
# numpy at once can see it partially initialized. `OXRAY_WORKER_PRELOAD` is a
# comma-separated list; empty turns preloading off.
_DEFAULT_PRELOAD = "numpy"
# How long the calls running when `exit_actor()` was called outside them may go on before the
# worker's loop ends the actor anyway.
_EXIT_FROM_LOOP_AFTER_S = 1.0
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
    UserCode.client = client
    signal.signal(signal.SIGINT, on_sigint)
    client.worker_connect()
    set_process_title("ray::IDLE")
    Worker(client).loop()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
