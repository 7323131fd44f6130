"""Building an application from a config (`import_path`, `args`, per-deployment overrides), as
Ray's `build_serve_application` task does: it runs as a task in the cluster, under the
application's `runtime_env`, so the controller never imports user code. It returns what
`serve.run` would deploy: the ingress deployment's name and each deployment's settings."""

from __future__ import annotations

import importlib
import inspect


def import_attr(import_path: str):
    """`module.sub:attr` or `module.attr`, as Ray reads an import path."""
    if ":" in import_path:
        module_name, _, attr = import_path.partition(":")
    else:
        module_name, _, attr = import_path.rpartition(".")
    if not module_name or not attr:
        raise ValueError(f"import_path {import_path!r}: expected 'module:attribute' or 'module.attribute'")
    value = importlib.import_module(module_name)
    for part in attr.split("."):
        value = getattr(value, part)
    return value


def _bound_applications(app, seen=None):
    from oxray.serve.deployment import Application

    seen = set() if seen is None else seen
    if id(app) in seen:
        return
    seen.add(id(app))
    yield app
    for value in list(app._args) + list(app._kwargs.values()):
        for item in value if type(value) in (list, tuple) else value.values() if type(value) is dict else [value]:
            if isinstance(item, Application):
                yield from _bound_applications(item, seen)


def application_of(app_config: dict):
    """The config's `Application`: the import path's, or its builder's result for `args`, with
    the config's per-deployment overrides applied."""
    from oxray.serve.deployment import Application

    import_path = app_config["import_path"]
    target = import_attr(import_path)
    args = app_config.get("args") or {}
    if not isinstance(target, Application):
        if not callable(target):
            raise TypeError(f"import_path {import_path!r} is neither an application nor a builder function")
        parameters = inspect.signature(target).parameters
        target = target(args) if parameters else target()
        if not isinstance(target, Application):
            raise TypeError(
                f"the builder {import_path!r} returned {type(target).__name__}, not an application (Model.bind())"
            )
    elif args:
        raise TypeError(f"args were given for {import_path!r}, which is an application, not a builder function")
    overrides = {o["name"]: {k: v for k, v in o.items() if k != "name"} for o in app_config.get("deployments") or []}
    found = set()
    for bound in _bound_applications(target):
        options = overrides.get(bound._deployment.name)
        if options is not None:
            found.add(bound._deployment.name)
            if isinstance(options.get("num_replicas"), int) and "autoscaling_config" in options:
                raise ValueError(
                    f"deployment {bound._deployment.name!r}: num_replicas and autoscaling_config cannot both be set"
                )
            bound._deployment = bound._deployment.options(**options)
    missing = set(overrides) - found
    if missing:
        raise ValueError(f"the config overrides deployments {sorted(missing)}, which application {import_path!r} lacks")
    return target


def build_application(app_config: dict, build_version: str):
    """(ingress deployment name, deployments' settings) for the controller's `deploy`.

    As Ray's config deploys, a deployment's replicas restart only for a change that needs it: its
    code version is the hash of what its replicas are built from (`import_path`, `runtime_env`,
    `args`, its place in the graph) and of its options that a running replica cannot take
    (`ray_actor_options`, the placement group; and here `max_ongoing_requests`, the replica actor's
    concurrency). Any
    other change (`num_replicas`, `autoscaling_config`, health checks, graceful shutdown, queue
    limits) applies in place, and a new `user_config` reconfigures the running replicas."""
    import hashlib
    import json

    from oxray.serve.api import _collect

    name = app_config.get("name", "default")
    deployments: dict = {}
    ingress = _collect(application_of(app_config), name, build_version, deployments)
    source = {k: app_config.get(k) for k in ("import_path", "runtime_env", "args")}
    for deployment in deployments.values():
        heavy = {
            "source": source,
            "deployment": deployment["name"],
            "ray_actor_options": deployment["ray_actor_options"],
            "placement_group": deployment.get("placement_group"),
            "max_replicas_per_node": deployment.get("max_replicas_per_node"),
            "max_ongoing_requests": deployment["max_ongoing_requests"],
        }
        digest = hashlib.sha256(json.dumps(heavy, sort_keys=True, default=repr).encode()).hexdigest()[:16]
        deployment["engine"]["code_version"] = digest
    return ingress.deployment_name, list(deployments.values())
