"""The top-level calls: init/shutdown, get/put/wait, cancel/kill and cluster views."""

from __future__ import annotations

import atexit
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from oxray import _native, exceptions
from oxray._private import node_files, serialization
from oxray._private import options as opts
from oxray._private.generator import ObjectRefGenerator
from oxray._private.object_ref import ObjectRef
from oxray._private.state import STATE

# Worker output is printed through sys.stdout/sys.stderr until the interpreter exits; registered
# first, this runs last, after shutdown() (see oxray-py's `output.rs`).
atexit.register(_native.print_output_raw)


def _is_local_host(host: str) -> bool:
    import socket

    if host in ("localhost", "") or host.startswith("127."):
        return True
    # An address of this host (of its network namespace) is one a socket can bind to: unlike the
    # host name's addresses, this holds for every interface, in a container or namespace too.
    try:
        addresses = socket.getaddrinfo(host, None, proto=socket.IPPROTO_UDP)
    except OSError:
        return False
    for family, kind, _, _, sockaddr in addresses:
        try:
            with socket.socket(family, kind) as probe:
                probe.bind((sockaddr[0], 0))
            return True
        except OSError:
            continue
    return False


def _local_agent(address: str, token: str) -> str:
    """This host's node agent in the cluster at `address`: objects are read
    through shared memory, so a driver talks to the agent on its own host."""
    host = address.rsplit(":", 1)[0]
    if _is_local_host(host):
        return address
    try:
        nodes = _native.Client(address, token).cluster_info()
    except Exception as e:
        raise ConnectionError(f"Cannot join the cluster at {address}: {e}") from e
    for n in nodes:
        if n.alive and _is_local_host(n.ip):
            return n.address
    raise ConnectionError(
        f"No node of the cluster at {address} runs on this host: start one with `oxray start --address={address}`"
    )


def is_initialized() -> bool:
    return STATE.client is not None


def _check_count(name, value):
    if value is None:
        return
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
        raise ValueError(f"init() argument {name!r} must be a number >= 0, got {value!r}")


def init(
    address: Optional[str] = None,
    *,
    num_cpus: Optional[float] = None,
    num_gpus: Optional[int] = None,
    resources: Optional[dict] = None,
    object_store_memory: Optional[int] = None,
    namespace: Optional[str] = None,
    runtime_env: Optional[dict] = None,
    ignore_reinit_error: bool = False,
    include_dashboard: Optional[bool] = None,
    log_to_driver: bool = True,
    logging_level: Any = None,
    _memory: Optional[int] = None,
    job_config=None,
    **kwargs,
):
    """Starts an embedded cluster (head + node agent in this process), or joins
    the one at `address` / `OXRAY_ADDRESS`."""
    if STATE.client is not None:
        if ignore_reinit_error:
            return RayContext(STATE.address_info)
        raise RuntimeError(
            "Maybe you called oxray.init twice by accident? This error can be suppressed by passing "
            "ignore_reinit_error=True or by calling oxray.shutdown() before oxray.init()."
        )
    request = _InitRequest(
        address=address,
        num_cpus=num_cpus,
        num_gpus=num_gpus,
        resources=resources,
        object_store_memory=object_store_memory,
        memory=_memory,
        namespace=namespace,
        runtime_env=runtime_env,
        include_dashboard=include_dashboard,
        log_to_driver=log_to_driver,
        job_config=job_config,
        options=kwargs,
    )
    _resolve(request, logging_level)
    agent_address, token = _start(request) if request.embedded else _join(request)
    _become_driver(request, agent_address, token)
    if os.environ.get("OXRAY_TORCH_TEMPLATE_AT_INIT", "1") != "0" and (
        "torch" in sys.modules or "oxray.train.torch" in sys.modules
    ):
        # A script that imported torch first (as Ray's Train guides do) will likely start
        # TorchTrainer workers: their template imports torch while the script goes on.
        from oxray.train._internal.worker_group import warm_torch_workers_if_imported

        warm_torch_workers_if_imported()
    if "oxray.tune" in sys.modules:
        # A script that imported Tune first will likely run trials: their actors' template
        # imports Tune while the script goes on.
        from oxray.tune._internal.trial_template import warm_trial_template_if_imported

        warm_trial_template_if_imported()
    return RayContext(STATE.address_info)


