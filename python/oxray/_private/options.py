"""Validating `@remote(...)` / `.options(...)` arguments the way Ray does, with
errors that name the bad option and what was expected."""

from __future__ import annotations

import numbers

_COMMON = {
    "num_cpus",
    "num_gpus",
    "resources",
    "memory",
    "accelerator_type",
    "runtime_env",
    "scheduling_strategy",
    "label_selector",
    "fallback_strategy",
    "_metadata",
    "object_store_memory",
    # Ray's deprecated spelling of a PlacementGroupSchedulingStrategy (see _deprecated_placement).
    "placement_group",
    "placement_group_bundle_index",
    "placement_group_capture_child_tasks",
}
TASK_OPTIONS = _COMMON | {"num_returns", "max_retries", "retry_exceptions", "max_calls", "name"}
ACTOR_OPTIONS = _COMMON | {
    "max_restarts",
    "max_task_retries",
    "name",
    "namespace",
    "lifetime",
    "get_if_exists",
    "max_concurrency",
    "max_pending_calls",
    "concurrency_groups",
}
METHOD_OPTIONS = {"num_returns", "max_task_retries", "retry_exceptions", "name", "concurrency_group"}


def _is_number(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _nonneg_number(name, v):
    if not _is_number(v):
        raise TypeError(f"The option {name!r} must be a number >= 0, got {v!r} of type {type(v).__name__}")
    if v < 0 or v != v:
        raise ValueError(f"The option {name!r} must be >= 0, got {v!r}")


# More return values than any task could mean: each one is an object ref made at
# submission, so a typo like 2**40 would otherwise exhaust memory before failing.
MAX_NUM_RETURNS = 1_000_000


def _int_at_least(name, v, low):
    if not isinstance(v, int) or isinstance(v, bool):
        raise TypeError(f"The option {name!r} must be an integer >= {low}, got {v!r} of type {type(v).__name__}")
    if v < low:
        raise ValueError(f"The option {name!r} must be an integer >= {low}, got {v!r}")


# Ray's wording for its integer options, which Ray's own tests match.
_RAY_ACCEPTS = {
    "max_retries": (-1, "None, 0, -1 or a positive integer, where -1 represents infinity."),
    "max_restarts": (-1, "None, 0, -1 or a positive integer, where -1 represents infinity."),
    "max_task_retries": (-1, "None, 0, -1 or a positive integer, where -1 represents infinity."),
    "max_calls": (0, "None, 0 or a positive integer."),
    "num_returns": (0, "None, a non-negative integer, 'streaming' (for generators), or 'dynamic'."),
}


def _ray_int_option(name, v) -> None:
    low, accepts = _RAY_ACCEPTS[name]
    if name == "num_returns" and isinstance(v, str):
        raise ValueError(f"The keyword '{name}' only accepts {accepts} Got {v!r}.")
    if not isinstance(v, int) or isinstance(v, bool):
        types = (int, str, type(None)) if name == "num_returns" else (int, type(None))
        raise TypeError(f"The type of keyword '{name}' must be {types}, but received type {type(v)}")
    if v < low:
        raise ValueError(f"The keyword '{name}' only accepts {accepts} Got {v!r}.")


def _check_precision(name, v) -> None:
    """Ray keeps resource quantities to 1/10,000 of a unit and refuses finer ones."""
    if _is_number(v) and v > 0 and v < 1e12 and abs(v * 10_000 - round(v * 10_000)) > 1e-6:
        raise ValueError(
            f"The precision of the fractional quantity of resource {name} cannot go beyond 0.0001, got {v!r}"
        )


# Ray's accelerator resources: each is handed out as whole devices, shared only below one.
UNIT_INSTANCE_RESOURCES = ("GPU", "TPU", "neuron_cores", "HPU", "NPU")


def check_whole_devices(options: dict) -> None:
    """As in Ray, at `.remote()`: a fraction of one device may be shared, but more than one
    device must be whole devices."""
    requests = {"GPU": options.get("num_gpus"), **(options.get("resources") or {})}
    for name in UNIT_INSTANCE_RESOURCES:
        v = requests.get(name)
        if _is_number(v) and v > 1 and float(v) != int(v):
            raise ValueError(
                f"{name} resource quantity must be whole numbers when it is greater than 1 (a fraction of one "
                f"device may be shared, more than one are whole devices). The specified quantity {v} is invalid."
            )


# Ray's options that oxray accepts by name but does not have yet: set to anything
# but Ray's default, each is refused with why, never silently ignored.
UNSUPPORTED_OPTIONS = {
    "max_pending_calls": "a cap on an actor's pending calls is not supported yet",
    "_metadata": "Ray's internal task metadata is not supported",
}


def validate(options: dict, kind: str) -> dict:
    """Checks names and values; `kind` is "task", "actor" or "method"."""
    _check_names(options, kind)
    _deprecated_placement(options)
    if kind == "actor" and "object_store_memory" in options:
        warn_deprecated(
            "Setting 'object_store_memory' for actors is deprecated since it doesn't actually reserve the "
            f"required object store memory. Use object spilling that's enabled by default ({SPILLING_DOCS}) "
            "instead to bypass the object store memory size limitation."
        )
    _check_resources(options)
    _check_counts(options)
    _check_concurrency(options)
    _check_identity(options, kind)
    _check_placement(options)
    return options


# Where Ray's deprecation warnings for `object_store_memory` point.
SPILLING_DOCS = "https://docs.ray.io/en/latest/ray-core/objects/object-spilling.html"


def warn_deprecated(message: str) -> None:
    """A DeprecationWarning attributed to the user's line that led here (the first frame outside
    oxray), so that Python's default filters show it as Ray's are shown."""
    import os
    import sys
    import warnings

    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    level, frame = 2, sys._getframe(1)  # stacklevel 2 is this function's caller
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, DeprecationWarning, stacklevel=level)


