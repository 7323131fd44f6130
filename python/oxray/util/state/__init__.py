"""`oxray.util.state`: Ray's State API client (`list_actors`, `list_nodes`,
`list_tasks`, `list_jobs`, `list_placement_groups`, `summarize_tasks`, and
`get_*` by id) over the head's `/api/v0/...` routes, returning Ray's row types
(`ActorState`, `NodeState`, ...) with the same fields, filters and limits.

The cluster: `address` (its HTTP address) or, as in Ray, `RAY_ADDRESS`; else
this driver's embedded cluster (whose head starts serving HTTP on first use),
else the cluster `oxray start --head` runs on this host."""

from __future__ import annotations

import warnings
from dataclasses import fields, make_dataclass
from typing import List, Optional, Tuple

from oxray._private import head_http
from oxray.util.state.exception import RayStateApiException

DEFAULT_LIMIT = 100
DEFAULT_RPC_TIMEOUT = 30

# Each row type's columns, in Ray's order (`ray.util.state.common`).
_COLUMNS = {
    "NodeState": "node_id node_ip is_head_node state state_message node_name resources_total labels start_time_ms "
    "end_time_ms",
    "ActorState": "actor_id class_name state job_id name node_id pid ray_namespace serialized_runtime_env "
    "required_resources death_cause is_detached placement_group_id repr_name num_restarts "
    "num_restarts_due_to_lineage_reconstruction num_restarts_due_to_node_preemption call_site label_selector "
    "fallback_strategy",
    "PlacementGroupState": "placement_group_id name creator_job_id state bundles is_detached stats topology_strategy "
    "topology_assignments",
    "JobState": "type job_id submission_id driver_info status entrypoint message error_type start_time end_time "
    "metadata runtime_env driver_agent_http_address driver_node_id driver_exit_code",
    "TaskState": "task_id attempt_number name state job_id actor_id type func_or_class_name parent_task_id node_id "
    "worker_id worker_pid error_type language required_resources runtime_env_info placement_group_id events "
    "profiling_data creation_time_ms start_time_ms end_time_ms task_log_info error_message is_debugger_paused "
    "call_site label_selector fallback_strategy",
}


def _row_type(name: str):
    columns = _COLUMNS[name].split()
    cls = make_dataclass(name, [(c, object, None) for c in columns])
    cls.__module__ = __name__

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    cls.__getitem__ = lambda self, key: getattr(self, key)
    cls.asdict = to_dict
    cls.__doc__ = f"One row of Ray's State API ({name}); a column left out (detail=False) is None."
    return cls


NodeState = _row_type("NodeState")
ActorState = _row_type("ActorState")
PlacementGroupState = _row_type("PlacementGroupState")
JobState = _row_type("JobState")
TaskState = _row_type("TaskState")

_RESOURCES = {
    "nodes": (NodeState, "node_id"),
    "actors": (ActorState, "actor_id"),
    "placement_groups": (PlacementGroupState, "placement_group_id"),
    "jobs": (JobState, "job_id"),
    "tasks": (TaskState, "task_id"),
}

Filter = Tuple[str, str, object]


def _params(filters: Optional[List[Filter]], limit: int, timeout: int, detail: bool):
    params = [("limit", limit), ("timeout", timeout), ("detail", str(bool(detail)).lower())]
    for f in filters or []:
        if not isinstance(f, (tuple, list)) or len(f) != 3:
            raise ValueError(f"The given filter {f!r} is not a (key, predicate, value) tuple")
        key, predicate, value = f
        if predicate not in ("=", "!="):
            raise ValueError(f"Unsupported filter predicate {predicate!r} is given. Available predicates: =, !=.")
        value = str(value) if not isinstance(value, bool) else str(value).lower()
        params += [("filter_keys", key), ("filter_predicates", predicate), ("filter_values", value)]
    return params