@dataclass
class _InitRequest:
    """What init() was asked for; `_resolve` checks it and works out the rest."""

    address: Optional[str]
    num_cpus: Optional[float]
    num_gpus: Optional[int]
    resources: Optional[dict]
    object_store_memory: Optional[int]
    memory: Optional[int]
    namespace: Optional[str]
    runtime_env: Optional[dict]
    include_dashboard: Optional[bool]
    log_to_driver: bool
    job_config: Any
    options: dict  # init()'s other keyword arguments
    labels: Optional[dict] = None
    level: int = 0  # the library loggers' level
    dashboard: Optional[tuple] = None  # (host, port) of the embedded head's HTTP server
    env_vars: dict = field(default_factory=dict)  # the runtime_env's env_vars

    @property
    def embedded(self) -> bool:
        """Whether this driver starts a cluster of its own (else it joins `address`)."""
        return self.address in (None, "", "local")


def _resolve(request: _InitRequest, logging_level) -> None:
    """init()'s first step: the arguments checked (Ray's errors, in Ray's order), then the
    address resolved, which says whether a cluster starts here or one is joined."""
    _refuse_unsupported_init_options(request.options)
    _apply_job_config(request)
    request.labels = request.options.pop("labels", None)
    _check_options(request)
    request.level = _logging_level(logging_level)
    _check_resources(request)
    opts.validate_runtime_env(request.runtime_env)
    if request.namespace is not None:
        opts.validate_namespace(request.namespace)
    request.address = _resolve_address(request.address)
    request.env_vars = opts.env_vars({"runtime_env": request.runtime_env})
    request.dashboard = _dashboard_request(request.include_dashboard, request.options, request.embedded)


def _apply_job_config(request: _InitRequest) -> None:
    """A JobConfig's namespace and runtime_env, where init()'s own arguments do not set them."""
    job_config = request.job_config
    if job_config is None:
        return
    from oxray.job_config import JobConfig

    if not isinstance(job_config, JobConfig):
        raise TypeError(f"init(job_config=...) expects a JobConfig, got {type(job_config).__name__}")
    if request.namespace is None:
        request.namespace = job_config.ray_namespace
    if request.runtime_env is None:
        request.runtime_env = job_config.runtime_env or None


def _check_options(request: _InitRequest) -> None:
    unknown = set(request.options) - {"dashboard_host", "dashboard_port", "configure_logging", "_temp_dir"}
    if unknown:
        raise TypeError(f"init() got unexpected keyword argument(s) {sorted(unknown)}")
    labels = request.labels
    if labels is not None:
        if not isinstance(labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
        ):
            raise TypeError(f"init(labels={labels!r}): expected a dict of label name -> value")
    if not isinstance(request.log_to_driver, bool):
        raise TypeError(f"init(log_to_driver={request.log_to_driver!r}): expected True or False")


def _check_resources(request: _InitRequest) -> None:
    num_gpus, resources = request.num_gpus, request.resources
    for name, value in (
        ("num_cpus", request.num_cpus),
        ("num_gpus", num_gpus),
        ("object_store_memory", request.object_store_memory),
    ):
        _check_count(name, value)
    if num_gpus is not None and int(num_gpus) != num_gpus:
        raise ValueError(f"init() argument 'num_gpus' must be a whole number, got {num_gpus!r}")
    if resources is not None:
        if not isinstance(resources, dict):
            raise TypeError(f"init() argument 'resources' must be a dict, got {resources!r}")
        for k, v in resources.items():
            _check_count(f"resources[{k!r}]", v)


def _resolve_address(address: Optional[str]) -> Optional[str]:
    """None and "auto": the address in the environment, then the cluster `oxray start`
    runs on this host; "auto" also joins one another driver's init() started (as
    in Ray). "auto" stays when there is none (joining it raises), None starts one."""
    if address not in (None, "auto"):
        return address
    auto = address == "auto"
    address = os.environ.get("OXRAY_ADDRESS") or os.environ.get("RAY_ADDRESS")
    if not address:
        current = node_files.find_local_cluster() if auto else node_files.read_current_cluster()
        address = current["address"] if current else ("auto" if auto else None)
    return address


