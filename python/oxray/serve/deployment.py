"""`@serve.deployment`, `Deployment` (`.options()`, `.bind()`) and `Application`
(a bound deployment; deployments bound into another's arguments make an
application graph). Options are checked here, as Ray checks them: an unknown
one is a `TypeError`, a bad value a `ValueError`; one oxray's Serve does not do
yet is a `NotImplementedError` naming it."""

from __future__ import annotations

import inspect
import json
from typing import Any, Callable, Optional

_DEFAULTS = {
    "num_replicas": 1,
    "autoscaling_config": None,
    "ray_actor_options": None,
    "user_config": None,
    "max_ongoing_requests": 5,
    "max_queued_requests": -1,
    "backpressure_config": None,
    "health_check_period_s": 10.0,
    "health_check_timeout_s": 30.0,
    "graceful_shutdown_wait_loop_s": 2.0,
    "graceful_shutdown_timeout_s": 20.0,
    "max_constructor_retry_count": 20,
    "rolling_update_percentage": 0.2,
    "max_surge_percent": 0.0,
    "logging_config": None,
    "placement_group_bundles": None,
    "placement_group_strategy": None,
    "placement_group_bundle_label_selector": None,
    "max_replicas_per_node": None,
}
# Ray's options oxray's Serve does not carry out yet: refused by name, never ignored.
_NOT_YET = {
    "request_router_config": "custom request routers",
    "gang_scheduling_config": "gang scheduling",
    "deployment_actors": "deployment actors",
}
_ACTOR_OPTIONS = {
    "accelerator_type",
    "memory",
    "num_cpus",
    "num_gpus",
    "resources",
    "runtime_env",
    "label_selector",
    "fallback_strategy",
}


def _check_backpressure(config) -> None:
    """Ray's `backpressure_config`: `status_code` 503 or 429, `retry_after_s` a number or None."""
    if config is None:
        return
    if not isinstance(config, dict):
        raise TypeError(f"backpressure_config={config!r}: expected a dict")
    unknown = set(config) - {"status_code", "retry_after_s"}
    if unknown:
        raise ValueError(f"backpressure_config got unexpected keys {sorted(unknown)}")
    if config.get("status_code", 503) not in (503, 429):
        raise ValueError(f"backpressure_config status_code={config['status_code']!r}: expected 503 or 429")
    retry = config.get("retry_after_s")
    if retry is not None and (isinstance(retry, bool) or not isinstance(retry, (int, float)) or retry < 0):
        raise ValueError(f"backpressure_config retry_after_s={retry!r}: expected a number of seconds or None")


def _check(options: dict) -> None:
    for key in options:
        if key == "version":
            raise ValueError("`version` is no longer supported: Ray Serve 2.60 removed it")
        if key in _NOT_YET:
            raise NotImplementedError(f"@serve.deployment({key}=...): oxray's Serve does not do {_NOT_YET[key]} yet")
        if key not in _DEFAULTS and key not in ("name", "func_or_class"):
            raise TypeError(f"@serve.deployment got an unexpected option {key!r}")
    _check_replicas(options.get("num_replicas", 1))
    _check_autoscaling(options)
    name = options.get("name")
    if name is not None and (not isinstance(name, str) or "#" in name or not name):
        raise ValueError(f"name={name!r}: expected a non-empty name without '#'")
    _check_actor_options(options.get("ray_actor_options") or {})
    _check_placement_group(options)
    ongoing = options.get("max_ongoing_requests", 5)
    if ongoing is None or isinstance(ongoing, bool) or not isinstance(ongoing, int) or ongoing < 1:
        raise ValueError(f"max_ongoing_requests={ongoing!r}: expected an int of at least 1")
    queued = options.get("max_queued_requests", -1)
    if isinstance(queued, bool) or not isinstance(queued, int) or not (queued == -1 or queued >= 1):
        raise ValueError(f"max_queued_requests={queued!r}: expected -1 (no limit) or an int of at least 1")
    _check_backpressure(options.get("backpressure_config"))
    if options.get("logging_config") is not None:
        from oxray.serve.schema import LoggingConfig

        options["logging_config"] = LoggingConfig.of(options["logging_config"]).dict()
    if options.get("user_config") is not None:
        try:
            json.dumps(options["user_config"])
        except (TypeError, ValueError) as e:
            raise ValueError(
                f"user_config={options['user_config']!r}: expected a JSON-serializable value ({e})"
            ) from None
    for key in (
        "health_check_period_s",
        "health_check_timeout_s",
        "graceful_shutdown_timeout_s",
        "graceful_shutdown_wait_loop_s",
    ):
        value = options.get(key, _DEFAULTS[key])
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ValueError(f"{key}={value!r}: expected a number of seconds above 0")
    retries = options.get("max_constructor_retry_count", _DEFAULTS["max_constructor_retry_count"])
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 1:
        raise ValueError(f"max_constructor_retry_count={retries!r}: expected an int of at least 1")
    percentage = options.get("rolling_update_percentage", 0.2)
    if isinstance(percentage, bool) or not isinstance(percentage, (int, float)) or not 0 < percentage <= 1:
        raise ValueError(f"rolling_update_percentage={percentage!r}: expected a number in (0, 1]")


