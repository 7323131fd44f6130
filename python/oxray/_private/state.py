"""Per-process state: the client of this process's node agent and what runs now."""

from __future__ import annotations

import contextvars
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class ProcessState:
    client: Any = None
    cluster: Any = None  # the embedded cluster, when this driver started one
    published: Optional[str] = None  # the record that lets other drivers join the embedded cluster
    mode: Optional[str] = None  # "driver" or "worker"
    epoch: int = 0  # bumps on every init, so refs from an old session are ignored
    job_id: bytes = b""
    node_id: str = ""
    namespace: str = ""
    driver_task_id: bytes = b""
    worker_id: bytes = b""
    actor_id: bytes = b""
    functions: dict = field(default_factory=dict)
    # The agent's count of function drops, from the last assignment (workers):
    # a function registered under an older count may be gone, so it is sent again.
    functions_generation: int = 0
    registered: set = field(default_factory=set)
    runtime_env: dict = field(default_factory=dict)
    # A submitted job's driver gives its tasks and actors its import path (its
    # working_dir, py_modules and pip virtualenv, which the Jobs server set up).
    job_env_vars: dict = field(default_factory=dict)
    address_info: dict = field(default_factory=dict)
    # In an actor's worker: the handle of the actor it runs (the runtime context's).
    current_actor: Any = None
    # This worker hosts an actor with `async def` methods (its calls run on an event loop).
    async_actor: bool = False
    # A worker's node was started with CUDA_VISIBLE_DEVICES set: its entries, which name the GPUs given.
    preset_gpu_ids: list = field(default_factory=list)
    # (epoch, preload) of the worker templates this driver asked its node to start (a session's own).
    warmed_templates: set = field(default_factory=set)
    # Set by `exit_actor()`: the actor ends after the call that asked (or between calls).
    actor_exit_cause: str = ""
    # A worker's calls to make once the running task's results are stored (`after_this_task`).
    after_task: list = field(default_factory=list)
    lock: threading.RLock = field(default_factory=threading.RLock)


STATE = ProcessState()


def after_this_task(fn) -> None:
    """In a worker, calls `fn` once the running task's results are stored and its arguments and
    locals dropped (once per task, however often asked); elsewhere, never."""
    if STATE.mode == "worker" and fn not in STATE.after_task:
        STATE.after_task.append(fn)


def run_after_task() -> None:
    """The calls `after_this_task` asked for, each once; a failing one is reported, not raised."""
    calls, STATE.after_task = STATE.after_task, []
    for fn in calls:
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - housekeeping must not stop the worker
            print(f"(oxray) after-task call {fn!r} failed: {e!r}", file=sys.stderr)


class _ContextField:
    """One attribute of `CURRENT`, kept in a context variable: each thread has its
    own, and so has each asyncio task (an async actor runs many calls on one thread)."""

    def __init__(self, name: str, default):
        self._var = contextvars.ContextVar(f"oxray_current_{name}", default=default)

    def __get__(self, obj, owner=None):
        return self if obj is None else self._var.get()

    def __set__(self, obj, value):
        self._var.set(value)


class _CurrentTask:
    """The task running in this thread or asyncio task (actors with max_concurrency
    run several at once)."""

    __slots__ = ()
    task_id = _ContextField("task_id", None)
    job_id = _ContextField("job_id", None)
    cuda_visible_devices = _ContextField("cuda_visible_devices", "")
    # The task's display name and its function's qualified name (the runtime context's).
    task_name = _ContextField("task_name", None)
    function_name = _ContextField("function_name", None)
    # Work it submits with no scheduling strategy goes into its placement group.
    capture_child_tasks = _ContextField("capture_child_tasks", False)
    # What the task holds, as it asked for it (`CPU`, also in a placement group's bundle).
    resources = _ContextField("resources", None)
    # The placement group it runs in (its id's bytes), if any.
    placement_group_id = _ContextField("placement_group_id", None)
    # The task's (or its actor's) runtime_env env_vars: work it submits inherits them, as in Ray.
    env_vars = _ContextField("env_vars", None)

    def fields(self) -> dict:
        return {name: getattr(self, name) for name, v in vars(type(self)).items() if isinstance(v, _ContextField)}

    def restore(self, fields: dict) -> None:
        for name, value in fields.items():
            setattr(self, name, value)


CURRENT = _CurrentTask()


def current_task_id() -> bytes:
    return CURRENT.task_id or STATE.driver_task_id


def current_job_id() -> bytes:
    """The job of the task running on this thread (a worker), else the driver's:
    work submitted from a task belongs to its job and ends with its driver."""
    return CURRENT.job_id or STATE.job_id


def current_gpu_ids() -> str:
    return CURRENT.cuda_visible_devices