_PLACEMENT_DEPRECATED = (
    "{} parameter is deprecated. Use scheduling_strategy=PlacementGroupSchedulingStrategy(...) instead, "
    "see the usage at https://docs.ray.io/en/latest/ray-core/package-ref.html#ray-remote."
)


def _deprecated_placement(options: dict) -> None:
    """Ray's deprecated `placement_group=`, `placement_group_bundle_index=` and
    `placement_group_capture_child_tasks=` options: each warns, as in Ray, and they become the
    `PlacementGroupSchedulingStrategy` they stand for (in place, in `options`)."""
    keys = ("placement_group", "placement_group_bundle_index", "placement_group_capture_child_tasks")
    if not any(k in options for k in keys):
        return
    pg = options.pop("placement_group", "default")
    no_group = pg is None  # Ray's `placement_group=None`: no group, not even a capturing caller's
    index = options.pop("placement_group_bundle_index", -1)
    capture = options.pop("placement_group_capture_child_tasks", None)
    if pg not in ("default", None) and options.get("scheduling_strategy") is not None:
        raise ValueError(
            "Placement groups should be specified via the scheduling_strategy option. "
            "The placement_group option is deprecated."
        )
    for key, value, default in zip(keys, (pg, index, capture), ("default", -1, None), strict=True):
        if value != default and value is not False:
            warn_deprecated(_PLACEMENT_DEPRECATED.format(key))
    if not isinstance(index, int) or isinstance(index, bool):
        raise TypeError(f"placement_group_bundle_index={index!r}: expected an integer (-1 for any bundle)")
    if capture is not None and not isinstance(capture, bool):
        raise TypeError(f"placement_group_capture_child_tasks={capture!r}: expected True, False or None")
    from oxray.util.placement_group import PlacementGroup, get_current_placement_group
    from oxray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    if pg == "default":
        # As in Ray: with capture, the group the caller runs in; otherwise none.
        pg = get_current_placement_group() if capture else None
    elif pg is not None and not isinstance(pg, PlacementGroup):
        raise TypeError(f"placement_group={pg!r}: expected a PlacementGroup, 'default' or None")
    if pg is None:
        if index != -1:
            raise ValueError(
                f"placement_group_bundle_index={index!r} needs a placement group: if placement group is not "
                "set, the value of bundle index must be -1."
            )
        if options.get("scheduling_strategy") is None and (capture is not None or no_group):
            options["scheduling_strategy"] = "DEFAULT"  # Ray's empty group: not the caller's either
        return
    options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(pg, index, capture)