# Ray's `AutoscalingConfig` fields (the default policy's); `policy` (a custom one) is not taken yet.
_AUTOSCALING_KEYS = {
    "min_replicas",
    "initial_replicas",
    "max_replicas",
    "target_ongoing_requests",
    "metrics_interval_s",
    "look_back_period_s",
    "smoothing_factor",
    "upscale_smoothing_factor",
    "downscale_smoothing_factor",
    "upscaling_factor",
    "downscaling_factor",
    "upscale_delay_s",
    "downscale_delay_s",
    "downscale_to_zero_delay_s",
    "aggregation_function",
}


def autoscaling_of(options: dict) -> Optional[dict]:
    """The deployment's autoscaling settings with Ray's defaults (`num_replicas="auto"`: up to 100
    replicas), or None for a fixed count."""
    config = options.get("autoscaling_config")
    if config is None and options.get("num_replicas") != "auto":
        return None
    if config is not None and not isinstance(config, dict):
        config = {k: v for k, v in vars(config).items() if v is not None}
    base = {"min_replicas": 1, "max_replicas": 100 if options.get("num_replicas") == "auto" else 1}
    base.update({"target_ongoing_requests": 2.0, "metrics_interval_s": 10.0, "look_back_period_s": 30.0})
    merged = {**base, **(config or {})}
    # The deprecated smoothing factors stand in for the scaling factors not given, as in Ray.
    smoothing = merged.pop("smoothing_factor", None) or 1.0
    up_alias, down_alias = merged.pop("upscale_smoothing_factor", None), merged.pop("downscale_smoothing_factor", None)
    merged["upscaling_factor"] = merged.get("upscaling_factor") or up_alias or smoothing
    merged["downscaling_factor"] = merged.get("downscaling_factor") or down_alias or smoothing
    return merged


def _check_autoscaling(options: dict) -> None:
    config = options.get("autoscaling_config")
    if config is None:
        return
    if isinstance(options.get("num_replicas"), int) and not isinstance(options.get("num_replicas"), bool):
        raise ValueError("Manually setting num_replicas is not allowed when autoscaling_config is provided.")
    fields = config if isinstance(config, dict) else vars(config)
    if "policy" in fields and fields["policy"] is not None:
        raise NotImplementedError("autoscaling_config(policy=...): oxray's Serve runs Ray's default policy only")
    unknown = sorted(set(fields) - _AUTOSCALING_KEYS - {"policy"})
    if unknown:
        raise ValueError(
            f"autoscaling_config has unknown fields {unknown}; expected some of {sorted(_AUTOSCALING_KEYS)}"
        )
    for key in ("metrics_interval_s", "look_back_period_s", "upscale_delay_s", "downscale_delay_s"):
        value = fields.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
            raise ValueError(f"autoscaling_config {key}={value!r}: expected a number of seconds, 0 or more")
    # num_replicas="auto" raises the default max_replicas to 100 (`autoscaling_of`).
    low = fields.get("min_replicas", 1)
    high = fields.get("max_replicas", 100 if options.get("num_replicas") == "auto" else 1)
    if not (isinstance(low, int) and isinstance(high, int) and 0 <= low <= high and high >= 1):
        raise ValueError(
            f"autoscaling_config min_replicas={low!r}, max_replicas={high!r}: expected 0 <= min_replicas <= "
            "max_replicas and max_replicas >= 1"
        )


def _check_replicas(replicas) -> None:
    if replicas == "auto" or replicas is None:
        return
    if isinstance(replicas, bool) or not isinstance(replicas, int):
        raise TypeError(f"num_replicas={replicas!r}: expected an int or 'auto'")
    if replicas <= 0:
        raise ValueError(f"num_replicas={replicas}: num_replicas is expected to larger than 0")


def _check_actor_options(actor_options) -> None:
    if not isinstance(actor_options, dict):
        raise TypeError(f"ray_actor_options={actor_options!r}: expected a dict")
    unknown = sorted(set(actor_options) - _ACTOR_OPTIONS)
    if unknown:
        raise ValueError(
            f"ray_actor_options has keys {unknown} that a deployment may not set; allowed: {sorted(_ACTOR_OPTIONS)}"
        )


