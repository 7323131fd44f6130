"""What a worker's task runs under, set before it runs and restored after.

A task runs with its runtime context (`CURRENT`'s fields: ids, names, resources, GPUs,
env vars), its runtime_env's environment variables and import path, the GPUs and CPU
threads it was given (CUDA_VISIBLE_DEVICES, OMP_NUM_THREADS) and, once the agent
confirms a cancel, a SIGINT that interrupts its user code (`UserCode`). The worker
(`worker_main.Worker.task_environment`) puts these together around each task.
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
    capture_child_tasks: bool = False
    # The runtime_env's env_vars: work the task submits inherits them, as in Ray.
    env_vars: dict = field(default_factory=dict)


def placement_of(a: _native.Assignment) -> Placement:
    """What an assignment itself gives its task."""
    return Placement(
        _node_gpu_names(a.cuda_visible_devices), dict(a.resources), a.capture_child_tasks, dict(a.env_vars)
    )


def set_runtime_context(a: _native.Assignment, placement: Placement, function_name: str | None) -> None:
    """The runtime context's fields for task `a` (see `state._CurrentTask`)."""
    CURRENT.task_id = a.task_id
    CURRENT.job_id = a.job_id
    # The job of threads the task starts (they do not see CURRENT): the worker's latest.
    STATE.job_id = a.job_id
    CURRENT.task_name = a.name
    CURRENT.resources = placement.resources
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


def apply_environment(a: _native.Assignment, placement: Placement) -> Callable[[], None]:
    """Sets task `a`'s environment variables and import path; returns the call that restores
    them once it is done. An actor's creation task leaves its own set for all its calls."""
    env = dict(a.env_vars)
    set_device_variables(env, a.kind, placement)
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


# ---- CUDA_VISIBLE_DEVICES and OMP_NUM_THREADS ---------------------------------------------
# Every rule for the two variables the worker works out itself is in this section, so that
# it can go as a whole once the engine sets them.

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


def set_device_variables(env: dict, kind, placement: Placement) -> None:
    """CUDA_VISIBLE_DEVICES and OMP_NUM_THREADS for a task: into `env` (its runtime_env's
    variables, set after this) where it sets them itself, else into the worker's environment."""
    gpus = placement.gpus
    noset_cuda = _truthy(env[_NOSET_CUDA]) if _NOSET_CUDA in env else _NOSET_CUDA_AT_START
    if "CUDA_VISIBLE_DEVICES" in env and not noset_cuda:
        env["CUDA_VISIBLE_DEVICES"] = gpus  # the GPUs given win over the job's own setting
    else:
        # Left set between tasks (each sets its own), so a run of tasks does not rewrite the environment.
        _set_env_if_changed("CUDA_VISIBLE_DEVICES", _CUDA_AT_START if noset_cuda else gpus)
    if kind != TaskKind.ACTOR_TASK and "OMP_NUM_THREADS" not in env and not _USER_OMP_NUM_THREADS:
        _set_env_if_changed("OMP_NUM_THREADS", _omp_threads(placement.resources))


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
