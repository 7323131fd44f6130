"""Serve's driver-side API: `serve.run`, `status`, `delete`, `shutdown`, the
handles to applications and deployments. The controller actor is started on
first use, as Ray starts it."""

from __future__ import annotations

import sys
import threading
import uuid
from dataclasses import dataclass
from typing import Any, Optional

import oxray as ray
from oxray import cloudpickle
from oxray.serve import handle as handles
from oxray.serve.config import HTTPOptions, gRPCOptions, proxy_location_of
from oxray.serve.deployment import Application, Deployment, autoscaling_of
from oxray.serve.exceptions import RayServeException
from oxray.serve.schema import LoggingConfig, ServeStatus, status_from_reports

# How long serve.run waits for an application to be RUNNING, and delete/shutdown for it to go.
DEPLOY_TIMEOUT_S = 600.0
DELETE_TIMEOUT_S = 60.0
SHUTDOWN_TIMEOUT_S = 30.0
_lock = threading.Lock()


def _start_controller():
    from oxray.serve._private.controller import ServeControllerActor

    if not ray.is_initialized():
        ray.init()
    return (
        ray.remote(ServeControllerActor)
        .options(
            name=handles.CONTROLLER_NAME,
            namespace=handles.SERVE_NAMESPACE,
            lifetime="detached",
            get_if_exists=True,
            num_cpus=0,
            max_concurrency=64,
        )
        .remote()
    )


def start(proxy_location=None, http_options=None, grpc_options=None, logging_config=None, **kwargs) -> None:
    """Starts Serve: its controller, and HTTP proxies with `http_options` where `proxy_location`
    says (every node by default, on 127.0.0.1:8000), with gRPC proxies beside them when
    `grpc_options` names servicer functions (port 9000 by default)."""
    for option, value in kwargs.items():
        if value is not None:
            raise NotImplementedError(f"serve.start({option}=...) is not supported by oxray's Serve yet")
    logging_config = LoggingConfig.of(logging_config)
    grpc = gRPCOptions.of(grpc_options)
    controller = _start_controller()
    if logging_config is not None:
        ray.get(controller.set_logging_config.remote(logging_config.dict()))
    _start_http(controller, HTTPOptions.of(http_options), proxy_location_of(proxy_location), grpc)


def _start_http(controller, options: HTTPOptions, location: str, grpc: Optional[gRPCOptions] = None) -> str:
    return ray.get(controller.start_http.remote(options.to_wire(), location, grpc.to_wire() if grpc else None))


