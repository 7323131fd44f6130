"""`get_runtime_context()`: what the code runs in: its job, node, task, actor,
resources and namespace, as Ray's `RuntimeContext` gives them."""

from __future__ import annotations

import json
import warnings
from typing import Any, Dict, List, Optional

from oxray._private.ids import ActorID, JobID, NodeID, TaskID, WorkerID
from oxray._private.state import CURRENT, STATE, current_job_id


class RuntimeContext:
    """The `get_*()` methods return hex strings; the `*_id` properties (deprecated in
    Ray, still used) return id objects with `.hex()`."""

    def get(self) -> Dict[str, Any]:
        """A dict of this context: job_id, node_id and namespace, plus task_id and
        actor_id inside a task or actor (id objects, as in Ray)."""
        node = NodeID(bytes.fromhex(STATE.node_id)) if STATE.node_id else NodeID.nil()
        context: Dict[str, Any] = {"job_id": JobID(current_job_id()), "node_id": node, "namespace": self.namespace}
        if STATE.mode == "worker":
            if CURRENT.task_id:
                context["task_id"] = TaskID(CURRENT.task_id)
            if STATE.actor_id:
                context["actor_id"] = ActorID(STATE.actor_id)
        return context

    def get_job_id(self) -> str:
        return current_job_id().hex()

    def get_node_id(self) -> str:
        return STATE.node_id

    def get_worker_id(self) -> str:
        return STATE.worker_id.hex() if STATE.worker_id else ""

    def get_task_id(self) -> Optional[str]:
        """The running task's id; None in a driver (Ray's)."""
        if STATE.mode != "worker" or not CURRENT.task_id:
            return None
        return CURRENT.task_id.hex()

    def get_session_name(self) -> str:
        """The cluster's session, the same on every node: the head's session directory name."""
        import os

        for node in STATE.client.cluster_info():
            if node.is_head and node.session_dir:
                return os.path.basename(node.session_dir.rstrip("/"))
        return ""

    def get_placement_group_id(self) -> Optional[str]:
        """The placement group the running task or actor was placed in; None outside one."""
        from oxray.util.placement_group import get_current_placement_group

        pg = get_current_placement_group()
        return pg.id.hex() if pg is not None else None

    @property
    def current_placement_group_id(self):
        from oxray._private.ids import PlacementGroupID

        _deprecated("current_placement_group_id", "get_placement_group_id()")
        pg_hex = self.get_placement_group_id()
        return PlacementGroupID(bytes.fromhex(pg_hex)) if pg_hex else PlacementGroupID.nil()

    def get_actor_id(self) -> Optional[str]:
        return STATE.actor_id.hex() if STATE.mode == "worker" and STATE.actor_id else None

    def get_actor_name(self) -> Optional[str]:
        if STATE.mode != "worker" or not STATE.actor_id:
            return None
        info = STATE.client.get_actor_info(STATE.actor_id)
        # As Ray: "" in an unnamed actor, None outside any actor.
        return info.name if info is not None else ""

    def get_task_name(self) -> Optional[str]:
        """The running task's name (its `name=` option, else the function's or `Class.method`)."""
        return CURRENT.task_name if STATE.mode == "worker" else None

    def get_task_function_name(self) -> Optional[str]:
        """The running task's function, fully qualified: `module.f`, `module.Actor.method`."""
        return CURRENT.function_name if STATE.mode == "worker" else None

    def get_assigned_resources(self) -> Dict[str, float]:
        """What the running task or actor holds, e.g. {"CPU": 1.0} (also when drawn from a
        placement group's bundle). A driver holds nothing."""
        if STATE.mode != "worker":
            raise RuntimeError("get_assigned_resources() is only meaningful inside a task or actor, not in a driver")
        # `accelerator_type` is a constraint on the node, not something the task holds.
        return {k: v for k, v in (CURRENT.resources or {}).items() if not k.startswith("accelerator_type:")}

    def get_accelerator_ids(self) -> Dict[str, List[str]]:
        from oxray._private.api import get_gpu_ids

        return {"GPU": [str(g) for g in get_gpu_ids()]}

    @property
    def current_actor(self):
        """The handle of the actor this code runs in."""
        if STATE.mode != "worker" or STATE.current_actor is None:
            raise RuntimeError("current_actor is only available inside an actor")
        return STATE.current_actor

    @property
    def was_current_actor_reconstructed(self) -> bool:
        """Whether this actor has been restarted since it was first created."""
        if STATE.mode != "worker" or not STATE.actor_id:
            raise AssertionError("This method should't be called inside Ray tasks.")
        info = STATE.client.get_actor_info(STATE.actor_id)
        return bool(info is not None and info.num_restarts > 0)

    @property
    def should_capture_child_tasks_in_placement_group(self) -> bool:
        from oxray.util.placement_group import _captures_child_tasks

        return _captures_child_tasks()

    def is_canceled(self) -> bool:
        """Whether the running task or sync actor call has been cancelled (for code that
        polls instead of being interrupted). An async actor's calls are cancelled on their
        event loop instead, so there it raises, as in Ray."""
        if STATE.mode != "worker" or not CURRENT.task_id:
            raise RuntimeError("is_canceled() is only meaningful inside a task")
        if STATE.async_actor:
            raise RuntimeError(
                "This method is not supported in an async actor. An async call is cancelled with "
                "asyncio.CancelledError raised where it awaits."
            )
        return STATE.client.task_cancelled(CURRENT.task_id)

    def get_dashboard_url(self) -> str:
        """The head's HTTP address (dashboard and Jobs API), "" when it serves none."""
        from oxray._private import head_http

        url = STATE.address_info.get("dashboard_url") or (head_http.local_cluster(serve=False) or {}).get(
            "dashboard_url"
        )
        return url.split("://", 1)[-1] if url else ""

    def get_runtime_env_string(self) -> str:
        return json.dumps(STATE.runtime_env)

    def get_node_labels(self) -> Dict[str, str]:
        """This node's labels (`ray.io/node-id` included)."""
        for node in STATE.client.cluster_info():
            if node.node_id == STATE.node_id:
                return dict(node.labels)
        return {}

    @property
    def namespace(self) -> str:
        return STATE.namespace

    def get_namespace(self) -> str:
        return STATE.namespace

    @property
    def gcs_address(self) -> str:
        return STATE.address_info.get("address", "")

    @property
    def job_id(self) -> JobID:
        _deprecated("job_id", "get_job_id()")
        return JobID(current_job_id())

    @property
    def node_id(self) -> NodeID:
        _deprecated("node_id", "get_node_id()")
        return self.get()["node_id"]

    @property
    def task_id(self) -> Optional[TaskID]:
        _deprecated("task_id", "get_task_id()")
        return TaskID(CURRENT.task_id) if STATE.mode == "worker" and CURRENT.task_id else None

    @property
    def actor_id(self) -> Optional[ActorID]:
        _deprecated("actor_id", "get_actor_id()")
        return ActorID(STATE.actor_id) if STATE.mode == "worker" and STATE.actor_id else None

    @property
    def worker_id(self) -> WorkerID:
        return WorkerID(STATE.worker_id)


def _deprecated(name: str, instead: str) -> None:
    warnings.warn(
        f"RuntimeContext.{name} is deprecated (as in Ray). Use {instead} instead.",
        DeprecationWarning,
        stacklevel=3,
    )


def get_runtime_context() -> RuntimeContext:
    """The context of the code that calls it; starts a local cluster when none is running, as Ray does."""
    from oxray._private.api import _client

    if STATE.mode != "worker":
        _client()
    return RuntimeContext()