def _check_names(options: dict, kind: str) -> None:
    """Every option is one `kind` takes, and none is one oxray refuses."""
    allowed = {"task": TASK_OPTIONS, "actor": ACTOR_OPTIONS, "method": METHOD_OPTIONS}[kind]
    what = {"task": "remote functions", "actor": "actors", "method": "actor methods"}[kind]
    for key in options:
        if key not in allowed:
            raise ValueError(f"Invalid option keyword {key!r} for {what}. Valid ones are {sorted(allowed)}.")
    for key, why in UNSUPPORTED_OPTIONS.items():
        if options.get(key) not in (None, {}, -1 if key == "max_pending_calls" else None):
            raise NotImplementedError(f"The option {key}={options[key]!r} is not supported by oxray: {why}")


def _check_resources(options: dict) -> None:
    """num_cpus, num_gpus, memory, object_store_memory and the custom `resources`."""
    for key in ("num_cpus", "num_gpus", "memory", "object_store_memory"):
        if options.get(key) is not None:
            _nonneg_number(key, options[key])
    for key in ("num_cpus", "num_gpus"):
        _check_precision(key, options.get(key))
    resources = options.get("resources")
    if resources is None:
        return
    if not isinstance(resources, dict):
        raise TypeError(f"The option 'resources' must be a dict of name -> quantity, got {resources!r}")
    for name, qty in resources.items():
        if not isinstance(name, str):
            raise TypeError(f"Resource names must be strings, got {name!r}")
        if name in ("CPU", "GPU"):
            raise ValueError(f"Use the 'num_cpus' and 'num_gpus' options instead of resources={{{name!r}: ...}}")
        if name in ("memory", "object_store_memory"):
            raise ValueError(f"Use the {name!r} option instead of resources={{{name!r}: ...}}")
        if name == "bundle":
            raise ValueError("'bundle' is a reserved resource name (placement groups use it); choose another")
        _nonneg_number(f"resources[{name!r}]", qty)
        _check_precision(name, qty)


def _check_counts(options: dict) -> None:
    """num_returns, and the retry, restart and call limits."""
    if options.get("num_returns") == "dynamic":
        raise ValueError(
            "num_returns='dynamic' is not supported by oxray (Ray deprecated it): use num_returns='streaming' "
            "(or a generator function), whose ObjectRefGenerator gives each yielded value's ObjectRef"
        )
    if options.get("num_returns") is not None and options["num_returns"] != "streaming":
        _ray_int_option("num_returns", options["num_returns"])
        if options["num_returns"] > MAX_NUM_RETURNS:
            raise ValueError(
                f"The option 'num_returns' must be at most {MAX_NUM_RETURNS:,}, got {options['num_returns']!r}"
            )
    for key in ("max_retries", "max_restarts", "max_task_retries", "max_calls"):
        if options.get(key) is not None:
            _ray_int_option(key, options[key])


