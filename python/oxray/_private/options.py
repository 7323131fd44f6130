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
    "_metadata",
    "object_store_memory",
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


def validate(options: dict, kind: str) -> dict:
    """Checks names and values; `kind` is "task", "actor" or "method"."""
    allowed = {"task": TASK_OPTIONS, "actor": ACTOR_OPTIONS, "method": METHOD_OPTIONS}[kind]
    what = {"task": "remote functions", "actor": "actors", "method": "actor methods"}[kind]
    for key in options:
        if key not in allowed:
            raise ValueError(f"Invalid option keyword {key!r} for {what}. Valid ones are {sorted(allowed)}.")
    for key in ("num_cpus", "num_gpus", "memory", "object_store_memory"):
        if options.get(key) is not None:
            _nonneg_number(key, options[key])
    resources = options.get("resources")
    if resources is not None:
        if not isinstance(resources, dict):
            raise TypeError(f"The option 'resources' must be a dict of name -> quantity, got {resources!r}")
        for name, qty in resources.items():
            if not isinstance(name, str):
                raise TypeError(f"Resource names must be strings, got {name!r}")
            if name in ("CPU", "GPU"):
                raise ValueError(f"Use the 'num_cpus' and 'num_gpus' options instead of resources={{{name!r}: ...}}")
            _nonneg_number(f"resources[{name!r}]", qty)
    if options.get("num_returns") is not None and options["num_returns"] != "dynamic":
        _int_at_least("num_returns", options["num_returns"], 0)
        if options["num_returns"] > MAX_NUM_RETURNS:
            raise ValueError(
                f"The option 'num_returns' must be at most {MAX_NUM_RETURNS:,}, got {options['num_returns']!r}"
            )
    for key, low in (("max_retries", -1), ("max_restarts", -1), ("max_task_retries", -1), ("max_calls", 0)):
        if options.get(key) is not None:
            _int_at_least(key, options[key], low)
    if options.get("max_concurrency") is not None:
        _int_at_least("max_concurrency", options["max_concurrency"], 1)
    for key in ("name", "namespace", "accelerator_type"):
        if options.get(key) is not None and not isinstance(options[key], str):
            raise TypeError(f"The option {key!r} must be a string, got {options[key]!r}")
    if options.get("lifetime") not in (None, "detached", "non_detached"):
        raise ValueError(f"The option 'lifetime' must be 'detached' or 'non_detached', got {options['lifetime']!r}")
    if options.get("get_if_exists") is not None and not isinstance(options["get_if_exists"], bool):
        raise TypeError(f"The option 'get_if_exists' must be a bool, got {options['get_if_exists']!r}")
    if options.get("retry_exceptions") is not None and not isinstance(options["retry_exceptions"], (bool, list)):
        raise TypeError(f"The option 'retry_exceptions' must be a bool, got {options['retry_exceptions']!r}")
    validate_runtime_env(options.get("runtime_env"))
    strategy = options.get("scheduling_strategy")
    if strategy is not None and not (isinstance(strategy, str) and strategy in ("DEFAULT", "SPREAD")):
        if not hasattr(strategy, "placement_group") and not hasattr(strategy, "node_id"):
            raise ValueError(f"Unsupported scheduling_strategy {strategy!r}: expected 'DEFAULT' or 'SPREAD'")
    return options


class WithOptions:
    """What `.options(...)` returns: the same remote function or actor class with
    extra options for the next `.remote()` call."""

    def __init__(self, parent, options: dict):
        self._parent = parent
        self._options = options

    def remote(self, *args, **kwargs):
        return self._parent._remote(args, kwargs, self._options)

    def __call__(self, *args, **kwargs):
        return self._parent(*args, **kwargs)


def validate_runtime_env(env):
    if env is None:
        return
    if not isinstance(env, dict):
        raise TypeError(f"runtime_env must be a dict, got {env!r}")
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
    if options.get("memory"):
        out["memory"] = float(options["memory"])
    for name, qty in (options.get("resources") or {}).items():
        out[name] = float(qty)
    if options.get("accelerator_type"):
        out[f"accelerator_type:{options['accelerator_type']}"] = 0.001
    return {k: v for k, v in out.items() if v > 0}


def in_placement_group(request: dict, options: dict) -> dict:
    """Renames a request to draw on a placement group's reserved bundles (as Ray
    does: `CPU` becomes `CPU_group_<i>_<pg>` plus the any-bundle `CPU_group_<pg>`)."""
    strategy = options.get("scheduling_strategy")
    pg = getattr(strategy, "placement_group", None)
    if pg is None:
        return request
    index = getattr(strategy, "placement_group_bundle_index", -1)
    if not isinstance(index, int) or index < -1 or index >= pg.bundle_count:
        raise ValueError(
            f"placement_group_bundle_index={index!r} is out of range: the group has {pg.bundle_count} bundle(s), "
            "so use -1 (any bundle) or 0.." + str(pg.bundle_count - 1)
        )
    pg_hex = pg.id.hex()
    out = {}
    for name, qty in request.items():
        out[f"{name}_group_{pg_hex}"] = qty
        if index >= 0:
            out[f"{name}_group_{index}_{pg_hex}"] = qty
    out[f"bundle_group_{pg_hex}"] = 0.001
    if index >= 0:
        out[f"bundle_group_{index}_{pg_hex}"] = 0.001
    return out


def env_vars(options: dict) -> dict:
    return dict(((options.get("runtime_env") or {}).get("env_vars")) or {})