def _start(request: _InitRequest) -> tuple:
    """init()'s step for a cluster of its own: the head and a node agent start in this process,
    published for other drivers on this host; (the agent's address, the cluster's token)."""
    temp_dir = request.options.get("_temp_dir")
    root = node_files.ensure_private_dir(temp_dir) if temp_dir else None
    session_dir = os.path.join(
        root or node_files.ensure_temp_root(), time.strftime("session_%Y-%m-%d_%H-%M-%S_") + f"{os.getpid()}"
    )
    python_path = os.pathsep.join(p for p in [os.getcwd(), *sys.path] if p)
    worker_env = [("PYTHONPATH", python_path), *request.env_vars.items()]
    dashboard = request.dashboard
    cluster = _native.start_cluster(
        session_dir=session_dir,
        python=sys.executable,
        cwd=os.getcwd(),
        num_cpus=None if request.num_cpus is None else float(request.num_cpus),
        num_gpus=None if request.num_gpus is None else int(request.num_gpus),
        resources={k: float(v) for k, v in (request.resources or {}).items()},
        memory=request.memory,
        object_store_memory=None if request.object_store_memory is None else int(request.object_store_memory),
        worker_env=worker_env,
        forward_output=request.log_to_driver,
        dashboard=dashboard,
        # A cluster that serves a dashboard serves Prometheus metrics too.
        metrics=(dashboard[0], 0) if dashboard else None,
        labels=request.labels or {},
    )
    STATE.cluster = cluster
    _publish(cluster)
    return cluster.agent_address, cluster.token


def _publish(cluster) -> None:
    """The embedded cluster's record for other drivers, and its addresses for the RayContext."""
    dashboard_url = f"{node_files.http_scheme()}://{cluster.dashboard_address}" if cluster.dashboard_address else None
    STATE.published = node_files.publish_embedded_cluster(
        cluster.head_address, cluster.token, cluster.session_dir, dashboard_url
    )
    STATE.address_info = {
        "address": cluster.head_address,
        "node_agent_address": cluster.agent_address,
        "session_dir": cluster.session_dir,
        "node_id": cluster.node_id,
    }
    if cluster.dashboard_address:
        STATE.address_info["dashboard_url"] = cluster.dashboard_address


def _join(request: _InitRequest) -> tuple:
    """init()'s step for a running cluster: its token, and the node agent on this host;
    (the agent's address, the token)."""
    address = request.address
    if address == "auto":
        raise ConnectionError(
            "init(address='auto') found no running cluster: set OXRAY_ADDRESS or start one with `oxray start --head`"
        )
    given = [
        n
        for n, v in (
            ("num_cpus", request.num_cpus),
            ("num_gpus", request.num_gpus),
            ("resources", request.resources),
            ("object_store_memory", request.object_store_memory),
            ("labels", request.labels),
        )
        if v is not None
    ]
    if given:
        raise ValueError(
            f"When connecting to an existing cluster, {', '.join(given)} must not be provided: "
            "set them with `oxray start` on each node instead"
        )
    token = os.environ.get("OXRAY_TOKEN")
    if not token:
        current = node_files.find_local_cluster(address)
        token = node_files.read_token_file(current.get("token_file")) if current else None
    if not token:
        raise ConnectionError(f"Joining the cluster at {address} needs its token: set OXRAY_TOKEN")
    agent_address = _local_agent(address, token)
    STATE.address_info = {"address": address, "node_agent_address": agent_address}
    return agent_address, token