def _query(resource: str, path: str, address, params, timeout: int, raise_on_missing_output: bool) -> dict:
    url, headers = head_http.endpoint(address, f"list_{resource}")
    try:
        reply = head_http.get_json(url, headers, path, params, timeout=timeout)
    except RuntimeError as e:
        raise RayStateApiException(str(e)) from None
    if not reply.get("result"):
        raise RayStateApiException(f"API server error: {reply.get('msg')}")
    result = reply["data"]["result"]
    warning = result.get("partial_failure_warning")
    cut = result["total"] - result["num_after_truncation"]
    if raise_on_missing_output and (warning or cut):
        why = warning or f"{cut} of {result['total']} were cut at the source (it sends at most 10,000)"
        raise RayStateApiException(
            f"Failed to retrieve all {resource} from the cluster: {why}. "
            "To get what could be read, set raise_on_missing_output=False."
        )
    if warning:
        warnings.warn(warning, stacklevel=3)
    if cut:
        warnings.warn(f"{cut} of {result['total']} {resource} were cut at the source", stacklevel=3)
    return result


def _list(resource: str, address, filters, limit, timeout, detail, raise_on_missing_output) -> list:
    row_type, _ = _RESOURCES[resource]
    params = _params(filters, limit, timeout, detail)
    result = _query(resource, f"/api/v0/{resource}", address, params, timeout, raise_on_missing_output)
    if result["num_filtered"] > len(result["result"]):
        warnings.warn(
            f"{len(result['result'])} of {result['num_filtered']} {resource} are returned (limit={limit}): "
            "raise the limit or add filters to see the rest",
            stacklevel=3,
        )
    names = {f.name for f in fields(row_type)}
    return [row_type(**{k: v for k, v in row.items() if k in names}) for row in result["result"]]


def _get(resource: str, id: str, address, timeout):
    _, key = _RESOURCES[resource]
    rows = _list(resource, address, [(key, "=", id)], DEFAULT_LIMIT, timeout, True, True)
    return rows[0] if rows else None


def list_nodes(
    address=None,
    filters=None,
    limit=DEFAULT_LIMIT,
    timeout=DEFAULT_RPC_TIMEOUT,
    detail=False,
    raise_on_missing_output=True,
    _explain=False,
) -> List[NodeState]:
    """The cluster's nodes, alive and dead."""
    return _list("nodes", address, filters, limit, timeout, detail, raise_on_missing_output)


def list_actors(
    address=None,
    filters=None,
    limit=DEFAULT_LIMIT,
    timeout=DEFAULT_RPC_TIMEOUT,
    detail=False,
    raise_on_missing_output=True,
    _explain=False,
) -> List[ActorState]:
    """The cluster's actors, the last dead ones included."""
    return _list("actors", address, filters, limit, timeout, detail, raise_on_missing_output)


def list_placement_groups(
    address=None,
    filters=None,
    limit=DEFAULT_LIMIT,
    timeout=DEFAULT_RPC_TIMEOUT,
    detail=False,
    raise_on_missing_output=True,
    _explain=False,
) -> List[PlacementGroupState]:
    """The cluster's placement groups, the last removed ones included."""
    return _list("placement_groups", address, filters, limit, timeout, detail, raise_on_missing_output)


def list_jobs(
    address=None,
    filters=None,
    limit=DEFAULT_LIMIT,
    timeout=DEFAULT_RPC_TIMEOUT,
    detail=False,
    raise_on_missing_output=True,
    _explain=False,
) -> List[JobState]:
    """Submitted jobs and drivers started by hand."""
    return _list("jobs", address, filters, limit, timeout, detail, raise_on_missing_output)


def list_tasks(
    address=None,
    filters=None,
    limit=DEFAULT_LIMIT,
    timeout=DEFAULT_RPC_TIMEOUT,
    detail=False,
    raise_on_missing_output=True,
    _explain=False,
) -> List[TaskState]:
    """Tasks running, waiting, and the last ones that ended on each node (newest first)."""
    return _list("tasks", address, filters, limit, timeout, detail, raise_on_missing_output)


def get_node(id: str, address=None, timeout=DEFAULT_RPC_TIMEOUT, _explain=False) -> Optional[NodeState]:
    return _get("nodes", id, address, timeout)


