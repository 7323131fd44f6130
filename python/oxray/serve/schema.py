"""`serve.status()`'s types, as Ray Serve 2.60 defines them: the status enums are
`str` enums (`status == "RUNNING"` holds) and the overviews dataclasses."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Dict, Optional


class ApplicationStatus(str, Enum):
    NOT_STARTED = "NOT_STARTED"
    DEPLOYING = "DEPLOYING"
    DEPLOY_FAILED = "DEPLOY_FAILED"
    RUNNING = "RUNNING"
    UNHEALTHY = "UNHEALTHY"
    DELETING = "DELETING"


class DeploymentStatus(str, Enum):
    UPDATING = "UPDATING"
    HEALTHY = "HEALTHY"
    UNHEALTHY = "UNHEALTHY"
    DEPLOY_FAILED = "DEPLOY_FAILED"
    UPSCALING = "UPSCALING"
    DOWNSCALING = "DOWNSCALING"


class DeploymentStatusTrigger(str, Enum):
    UNSPECIFIED = "UNSPECIFIED"
    CONFIG_UPDATE_STARTED = "CONFIG_UPDATE_STARTED"
    CONFIG_UPDATE_COMPLETED = "CONFIG_UPDATE_COMPLETED"
    UPSCALE_COMPLETED = "UPSCALE_COMPLETED"
    DOWNSCALE_COMPLETED = "DOWNSCALE_COMPLETED"
    AUTOSCALING = "AUTOSCALING"
    REPLICA_STARTUP_FAILED = "REPLICA_STARTUP_FAILED"
    DEPLOYMENT_ACTOR_FAILED = "DEPLOYMENT_ACTOR_FAILED"
    HEALTH_CHECK_FAILED = "HEALTH_CHECK_FAILED"
    INTERNAL_ERROR = "INTERNAL_ERROR"
    DELETING = "DELETING"


class ReplicaState(str, Enum):
    STARTING = "STARTING"
    UPDATING = "UPDATING"
    RECOVERING = "RECOVERING"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"
    PENDING_MIGRATION = "PENDING_MIGRATION"


class ProxyStatus(str, Enum):
    STARTING = "STARTING"
    HEALTHY = "HEALTHY"
    UNHEALTHY = "UNHEALTHY"
    DRAINING = "DRAINING"
    DRAINED = "DRAINED"


@dataclass
class DeploymentStatusOverview:
    status: DeploymentStatus
    status_trigger: DeploymentStatusTrigger
    replica_states: Dict[str, int]
    message: str = ""


@dataclass
class ApplicationStatusOverview:
    status: ApplicationStatus
    message: str
    last_deployed_time_s: float
    deployments: Dict[str, DeploymentStatusOverview]


@dataclass
class ServeStatus:
    proxies: Dict[str, ProxyStatus] = field(default_factory=dict)
    applications: Dict[str, ApplicationStatusOverview] = field(default_factory=dict)
    target_capacity: Optional[float] = None


def status_from_reports(reports: list) -> ServeStatus:
    """The controller's status dicts as Ray's types."""
    applications = {}
    for app in reports:
        deployments = {
            name: DeploymentStatusOverview(
                status=DeploymentStatus(d["status"]),
                status_trigger=DeploymentStatusTrigger(d["status_trigger"]),
                replica_states=dict(d["replica_states"]),
                message=d["message"],
            )
            for name, d in app["deployments"].items()
        }
        applications[app["name"]] = ApplicationStatusOverview(
            status=ApplicationStatus(app["status"]),
            message=app["message"],
            last_deployed_time_s=app["last_deployed_time_s"],
            deployments=deployments,
        )
    return ServeStatus(applications=applications)