def _become_driver(request: _InitRequest, agent_address: str, token: str) -> None:
    """init()'s last step: this process registers as the job's driver with the agent and
    takes up its state, logging and exit handling."""
    job_id = os.urandom(4)
    client, nodes = _open_driver_session(agent_address, token, job_id)
    STATE.epoch += 1
    STATE.client = client
    STATE.mode = "driver"
    STATE.job_id = job_id
    STATE.driver_task_id = os.urandom(16)
    STATE.namespace = request.namespace if request.namespace is not None else os.urandom(8).hex()
    STATE.node_id = STATE.address_info.get("node_id") or (nodes[0].node_id if nodes else "")
    STATE.runtime_env = dict(request.runtime_env or {})
    STATE.job_env_vars = _job_env_vars(request.job_config)
    STATE.functions.clear()
    STATE.registered.clear()
    if request.options.get("configure_logging", True):
        # Ray's: the level of the library's own logger ("oxray", and "ray" for code that logs under it).
        import logging

        for name in ("oxray", "ray"):
            logging.getLogger(name).setLevel(request.level)
    if request.log_to_driver:
        # The embedded agent prints its workers' output itself; other nodes' comes over the network.
        client.follow_logs(token, STATE.job_id, agent_address if STATE.cluster is not None else None)
    atexit.register(shutdown)
    _exit_on_sigterm()


def _open_driver_session(agent_address: str, token: str, job_id: bytes):
    """The client of the agent at `agent_address`, its driver session open, and the cluster's
    nodes; a cluster this driver started stops again when that fails."""
    try:
        # A driver that started the cluster calls its agent in-process.
        client = _native.Client(agent_address, token, cluster=STATE.cluster)
        nodes = client.cluster_info()
        # A joined driver's session: its end (shutdown, exit, or a crash) makes the agent clean
        # up after this job. Either way the head lists the driver (the Jobs API's DRIVER rows).
        client.open_driver_session(job_id, " ".join(sys.argv), os.environ.get("OXRAY_JOB_SUBMISSION_ID", ""))
    except Exception as e:
        if STATE.cluster is not None:
            _unpublish()
            STATE.cluster.shutdown()
            STATE.cluster = None
        if isinstance(e, _native.OxrayAuthError):
            raise exceptions.AuthenticationError(f"Cannot join the cluster at {agent_address}: {e}") from e
        if isinstance(e, _native.OxrayRpcError):
            raise ConnectionError(f"Cannot join the cluster at {agent_address}: {e}") from e
        raise
    return client, nodes


def _job_env_vars(job_config) -> dict:
    """What the job's tasks and actors inherit from this driver: a submitted job's import
    path (its working_dir, py_modules and pip virtualenv), JobConfig's code_search_path,
    and its default actor lifetime."""
    submitted = os.environ.get("OXRAY_JOB_SUBMISSION_ID") and os.environ.get("PYTHONPATH")
    env_vars = {"PYTHONPATH": os.environ["PYTHONPATH"]} if submitted else {}
    code_search_path = job_config.code_search_path if job_config is not None else []
    if code_search_path:
        # Ray's meaning for Python: the job's workers import from these too (their PYTHONPATH).
        rest = env_vars.get("PYTHONPATH") or os.environ.get("PYTHONPATH", "")
        env_vars = {"PYTHONPATH": os.pathsep.join(p for p in [*code_search_path, rest] if p)}
    if job_config is not None and job_config.default_actor_lifetime == "detached":
        env_vars = {**env_vars, opts.DEFAULT_ACTOR_LIFETIME_ENV: "detached"}
    return env_vars


