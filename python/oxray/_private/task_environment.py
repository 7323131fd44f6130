"""What a worker's task runs under, set before it runs and restored after.

A task runs with its runtime context (`CURRENT`'s fields: ids, names, resources, GPUs,
placement group, env vars), its environment variables and import path and, once the
agent confirms a cancel, a SIGINT that interrupts its user code (`UserCode`). The
variables come ready-made in the assignment: its runtime_env's, and the GPUs and CPU
threads it was given (CUDA_VISIBLE_DEVICES, OMP_NUM_THREADS), which the engine works
out (`oxray-runtime/src/task_env.rs`). The worker (`worker_main.Worker.enter_task_environment`)
puts these together around each task.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass, field
from typing import Callable

from oxray import _native
from oxray._native import TaskKind
from oxray._private.state import CURRENT, STATE

# ---- Cancellation: a SIGINT interrupts user code only -------------------------------------


class UserCode:
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
        UserCode.running = True
        if UserCode.interrupted:
            UserCode.interrupted = False
            _raise_if_cancelled()

    def __exit__(self, *exc):
        UserCode.running = False


def _raise_if_cancelled():
    task_id = getattr(CURRENT, "task_id", None)
    try:
        cancelled = task_id is not None and UserCode.client.task_cancelled(task_id)
    except _native.OxrayRpcError:
        cancelled = True  # the agent is gone: stop, as the cancel asked
    if cancelled:
        raise KeyboardInterrupt


def on_sigint(signum, frame):
    if UserCode.running:
        _raise_if_cancelled()
    else:
        UserCode.interrupted = True


# ---- The runtime context ------------------------------------------------------------------


@dataclass
class Placement:
    """What a task runs with. An actor's calls keep what its creation task was given."""

    gpus: str = ""  # the GPUs given, as CUDA names them
    resources: dict = field(default_factory=dict)
    placement_group_id: bytes | None = None
    capture_child_tasks: bool = False
    # The runtime_env's env_vars: work the task submits inherits them, as in Ray.
    env_vars: dict = field(default_factory=dict)


# The process title last set (what `setproctitle.getproctitle()` reads in a worker).
_title = [""]


def set_process_title(title: str) -> None:
    """Ray's process title (`ray::IDLE`, `ray::f`, `ray::Actor.method`), written over the process's
    argv and thread name. The `setproctitle` module cannot find argv once it was written over, so
    in a worker that imported it, its `getproctitle`/`setproctitle` read and set this title, as
    they do in Ray's workers."""
    _title[0] = title
    _native.set_process_title(title)
    adopt_setproctitle()


def adopt_setproctitle() -> None:
    """Points an imported `setproctitle` module at this process's title (see `set_process_title`)."""
    module = sys.modules.get("setproctitle")
    if module is not None and getattr(module, "getproctitle", None) is not _getproctitle:
        module.getproctitle = _getproctitle
        module.setproctitle = set_process_title


def _getproctitle() -> str:
    return _title[0]


def placement_of(a: _native.Assignment) -> Placement:
    """What an assignment itself gives its task (the record's map getters each return a fresh dict)."""
    return Placement(a.cuda_visible_devices, a.resources, a.placement_group_id, a.capture_child_tasks, a.env_vars)


def set_runtime_context(a: _native.Assignment, placement: Placement, function_name: str | None) -> None:
    """The runtime context's fields for task `a` (see `state._CurrentTask`)."""
    CURRENT.task_id = a.task_id
    CURRENT.job_id = a.job_id
    # The job of threads the task starts (they do not see CURRENT): the worker's latest.
    STATE.job_id = a.job_id
    CURRENT.task_name = a.name
    CURRENT.resources = placement.resources
    CURRENT.placement_group_id = placement.placement_group_id
    CURRENT.capture_child_tasks = placement.capture_child_tasks
    CURRENT.function_name = function_name
    STATE.functions_generation = a.functions_generation
    if a.kind != TaskKind.ACTOR_TASK:
        # `get_actor(name)` and the runtime context look in the job's namespace
        # (an actor keeps its creator's).
        STATE.namespace = a.job_namespace
    CURRENT.cuda_visible_devices = placement.gpus
    CURRENT.env_vars = placement.env_vars


def qualified_name(obj) -> str:
    """Ray's function name for the runtime context: `module.name` (`module.Class` for an actor's
    class), without the enclosing function of one defined inside another."""
    return f"{getattr(obj, '__module__', None) or '__main__'}.{getattr(obj, '__name__', repr(obj))}"


# ---- Environment variables and the import path --------------------------------------------

# The node's own CUDA_VISIBLE_DEVICES, which workers inherit: when set, `get_gpu_ids()` returns the
# GPUs' names (the engine names them by its entries) as strings rather than indices, as in Ray.
STATE.preset_gpu_ids = [x.strip() for x in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if x.strip()]


def apply_environment(a: _native.Assignment) -> Callable[[], None] | None:
    """Sets task `a`'s environment variables and import path; returns the call that restores
    them once it is done (None: nothing to restore). An actor's creation task leaves its own
    set for all its calls."""
    # Left set after the task (each task sets its own), so a run of tasks does not rewrite them.
    for name, value in a.kept_env.items():
        _set_env_if_changed(name, value)
    env = a.task_env
    saved_env = {}
    if a.kind != TaskKind.ACTOR_CREATION:
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
    if a.kind == TaskKind.ACTOR_CREATION:
        added_paths = []
    if not saved_env and not added_paths:
        return None

    def restore() -> None:
        for p in added_paths:
            if p in sys.path:
                sys.path.remove(p)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    return restore


def _set_env_if_changed(name: str, value: str | None) -> None:
    """Sets (or, for None, unsets) one variable, skipping the write when it already holds that."""
    if os.environ.get(name) != value:
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