def _check_concurrency(options: dict) -> None:
    """max_concurrency, an actor's concurrency_groups and a method's concurrency_group."""
    if options.get("max_concurrency") is not None:
        _int_at_least("max_concurrency", options["max_concurrency"], 1)
    groups = options.get("concurrency_groups")
    if groups is not None:
        if not isinstance(groups, dict) or not all(isinstance(k, str) and k for k in groups):
            raise TypeError(f"concurrency_groups={groups!r}: expected a dict of group name -> max concurrency")
        for name, size in groups.items():
            _int_at_least(f"concurrency_groups[{name!r}]", size, 1)
    if options.get("concurrency_group") is not None and not isinstance(options["concurrency_group"], str):
        raise TypeError(f"concurrency_group={options['concurrency_group']!r}: expected a group name")


def _check_identity(options: dict, kind: str) -> None:
    """name, accelerator_type, namespace, lifetime and get_if_exists."""
    for key in ("name", "accelerator_type"):
        if options.get(key) is not None and not isinstance(options[key], str):
            raise TypeError(f"The option {key!r} must be a string, got {options[key]!r}")
    if kind == "actor" and options.get("name") == "":
        raise ValueError("Actor name cannot be an empty string: give a name, or None for an unnamed actor.")
    if options.get("namespace") is not None:
        validate_namespace(options["namespace"])
    if options.get("lifetime") not in (None, "detached", "non_detached"):
        raise ValueError(f"The option 'lifetime' must be 'detached' or 'non_detached', got {options['lifetime']!r}")
    if options.get("get_if_exists") is not None and not isinstance(options["get_if_exists"], bool):
        raise TypeError(f"The option 'get_if_exists' must be a bool, got {options['get_if_exists']!r}")
    if options.get("get_if_exists") and kind == "actor" and options.get("name") is None:
        raise ValueError("The actor name must be specified to use `get_if_exists`: add name=... to the options")


def _check_placement(options: dict) -> None:
    """retry_exceptions, label_selector, fallback_strategy, runtime_env and scheduling_strategy."""
    retry = options.get("retry_exceptions")
    if retry is not None and not (
        isinstance(retry, bool)
        or (isinstance(retry, list) and all(isinstance(t, type) and issubclass(t, BaseException) for t in retry))
    ):
        raise TypeError(f"The option 'retry_exceptions' must be a bool or a list of exception types, got {retry!r}")
    if options.get("label_selector") is not None:
        check_label_selector(options["label_selector"], "label_selector")
    if options.get("fallback_strategy") is not None:
        check_fallback_strategy(options["fallback_strategy"])
    validate_runtime_env(options.get("runtime_env"))
    strategy = options.get("scheduling_strategy")
    if strategy is not None and not (isinstance(strategy, str) and strategy in ("DEFAULT", "SPREAD")):
        from oxray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

        if not isinstance(strategy, (NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy)):
            raise ValueError(
                f"Unsupported scheduling_strategy {strategy!r}: expected 'DEFAULT', 'SPREAD', "
                "a PlacementGroupSchedulingStrategy or a NodeAffinitySchedulingStrategy"
            )


def strategy_fields(options: dict) -> dict:
    """The task spec's fields for Ray's `SPREAD`, node-affinity, placement-group and label strategies."""
    fields = {"label_selector": dict(options["label_selector"])} if options.get("label_selector") else {}
    if options.get("fallback_strategy"):
        fields["fallback_strategy"] = [dict(f["label_selector"]) for f in options["fallback_strategy"]]
    strategy = options.get("scheduling_strategy")
    if strategy == "SPREAD":
        fields["spread"] = True
    node_id = getattr(strategy, "node_id", None)
    if node_id is not None:
        fields["node_affinity"] = (bytes.fromhex(node_id), strategy.soft)
    pg = getattr(strategy, "placement_group", None)
    if pg is not None:
        # The request stays as asked (`CPU`): the engine draws it from the group's bundle.
        index = _bundle_index(pg, getattr(strategy, "placement_group_bundle_index", -1))
        fields["placement_group"] = (pg.id.binary(), index)
    return fields