def _exit_on_sigterm() -> None:
    """As Ray's init(): SIGTERM makes the driver exit (status 15) through Python, so `atexit`
    runs shutdown() and the cluster this driver started stops with it, leaving no workers."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may set handlers

    def exit_with_signal(signum, frame):
        sys.exit(signum)

    signal.signal(signal.SIGTERM, exit_with_signal)


# Ray's init() options oxray does not have, each refused by name rather than ignored.
_UNSUPPORTED_INIT_OPTIONS = {
    "local_mode": "local mode is deprecated in Ray and not supported: tasks always run in worker processes",
    "_system_config": "Ray's internal system config has no meaning here: oxray is configured by OXRAY_* "
    "environment variables and `oxray start` flags",
    "logging_format": "the log format is not configurable yet",
    "logging_config": "LoggingConfig is not supported yet",
    "enable_resource_isolation": "resource isolation (cgroups) is not supported",
    "system_reserved_cpu": "resource isolation (cgroups) is not supported",
    "system_reserved_memory": "resource isolation (cgroups) is not supported",
    "_node_ip_address": "pass the address to `oxray start --node-ip-address` instead",
    "_plasma_directory": "the object store always lives in /dev/shm",
    "_object_spilling_directory": "spilled objects go to the session directory",
    "_redis_password": "there is no Redis: the cluster token authenticates",
    "_metrics_export_port": "use `oxray start --metrics-export-port` instead",
    "_node_name": "node names are not supported",
    "_enable_object_reconstruction": "lineage reconstruction is not supported",
}


def _refuse_unsupported_init_options(kwargs: dict) -> None:
    for name, why in _UNSUPPORTED_INIT_OPTIONS.items():
        value = kwargs.get(name)
        # Ray's defaults (off, empty) are accepted: they ask for nothing.
        if name in kwargs and value not in (None, False, {}, [], ""):
            raise NotImplementedError(f"init({name}={value!r}) is not supported by oxray: {why}")
        kwargs.pop(name, None)


def _logging_level(level) -> int:
    """Ray's `logging_level`: a `logging` level number or name; INFO when not given."""
    import logging

    if level is None:
        return logging.INFO
    if isinstance(level, str) and isinstance(logging.getLevelName(level.upper()), int):
        return logging.getLevelName(level.upper())
    if isinstance(level, int) and not isinstance(level, bool):
        return level
    raise ValueError(f"init(logging_level={level!r}): expected a logging level such as logging.INFO or 'debug'")


def _dashboard_request(include_dashboard, kwargs, embedded: bool):
    """(host, port) for the embedded head's HTTP server (Jobs API), or None. Unlike Ray, an
    embedded cluster serves it from the start only when asked: include_dashboard=True or a dashboard_port/host
    (else `head_http.serve_http_here` starts it on the State API's or Jobs client's first use)."""
    host, port = kwargs.get("dashboard_host"), kwargs.get("dashboard_port")
    if host is None and port is None and not include_dashboard:
        return None
    if not embedded:
        raise ValueError(
            "When connecting to an existing cluster, dashboard_host/dashboard_port/include_dashboard must not be "
            "provided: the head's HTTP server is set with `oxray start --head --dashboard-port/--dashboard-host`"
        )
    if include_dashboard is False:
        raise ValueError(
            "init(include_dashboard=False) conflicts with dashboard_host/dashboard_port: give one or the other"
        )
    if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535):
        raise ValueError(f"init(dashboard_port={port!r}): expected a port number in 0-65535 (0 picks a free one)")
    if host is not None and not isinstance(host, str):
        raise TypeError(f"init(dashboard_host={host!r}): expected an address such as '127.0.0.1'")
    return (host or "127.0.0.1", 8265 if port is None else port)


class RayContext(dict):
    """What init() returns: address details, readable as attributes or keys."""

    def __init__(self, info):
        info = dict(info)
        # Ray's key: the dashboard's `host:port` ("" when none is served), or, as in Ray,
        # `RAY_OVERRIDE_DASHBOARD_URL` (say, a proxy in front of it) in its place, without its scheme.
        url = os.environ.get("RAY_OVERRIDE_DASHBOARD_URL") or info.get("dashboard_url") or ""
        info["webui_url"] = url.split("://", 1)[1] if "://" in url else url
        super().__init__(info)
        self.address_info = dict(info)
        self.dashboard_url = info["webui_url"]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        shutdown()

    def disconnect(self):
        shutdown()


def shutdown(_exiting_interpreter: bool = False) -> None:
    """Disconnects, and if this driver started the cluster, stops it: workers are
    killed and the object store's shared memory is removed."""
    if STATE.mode == "worker":
        return
    client, cluster = STATE.client, STATE.cluster
    STATE.client = None
    STATE.cluster = None
    STATE.mode = None
    STATE.epoch += 1
    if cluster is not None:
        _unpublish()
        cluster.shutdown()
    elif client is not None:
        client.end_driver_session()
    del client


def _unpublish() -> None:
    if STATE.published:
        try:
            os.unlink(STATE.published)
        except FileNotFoundError:
            pass
        STATE.published = None