def _check_placement_group(options: dict) -> None:
    """Ray's checks of where replicas go: the per-replica placement group's options need
    `placement_group_bundles`, which must make a valid group, and the replica itself must fit
    bundle 0 (where it runs); `max_replicas_per_node` is 1 to 100, and never with a group."""
    per_node = options.get("max_replicas_per_node")
    if per_node is not None:
        if isinstance(per_node, bool) or not isinstance(per_node, int) or not 1 <= per_node <= 100:
            raise ValueError(f"max_replicas_per_node={per_node!r}: expected an int from 1 to 100")
        if options.get("placement_group_bundles") is not None:
            raise ValueError(
                "Setting max_replicas_per_node and placement_group_bundles at the same time is not allowed"
            )
    bundles = options.get("placement_group_bundles")
    if bundles is None:
        for key in ("placement_group_strategy", "placement_group_bundle_label_selector"):
            if options.get(key) is not None:
                raise ValueError(
                    f"{key} was given without placement_group_bundles: a replica's group needs its bundles"
                )
        return
    from oxray.util.placement_group import validate_placement_group

    validate_placement_group(
        bundles,
        strategy=options.get("placement_group_strategy") or "PACK",
        bundle_label_selector=options.get("placement_group_bundle_label_selector"),
    )
    actor = options.get("ray_actor_options") or {}
    needs = {"CPU": actor.get("num_cpus", 1), "GPU": actor.get("num_gpus", 0), **(actor.get("resources") or {})}
    if actor.get("memory"):
        needs["memory"] = actor["memory"]
    short = {k: v for k, v in needs.items() if v and bundles[0].get(k, 0) < v}
    if short:
        raise ValueError(
            f"the replica's resources {short} do not fit placement_group_bundles[0] {bundles[0]}: the replica "
            "runs in bundle 0 (give it room there, or lower its ray_actor_options)"
        )


class Deployment:
    """A deployment: a class or function and its options (`@serve.deployment`)."""

    def __init__(self, func_or_class, options: dict, _internal: bool = False):
        if not _internal:
            raise RuntimeError("The Deployment constructor should not be called directly. Use `@serve.deployment`")
        self._func_or_class = func_or_class
        self._options = dict(options)

    @property
    def name(self) -> str:
        return self._options.get("name") or self._func_or_class.__name__

    @property
    def func_or_class(self):
        return self._func_or_class

    @property
    def num_replicas(self):
        return self._options.get("num_replicas", 1)

    @property
    def user_config(self):
        return self._options.get("user_config")

    @property
    def max_ongoing_requests(self) -> int:
        return self._options.get("max_ongoing_requests", 5)

    @property
    def max_queued_requests(self) -> int:
        return self._options.get("max_queued_requests", -1)

    @property
    def ray_actor_options(self) -> dict:
        return dict(self._options.get("ray_actor_options") or {})

    @property
    def logging_config(self) -> Optional[dict]:
        return self._options.get("logging_config")

    def options(self, **options) -> "Deployment":
        _check(options)
        merged = {**self._options, **options}
        if "num_replicas" in options and "autoscaling_config" not in options:
            merged.pop("autoscaling_config", None)  # a count given now replaces autoscaling
        if "autoscaling_config" in options and "num_replicas" not in options:
            merged.pop("num_replicas", None)
        _check(merged)
        return Deployment(self._func_or_class, merged, _internal=True)

    def bind(self, *args, **kwargs) -> "Application":
        if not inspect.isclass(self._func_or_class) and (args or kwargs):
            raise ValueError("function deployments take no init_args or init_kwargs: bind() it with no arguments")
        return Application(self, args, kwargs)

    def __call__(self, *args, **kwargs):
        raise RuntimeError("Deployments cannot be constructed directly. Use `.bind()` instead.")

    def setting(self, key: str):
        return self._options.get(key, _DEFAULTS.get(key))


class Application:
    """A deployment bound to its constructor's arguments: what `serve.run` takes."""

    def __init__(self, deployment: Deployment, args: tuple, kwargs: dict):
        self._deployment = deployment
        self._args = args
        self._kwargs = kwargs


def deployment(
    _func_or_class: Optional[Callable] = None,
    **options: Any,
):
    """`@serve.deployment` or `@serve.deployment(num_replicas=2, ...)`."""
    _check(options)

    def wrap(func_or_class):
        return Deployment(func_or_class, options, _internal=True)

    return wrap(_func_or_class) if _func_or_class is not None else wrap
