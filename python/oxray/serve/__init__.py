"""`oxray.serve`: Ray Serve's API over oxray's engine (`oxray-serve`'s controller).

Deployments (classes and functions, `.options()`, `.bind()`, application
graphs), `serve.run`, `start`, `status`, `delete`, `shutdown`, handles
(`DeploymentHandle`, `DeploymentResponse`, `DeploymentResponseGenerator`), `user_config` with `reconfigure`,
health checks, graceful shutdown, rolling updates, autoscaling, `@serve.batch`,
`@serve.multiplexed`, and HTTP through each node's Rust proxy: plain
`__call__(request)` deployments and `@serve.ingress` ASGI apps (FastAPI);
WebSockets; gRPC through each node's Rust gRPC proxy (`gRPCOptions`); config
files through Ray's REST API. What is not there raises `NotImplementedError`
naming it.
"""

from __future__ import annotations

from oxray.serve import handle
from oxray.serve.api import (
    RunTarget,
    delete,
    get_app_handle,
    get_deployment_handle,
    run,
    run_many,
    shutdown,
    start,
    status,
)
from oxray.serve.batching import batch
from oxray.serve.config import HTTPOptions, ProxyLocation
from oxray.serve.context import get_replica_context
from oxray.serve.deployment import Application, Deployment, deployment
from oxray.serve.handle import DeploymentHandle, DeploymentResponse, DeploymentResponseGenerator
from oxray.serve.ingress import ingress
from oxray.serve.multiplex import get_multiplexed_model_id, multiplexed

__all__ = [
    "Application",
    "Deployment",
    "HTTPOptions",
    "ProxyLocation",
    "RunTarget",
    "DeploymentHandle",
    "DeploymentResponse",
    "DeploymentResponseGenerator",
    "batch",
    "delete",
    "deployment",
    "get_app_handle",
    "get_deployment_handle",
    "get_multiplexed_model_id",
    "get_replica_context",
    "handle",
    "ingress",
    "multiplexed",
    "run",
    "run_many",
    "shutdown",
    "start",
    "status",
]