def _collect(
    app: Application, name: str, code_version: str, deployments: dict, seen: Optional[dict] = None
) -> handles.DeploymentHandle:
    """The application graph's deployments, each bound deployment in another's arguments (in
    lists, tuples and dicts too) replaced by a handle to it. As Ray's `build_app`: the same bound
    application is one deployment, and another one with a name already taken gets `Name_1`,
    `Name_2`, ... (its arguments must not replace the first one's)."""
    seen = {} if seen is None else seen
    if id(app) in seen:
        return seen[id(app)][1]
    deployment = app._deployment
    unique, n = deployment.name, 0
    while unique in deployments:
        n += 1
        unique = f"{deployment.name}_{n}"
    handle = handles.DeploymentHandle(unique, name)
    seen[id(app)] = (app, handle)  # the app too: its id stays its own while the graph is built
    deployments[unique] = None  # the name is taken before the children are named, as in Ray

    def resolve(value):
        if isinstance(value, Application):
            return _collect(value, name, code_version, deployments, seen)
        if isinstance(value, Deployment):
            raise TypeError(f"deployment {value.name!r} was passed unbound: pass {value.name}.bind(...) instead")
        if type(value) in (list, tuple):
            return type(value)(resolve(v) for v in value)
        if type(value) is dict:
            return {k: resolve(v) for k, v in value.items()}
        return value

    args = tuple(resolve(a) for a in app._args)
    kwargs = {k: resolve(v) for k, v in app._kwargs.items()}
    user_config = deployment.setting("user_config")
    autoscaling = autoscaling_of(deployment._options)
    deployments[unique] = {
        "name": unique,
        "definition": cloudpickle.dumps(deployment.func_or_class),
        "arguments": cloudpickle.dumps((args, kwargs)),
        "ray_actor_options": deployment.ray_actor_options,
        "user_config": user_config,
        "has_user_config": "user_config" in deployment._options and user_config is not None,
        "max_ongoing_requests": deployment.max_ongoing_requests,
        "max_queued_requests": deployment.max_queued_requests,
        "backpressure_config": deployment.setting("backpressure_config"),
        "graceful_shutdown_wait_loop_s": float(deployment.setting("graceful_shutdown_wait_loop_s")),
        "logging_config": deployment.logging_config,
        "max_replicas_per_node": deployment.setting("max_replicas_per_node"),
        "placement_group": None
        if deployment.setting("placement_group_bundles") is None
        else {
            "bundles": deployment.setting("placement_group_bundles"),
            "strategy": deployment.setting("placement_group_strategy") or "PACK",
            "bundle_label_selector": deployment.setting("placement_group_bundle_label_selector"),
        },
        "engine": {
            "code_version": code_version,
            "config_version": repr(user_config),
            "num_replicas": None if autoscaling else deployment.num_replicas,
            "autoscaling_config": autoscaling,
            "health_check_period_s": float(deployment.setting("health_check_period_s")),
            "health_check_timeout_s": float(deployment.setting("health_check_timeout_s")),
            "graceful_shutdown_timeout_s": float(deployment.setting("graceful_shutdown_timeout_s")),
            "max_constructor_retry_count": int(deployment.setting("max_constructor_retry_count")),
            "rolling_update_percentage": float(deployment.setting("rolling_update_percentage")),
            "max_surge_percent": float(deployment.setting("max_surge_percent")),
        },
    }
    return handle


def run(
    target: Application,
    blocking: bool = False,
    name: str = "default",
    route_prefix: Optional[str] = "/",
    logging_config=None,
    _local_testing_mode: bool = False,
    **kwargs,
) -> handles.DeploymentHandle:
    """Deploys `target` as application `name` and waits until it is RUNNING; returns a handle to
    its ingress deployment. Every call is a new code version: the replicas are replaced by rolling
    update, as in Ray. `RuntimeError` with the replicas' error when it fails to deploy."""
    for option, value in kwargs.items():
        if value is not None:
            raise NotImplementedError(f"serve.run({option}=...) is not supported by oxray's Serve yet")
    if _local_testing_mode:
        raise NotImplementedError("serve.run(_local_testing_mode=True) is not supported by oxray's Serve yet")
    [ingress] = run_many([RunTarget(target, name, route_prefix, logging_config)], blocking=blocking)
    return ingress


@dataclass
class RunTarget:
    """Ray's `RunTarget`: one application of `serve.run_many`."""

    target: Application
    name: str = "default"
    route_prefix: Optional[str] = "/"
    logging_config: Any = None
    external_scaler_enabled: bool = False