def _client():
    if STATE.client is None:
        _refuse_if_auto_connect_off()
        init()
    return STATE.client


def _refuse_if_auto_connect_off() -> None:
    """Ray's switch: with RAY_ENABLE_AUTO_CONNECT=0, a call before init() raises rather than
    starting a cluster (checked before the call's arguments, as Ray does)."""
    if STATE.client is None and os.environ.get("RAY_ENABLE_AUTO_CONNECT", "").strip().lower() in ("0", "false", "no"):
        raise exceptions.RaySystemError(
            "Ray has not been started yet. You can start Ray with 'ray.init()' "
            "(automatic start is off: RAY_ENABLE_AUTO_CONNECT=0)."
        )


def _as_ref_list(object_refs, what):
    if isinstance(object_refs, ObjectRef):
        return [object_refs], True
    if isinstance(object_refs, (list, tuple)):
        for r in object_refs:
            if not isinstance(r, ObjectRef):
                raise TypeError(
                    f"{what}() expects an ObjectRef or a list of ObjectRefs, "
                    f"got a list containing {type(r).__name__}: {r!r}"
                )
        return list(object_refs), False
    raise TypeError(
        f"{what}() expects an ObjectRef or a list of ObjectRefs, got {type(object_refs).__name__}: {object_refs!r}"
    )


def _check_timeout(timeout):
    if timeout is not None and (not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout < 0):
        raise ValueError(f"timeout must be None or a number >= 0, got {timeout!r}")


def get(object_refs, *, timeout: Optional[float] = None):
    """The values of one ObjectRef or a list of them, waiting until they exist. As in Ray, an
    `ObjectRefGenerator` is returned as it is (iterate it for its items' refs)."""
    _refuse_if_auto_connect_off()
    if isinstance(object_refs, ObjectRefGenerator):
        return object_refs
    refs, single = _as_ref_list(object_refs, "get")
    _check_timeout(timeout)
    if not refs:
        return []
    client = _client()
    ids = [r._id for r in refs]
    # As Ray: a failed object among several raises as soon as it is known, not after the slowest
    # of the rest; the agent stops there and hands back that object alone.
    buffers = client.get(ids, timeout, fail_fast=len(ids) > 1)
    if buffers is None:
        raise exceptions.GetTimeoutError(f"Get timed out: some object(s) not ready after {timeout} s.")
    if len(buffers) != len(ids):
        try:
            serialization.deserialize(buffers[0])  # a failed task's error: raises
        except exceptions.RayActorError as error:
            _name_dead_actor(error, _holding(client, refs, buffers[0]))
            raise
        raise RuntimeError("the node agent stopped a get at an object that holds no error")
    values = []
    try:
        for buf in buffers:
            values.append(serialization.deserialize(buf))
    except exceptions.RayActorError as error:
        _name_dead_actor(error, [refs[len(values)]])
        raise
    return values[0] if single else values


def _holding(client, refs, failed) -> list:
    """The actor calls' refs among `refs` that hold what `failed` holds (the error a fail-fast
    get stopped at), so that the error can name its actor."""
    calls = [r for r in refs if r._actor_id is not None]
    if len({r._actor_id for r in calls}) <= 1:
        return calls
    ready = set(client.wait([r._id for r in calls], len(calls), 0.0))
    data = bytes(memoryview(failed))
    out = []
    for ref in calls:
        if ref._id in ready:
            got = client.get([ref._id], 0.0)
            if got and bytes(memoryview(got[0])) == data:
                out.append(ref)
    return out


def _name_dead_actor(error, refs) -> None:
    """Sets a RayActorError's `actor_id` (Ray's attribute: the actor's id as hex) to the actor
    the failed call went to, when the refs it may have come from name one actor."""
    if error.actor_id is None:
        actors = {r._actor_id for r in refs if r._actor_id is not None}
        if len(actors) == 1:
            error.actor_id = actors.pop().hex()