def _bundle_index(pg, index) -> int:
    """Ray's `placement_group_bundle_index`, checked against the group's bundles: -1 for any."""
    if not isinstance(index, int) or index < -1 or index >= pg.bundle_count:
        raise ValueError(
            f"placement_group_bundle_index={index!r} is out of range: the group has {pg.bundle_count} bundle(s), "
            "so use -1 (any bundle) or 0.." + str(pg.bundle_count - 1)
        )
    return index


def check_label_selector(selector, what: str) -> dict:
    """Ray's label selector: {key: "value" | "!value" | "in(a, b)" | "!in(a, b)"}, checked by the
    scheduler's own parser."""
    from oxray import _native

    if not isinstance(selector, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in selector.items()
    ):
        raise TypeError(f"{what}={selector!r}: expected a dict of label name -> condition string")
    try:
        _native.check_label_selector(selector)
    except ValueError as e:
        raise ValueError(f"{what}: {e}") from None
    return selector


def check_fallback_strategy(strategy) -> None:
    """Ray's `fallback_strategy`: a list of `{"label_selector": {...}}`, tried in order when no
    node matches the task's own `label_selector`."""
    if not isinstance(strategy, list):
        raise TypeError(
            f"fallback_strategy={strategy!r}: expected a list of dicts such as "
            '[{"label_selector": {"market-type": "spot"}}]'
        )
    for i, entry in enumerate(strategy):
        if not isinstance(entry, dict) or set(entry) - {"label_selector"} or "label_selector" not in entry:
            raise ValueError(
                f"fallback_strategy[{i}]={entry!r}: expected a dict with one key, 'label_selector' "
                "(the only fallback option supported, as in Ray)"
            )
        check_label_selector(entry["label_selector"], f"fallback_strategy[{i}]['label_selector']")


def refuse_bind(*args, **kwargs):
    """Ray's `.bind()` (DAGs, Compiled Graphs) on functions, actor classes and methods: refused by name."""
    raise NotImplementedError("Ray DAGs (.bind(), Ray Compiled Graphs) are not supported by oxray: call .remote()")


class WithOptions:
    """What `.options(...)` returns: the same remote function or actor class with
    extra options for the next `.remote()` call."""

    def __init__(self, parent, options: dict):
        self._parent = parent
        self._options = options

    def remote(self, *args, **kwargs):
        return self._parent._submit(args, kwargs, self._options)

    def __call__(self, *args, **kwargs):
        return self._parent(*args, **kwargs)


def validate_runtime_env(env):
    if env is None:
        return
    if not isinstance(env, dict):
        raise TypeError(f"runtime_env must be a dict, got {env!r}")
    for key in env:
        if key != "env_vars":
            raise NotImplementedError(
                f"runtime_env key {key!r} is not supported for tasks, actors or init() yet: only 'env_vars' is. "
                "A job's runtime_env (`oxray job submit`, JobSubmissionClient) supports working_dir, py_modules "
                "and pip."
            )
    env_vars = env.get("env_vars")
    if env_vars is not None:
        if not isinstance(env_vars, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env_vars.items()
        ):
            raise TypeError(f"runtime_env['env_vars'] must be a dict of str -> str, got {env_vars!r}")


def resource_request(options: dict, default_cpus: float) -> dict:
    """The resources a task or actor holds while it runs, in the runtime's terms."""
    out = {}
    cpus = options.get("num_cpus")
    out["CPU"] = float(default_cpus if cpus is None else cpus)
    if options.get("num_gpus"):
        out["GPU"] = float(options["num_gpus"])
    # Both are scheduling requests, as in Ray: the bytes are held on the node while it runs.
    for name in ("memory", "object_store_memory"):
        if options.get(name):
            out[name] = float(options[name])
    for name, qty in (options.get("resources") or {}).items():
        out[name] = float(qty)
    if options.get("accelerator_type"):
        out[f"accelerator_type:{options['accelerator_type']}"] = 0.001
    return {k: v for k, v in out.items() if v > 0}


