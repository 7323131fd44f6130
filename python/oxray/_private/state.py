"""Per-process state: the client of this process's node agent and what runs now."""

from __future__ import annotations

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
    lock: threading.RLock = field(default_factory=threading.RLock)


STATE = ProcessState()


class _ThreadTask(threading.local):
    """The task running on this thread (actors with max_concurrency run several).
    Class defaults make a lookup on a thread with no task cheap: submissions read
    the job on every call, and a missing attribute costs a raised AttributeError."""

    task_id: Optional[bytes] = None
    job_id: Optional[bytes] = None
    cuda_visible_devices: str = ""


CURRENT = _ThreadTask()


def current_task_id() -> bytes:
    return getattr(CURRENT, "task_id", None) or STATE.driver_task_id


def current_job_id() -> bytes:
    """The job of the task running on this thread (a worker), else the driver's:
    work submitted from a task belongs to its job and ends with its driver."""
    return getattr(CURRENT, "job_id", None) or STATE.job_id


def current_gpu_ids() -> str:
    return getattr(CURRENT, "cuda_visible_devices", "")