def put(value, *, _owner=None) -> ObjectRef:
    """Stores `value` in the object store and returns its ObjectRef."""
    if isinstance(value, ObjectRef):
        raise TypeError(
            "Calling 'put' on an ObjectRef is not allowed. "
            "If you really want to do this, wrap it in a list: put([ref])."
        )
    client = _client()
    try:
        data, buffers, nested = serialization.serialize(value)
    except TypeError as e:
        raise serialization.unserializable(f"Could not serialize the put value {value!r}", value, e.__cause__) from e
    return put_serialized(client, data, buffers, nested)


def put_serialized(client, data, buffers, nested) -> ObjectRef:
    from oxray._private.state import current_task_id

    object_id = os.urandom(16)
    ref = ObjectRef(object_id, current_task_id())
    prepared = client.prepare(object_id, data, buffers, serialization.FLAG_VALUE)
    client.seal(prepared, nested)
    return ref


def wait(object_refs, *, num_returns: int = 1, timeout: Optional[float] = None, fetch_local: bool = True):
    """(ready, not_ready): the first `num_returns` refs that are ready, in input order."""
    _refuse_if_auto_connect_off()
    refs, single = _as_ref_list(object_refs, "wait")
    if single:
        raise TypeError("wait() expects a list of ObjectRefs, got a single ObjectRef")
    _check_timeout(timeout)
    if not refs:
        return [], []  # as Ray: nothing to wait for, whatever num_returns says
    if not isinstance(num_returns, int) or isinstance(num_returns, bool) or num_returns < 1:
        raise ValueError(f"num_returns must be an integer >= 1, got {num_returns!r}")
    if num_returns > len(refs):
        raise ValueError(f"num_returns ({num_returns}) cannot be greater than the number of refs ({len(refs)})")
    if len(set(refs)) != len(refs):
        raise ValueError("wait() got duplicate ObjectRefs")
    ready_ids = set(_client().wait([r._id for r in refs], num_returns, timeout))
    ready = [r for r in refs if r._id in ready_ids][:num_returns]
    chosen = {r._id for r in ready}
    return ready, [r for r in refs if r._id not in chosen]


def cancel(object_ref, *, force: bool = False, recursive: bool = True) -> None:
    """Cancels the task that produces `object_ref`; `get` then raises TaskCancelledError.
    `recursive` (the default) also cancels the tasks it submitted, and theirs."""
    from oxray._private.generator import ObjectRefGenerator

    _refuse_if_auto_connect_off()
    if isinstance(object_ref, ObjectRefGenerator):
        object_ref = object_ref.completed()  # the generator's task
    if not isinstance(object_ref, ObjectRef):
        raise TypeError(f"cancel() expects an ObjectRef, got {type(object_ref).__name__}")
    if not isinstance(force, bool) or not isinstance(recursive, bool):
        raise TypeError(f"cancel(force={force!r}, recursive={recursive!r}): expected True or False for each")
    if force and object_ref._actor_call:
        raise ValueError(
            "force=True is not supported for actor tasks: cancel(ref) stops an async call (CancelledError) "
            "or one not started; ray.kill(actor) ends the whole actor"
        )
    _client().cancel(object_ref._id, force, recursive)


def kill(actor, *, no_restart: bool = True) -> None:
    """Kills an actor's process at once. With no_restart=False it may restart."""
    from oxray._private.actor import ActorHandle

    _refuse_if_auto_connect_off()
    if not isinstance(actor, ActorHandle):
        raise ValueError(f"ray.kill() only supported for actors. For tasks, try ray.cancel(). Got: {type(actor)}.")
    _client().kill_actor(actor._actor_id, no_restart)


def get_actor(name: str, namespace: Optional[str] = None):
    """The handle of a live named actor; ValueError if there is none."""
    from oxray._private.actor import ActorHandle

    if not isinstance(name, str) or not name:
        raise ValueError(f"get_actor() needs a non-empty actor name, got {name!r}")
    if namespace is not None:
        opts.validate_namespace(namespace)
    ns = STATE.namespace if namespace is None else namespace
    info = _client().get_named_actor(name, ns)
    if info is None:
        raise ValueError(
            f"Failed to look up actor with name '{name}' in namespace '{ns}'. It may not exist or may have died."
        )
    return ActorHandle._from_info(info)