def validate_namespace(namespace) -> None:
    """Ray's rule for a namespace given to init(), an actor's options or get_actor()."""
    if not isinstance(namespace, str):
        raise TypeError(f"namespace must be None or a string, got {type(namespace).__name__}: {namespace!r}")
    if namespace == "":
        raise ValueError('"" is not a valid namespace. Pass None to not specify a namespace.')


def check_fits_placement_group(options: dict, request: dict, placement: dict, what: str) -> None:
    """Fails at submission, as Ray does, a task or actor whose request fits no bundle of the
    placement group it is scheduled into: it could never run."""
    pg = getattr(options.get("scheduling_strategy"), "placement_group", None)
    bundles = pg.bundle_specs if pg is not None else None
    if not bundles:
        return

    def fits(req):
        req = {k: v for k, v in req.items() if not k.startswith("accelerator_type:")}
        return any(all(b.get(k, 0) >= v for k, v in req.items()) for b in bundles)

    def shown(req):
        return {k: int(v) if float(v).is_integer() else v for k, v in req.items()}

    if not fits(request):
        raise ValueError(
            f"Cannot schedule {what} with the placement group because the resource request {shown(request)} "
            f"cannot fit into any bundles for the placement group, {bundles}."
        )
    if not fits(placement):
        raise ValueError(
            f"Cannot schedule {what} with the placement group because the actor requires "
            f"{shown(placement).get('CPU', 0)} CPU for creation, but it cannot fit into any bundles for the placement "
            f"group, {bundles}. Consider creating a placement group with CPU resources."
        )


def retry_policy(options: dict) -> tuple:
    """(retry_exceptions flag, pickled exception types or b"") for a task spec: a
    list retries only those types (the worker checks what was raised)."""
    retry = options.get("retry_exceptions") or False
    if isinstance(retry, list):
        import cloudpickle

        return (True, cloudpickle.dumps(tuple(retry))) if retry else (False, b"")
    return bool(retry), b""


def with_captured_placement(options: dict) -> dict:
    """Ray's `placement_group_capture_child_tasks`: inside a task or actor placed with
    it, work submitted with no scheduling strategy goes into the same group (any bundle)."""
    from oxray._private.state import CURRENT

    if options.get("scheduling_strategy") is not None or not CURRENT.capture_child_tasks:
        return options
    from oxray.util.placement_group import get_current_placement_group
    from oxray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    pg = get_current_placement_group()
    if pg is None:
        return options
    return {**options, "scheduling_strategy": PlacementGroupSchedulingStrategy(pg, -1, True)}


def captures_child_tasks(options: dict) -> bool:
    return bool(getattr(options.get("scheduling_strategy"), "placement_group_capture_child_tasks", False))


def submitted_env_vars(options: dict) -> dict:
    """The env_vars a task or actor submitted now runs with, later ones winning: the job's, the
    init() runtime_env's, those of the task submitting it (inherited, as in Ray), then its own."""
    from oxray._private.state import CURRENT, STATE

    return {
        **STATE.job_env_vars,
        **env_vars({"runtime_env": STATE.runtime_env}),
        **(CURRENT.env_vars or {}),
        **env_vars(options),
    }


def env_vars(options: dict) -> dict:
    return dict(((options.get("runtime_env") or {}).get("env_vars")) or {})


# The job's default actor lifetime (`JobConfig(default_actor_lifetime=)`), as an environment
# variable of the job so that its tasks and actors (and theirs) create actors with it too.
DEFAULT_ACTOR_LIFETIME_ENV = "OXRAY_DEFAULT_ACTOR_LIFETIME"


def default_actor_lifetime() -> str:
    """The lifetime of an actor created without one: its job's default, "non_detached" unless set."""
    from oxray._private.state import CURRENT, STATE

    env = CURRENT.env_vars if STATE.mode == "worker" else STATE.job_env_vars
    return (env or {}).get(DEFAULT_ACTOR_LIFETIME_ENV) or "non_detached"