def get_actor(id: str, address=None, timeout=DEFAULT_RPC_TIMEOUT, _explain=False) -> Optional[ActorState]:
    return _get("actors", id, address, timeout)


def get_placement_group(id: str, address=None, timeout=DEFAULT_RPC_TIMEOUT, _explain=False):
    return _get("placement_groups", id, address, timeout)


def get_job(id: str, address=None, timeout=DEFAULT_RPC_TIMEOUT, _explain=False) -> Optional[JobState]:
    return _get("jobs", id, address, timeout)


def get_task(id: str, address=None, timeout=DEFAULT_RPC_TIMEOUT, _explain=False) -> Optional[TaskState]:
    """The task's latest attempt."""
    return _get("tasks", id, address, timeout)


def summarize_tasks(address=None, timeout=DEFAULT_RPC_TIMEOUT, raise_on_missing_output=True, _explain=False) -> dict:
    """Tasks counted by state per function name: `{"cluster": {"summary": {...}, "total_tasks", ...}}`."""
    params = [("timeout", timeout), ("summary_by", "func_name")]
    result = _query("tasks", "/api/v0/tasks/summarize", address, params, timeout, raise_on_missing_output)
    return result["result"]["node_id_to_summary"]


def list_logs(address=None, node_id=None, node_ip=None, glob_filter="*", timeout=DEFAULT_RPC_TIMEOUT, _interval=None):
    """A node's log files by category (`{"worker_out": [...], "jobs": [...]}`)."""
    if not node_id and not node_ip:
        raise ValueError("list_logs() needs node_id or node_ip (list_nodes() gives them)")
    url, headers = head_http.endpoint(address, "list_logs")
    params = [(k, v) for k, v in (("node_id", node_id), ("node_ip", node_ip), ("glob", glob_filter)) if v]
    try:
        reply = head_http.get_json(url, headers, "/api/v0/logs", params, timeout=timeout)
    except RuntimeError as e:
        raise RayStateApiException(str(e)) from None
    return reply["data"]["result"]


def get_log(
    address=None,
    node_id=None,
    node_ip=None,
    filename=None,
    actor_id=None,
    task_id=None,
    pid=None,
    follow=False,
    tail=1000,
    timeout=DEFAULT_RPC_TIMEOUT,
    suffix="out",
    encoding="utf-8",
    errors="strict",
    submission_id=None,
    attempt_number=0,
    _interval=None,
    filter_ansi_code=False,
):
    """A log's last `tail` lines (-1: all), named by file and node, worker pid and node,
    actor id, or job submission id. Yields the text (bytes with `encoding=None`); with
    `follow=True`, then what the log gains, until the caller stops."""
    if task_id is not None:
        raise ValueError("get_log(task_id=...) is not supported by oxray: ask by actor_id, pid or filename")
    import urllib.error
    import urllib.parse
    import urllib.request

    url, headers = head_http.endpoint(address, "get_log")
    params = {"node_id": node_id, "node_ip": node_ip, "filename": filename, "actor_id": actor_id, "pid": pid}
    params.update({"submission_id": submission_id, "lines": tail})
    query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
    media = "stream" if follow else "file"
    request = urllib.request.Request(f"{url}/api/v0/logs/{media}?{query}", headers=headers)
    try:
        # A followed log has no end: no timeout on reading it.
        reply = urllib.request.urlopen(request, timeout=None if follow else timeout, context=head_http.tls_context())
    except urllib.error.HTTPError as e:
        raise RayStateApiException(e.read().decode(errors="replace")) from None
    with reply:
        while True:
            data = reply.read1(1 << 16) if follow else reply.read()
            if not data:
                return
            yield data if encoding is None else data.decode(encoding, errors=errors)
            if not follow:
                return


__all__ = [
    "ActorState",
    "JobState",
    "NodeState",
    "PlacementGroupState",
    "TaskState",
    "get_actor",
    "get_log",
    "get_job",
    "get_node",
    "get_placement_group",
    "get_task",
    "list_actors",
    "list_jobs",
    "list_logs",
    "list_nodes",
    "list_placement_groups",
    "list_tasks",
    "summarize_tasks",
]