def _sum_nodes(key):
    total: dict = {}
    for node in _client().cluster_info():
        if not node.alive:
            continue
        for name, qty in getattr(node, key).items():
            total[name] = total.get(name, 0.0) + qty
    return total


def cluster_resources() -> dict:
    return _sum_nodes("total")


def available_resources() -> dict:
    return {k: v for k, v in _sum_nodes("available").items() if v > 0}


def nodes() -> list:
    """One dict per node, with Ray's key names."""
    out = []
    for n in _client().cluster_info():
        host = n.ip or "127.0.0.1"
        out.append(
            {
                "NodeID": n.node_id,
                "Alive": n.alive,
                "NodeManagerAddress": host,
                "NodeManagerHostname": os.uname().nodename,
                "NodeManagerPort": int(n.address.rsplit(":", 1)[-1]) if ":" in n.address else 0,
                "NodeName": host,
                "Resources": dict(n.total),
                "alive": n.alive,
                "IsHeadNode": n.is_head,
                "SessionDir": n.session_dir,
                "Labels": dict(n.labels),
            }
        )
    return out


def get_gpu_ids() -> list:
    """The GPUs this task or actor may use: indices, or (as in Ray) the entries of the node's own
    CUDA_VISIBLE_DEVICES when it was started with one (strings, e.g. GPU UUIDs)."""
    from oxray._private.state import current_gpu_ids

    _refuse_if_auto_connect_off()
    visible = current_gpu_ids() if STATE.mode == "worker" else os.environ.get("CUDA_VISIBLE_DEVICES", "")
    names = [x.strip() for x in visible.split(",") if x.strip()]
    if STATE.mode == "worker" and STATE.preset_gpu_ids:
        return names
    return [int(x) if x.isdigit() else x for x in names]


def timeline(filename: Optional[str] = None) -> Optional[list]:
    """Ray's `timeline()`: the cluster's recent tasks as Chrome trace events (one row per
    worker, grouped by node), for chrome://tracing or Perfetto. With `filename`, writes
    them there as JSON and returns None. Tasks come from the State API, which keeps the
    running ones and the latest finished ones on each node."""
    import json

    from oxray.util.state import list_tasks

    _client()
    events = []
    for task in list_tasks(detail=True, limit=_TIMELINE_MAX_TASKS, raise_on_missing_output=False):
        if not task.start_time_ms:
            continue
        end_ms = task.end_time_ms or time.time() * 1000
        events.append(
            {
                "cat": "task::" + (task.func_or_class_name or task.name or ""),
                "name": task.name or "",
                "pid": f"Node {task.node_id}",
                "tid": f"Worker {task.worker_id} (pid {task.worker_pid})",
                "ph": "X",
                "ts": task.start_time_ms * 1000,
                "dur": max(0, end_ms - task.start_time_ms) * 1000,
                "cname": "generic_work" if task.state == "FINISHED" else "bad",
                "args": {"task_id": task.task_id, "state": task.state, "actor_id": task.actor_id},
            }
        )
    events.sort(key=lambda e: e["ts"])
    if filename is None:
        return events
    with open(filename, "w") as f:
        json.dump(events, f)
    return None


_TIMELINE_MAX_TASKS = 10_000  # the State API's own cap


def java_function(class_name: str, function_name: str):
    """Ray's handle to a Java task: oxray runs Python workers only."""
    raise NotImplementedError(
        f"java_function({class_name!r}, {function_name!r}): cross-language (Java) tasks are not supported by oxray"
    )


def java_actor_class(class_name: str):
    """Ray's handle to a Java actor class: oxray runs Python workers only."""
    raise NotImplementedError(
        f"java_actor_class({class_name!r}): cross-language (Java) actors are not supported by oxray"
    )


def client(address: Optional[str] = None, _deprecation_warn_enabled: bool = True):
    """Ray Client (`ray://` addresses) is not part of oxray: a driver joins a cluster directly."""
    raise NotImplementedError(
        "Ray Client (ray.client / ray:// addresses) is not supported by oxray: run the driver on a cluster node "
        "with init(address=...), or submit it as a job (`oxray job submit`)"
    )