def run_many(
    targets: list,
    blocking: bool = False,
    wait_for_ingress_deployment_creation: bool = True,
    wait_for_applications_running: bool = True,
    _local_testing_mode: bool = False,
) -> list:
    """Ray's `serve.run_many`: deploys every `RunTarget` (all sent before any is waited on), then
    waits until each is RUNNING (unless `wait_for_applications_running=False`); their ingress
    handles, in order. `RuntimeError` naming an application that fails to deploy."""
    if _local_testing_mode:
        raise NotImplementedError("serve.run_many(_local_testing_mode=True) is not supported by oxray's Serve yet")
    checked = []
    for target in targets:
        if not isinstance(target, RunTarget):
            raise TypeError(f"serve.run_many expects RunTarget(...) objects, got {target!r}")
        if not isinstance(target.name, str) or not target.name:
            raise ValueError(f"serve.run(name={target.name!r}): expected a non-empty application name")
        if not isinstance(target.target, Application):
            raise TypeError(
                f"serve.run expects an application (a bound deployment: Model.bind()), got {target.target!r}"
            )
        if target.external_scaler_enabled:
            raise NotImplementedError(
                "RunTarget(external_scaler_enabled=True): oxray's Serve has no external scaler API"
            )
        checked.append((target, LoggingConfig.of(target.logging_config)))
    names = [t.name for t, _ in checked]
    if len(set(names)) != len(names):
        raise ValueError(f"serve.run_many: application names must be unique, got {names}")
    controller = _start_controller()
    if any(t.route_prefix is not None for t, _ in checked):
        # As Ray's serve.run: HTTP with the default options unless serve.start gave others.
        ray.get(controller.ensure_http.remote(HTTPOptions().to_wire()))
    ingresses = []
    for target, logging_config in checked:
        deployments: dict = {}
        ingress = _collect(target.target, target.name, uuid.uuid4().hex, deployments)
        app_logging = logging_config.dict() if logging_config else None
        ray.get(
            controller.deploy.remote(
                target.name,
                target.route_prefix,
                ingress.deployment_name,
                list(deployments.values()),
                logging_config=app_logging,
            )
        )
        ingresses.append(ingress)
    if wait_for_applications_running:
        for target, _ in checked:
            _wait_running(controller, target.name)
    if blocking:
        threading.Event().wait()
    return ingresses


def _wait_running(controller, name: str) -> None:
    status = ray.get(controller.wait_app.remote(name, DEPLOY_TIMEOUT_S))
    if status is None or status["status"] != "RUNNING":
        details = "" if status is None else status["message"]
        if status is not None:
            for deployment_name, d in status["deployments"].items():
                if d["message"]:
                    details += f"\n{deployment_name}: {d['message']}"
        state = "gone" if status is None else status["status"]
        raise RuntimeError(f"Deploying application {name} failed ({state}): {details}".rstrip())


def status() -> ServeStatus:
    try:
        controller = handles.controller()
    except RayServeException:
        return ServeStatus()
    return status_from_reports(ray.get(controller.status.remote()))


def delete(name: str, _blocking: bool = True) -> None:
    try:
        controller = handles.controller()
    except RayServeException:
        return
    ray.get(controller.delete.remote(name))
    if _blocking:
        left = ray.get(controller.wait_app.remote(name, DELETE_TIMEOUT_S, True))
        if left is not None:
            raise TimeoutError(f"Some of these applications weren't deleted after {DELETE_TIMEOUT_S:g}s: [{name!r}]")


def shutdown() -> None:
    try:
        controller = handles.controller()
    except RayServeException:
        print("Nothing to shut down. There's no Serve application running on this Ray cluster.", file=sys.stderr)
        return
    ray.get(controller.shutdown.remote(SHUTDOWN_TIMEOUT_S))
    ray.kill(controller)
    handles.forget_routers()


def get_app_handle(name: str) -> handles.DeploymentHandle:
    ingress = ray.get(handles.controller().ingress_of.remote(name))
    if ingress is None:
        raise RayServeException(f"Application '{name}' does not exist.")
    return handles.DeploymentHandle(ingress, name)


def get_deployment_handle(deployment_name: str, app_name: Optional[str] = None) -> handles.DeploymentHandle:
    if app_name is None:
        from oxray.serve.context import _context

        if _context is None:
            raise RayServeException(
                "Please specify an application name when getting a deployment handle outside of a Serve application."
            )
        app_name = _context.app_name
    statuses = ray.get(handles.controller().status.remote())
    app = next((s for s in statuses if s["name"] == app_name), None)
    if app is None or deployment_name not in app["deployments"]:
        raise RayServeException(f"Deployment '{deployment_name}' in application '{app_name}' does not exist.")
    return handles.DeploymentHandle(deployment_name, app_name)
