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


# The attributes of Python's `LogRecord` a `LoggingConfig` may add to every record.
LOGRECORD_STANDARD_ATTRS = (
    "args",
    "asctime",
    "created",
    "exc_info",
    "exc_text",
    "filename",
    "funcName",
    "levelname",
    "levelno",
    "lineno",
    "module",
    "msecs",
    "msg",
    "name",
    "pathname",
    "process",
    "processName",
    "relativeCreated",
    "stack_info",
    "taskName",
    "thread",
    "threadName",
)
_LOGGING_FIELDS = ("encoding", "log_level", "logs_dir", "enable_access_log", "additional_log_standard_attrs")


class LoggingConfig:
    """Ray Serve's `LoggingConfig` for replicas' logs: `encoding` ("TEXT", or `RAY_SERVE_LOG_ENCODING`;
    "JSON" for one JSON object per line), `log_level` ("INFO"; an int becomes its name), `logs_dir`
    (None: the session's `logs/serve/`), `enable_access_log` (True) and
    `additional_log_standard_attrs` (`LogRecord` attributes added to every record). Extra keys are
    refused, as Ray's schema forbids them."""

    def __init__(
        self,
        encoding: Optional[str] = None,
        log_level="INFO",
        logs_dir: Optional[str] = None,
        enable_access_log: bool = True,
        additional_log_standard_attrs=(),
    ):
        import logging
        import os

        encoding = encoding if encoding is not None else os.environ.get("RAY_SERVE_LOG_ENCODING", "TEXT")
        if encoding not in ("TEXT", "JSON"):
            raise ValueError(f"Got '{encoding}' for encoding. Encoding must be one of {{'TEXT', 'JSON'}}.")
        if isinstance(log_level, int) and not isinstance(log_level, bool):
            if log_level not in logging._levelToName:
                raise ValueError(
                    f'Got "{log_level}" for log_level. log_level must be one of {list(logging._levelToName)}.'
                )
            log_level = logging._levelToName[log_level]
        elif log_level not in logging._nameToLevel:
            raise ValueError(f'Got "{log_level}" for log_level. log_level must be one of {list(logging._nameToLevel)}.')
        if logs_dir is not None and not isinstance(logs_dir, str):
            raise TypeError(f"logs_dir={logs_dir!r}: expected a directory path or None")
        if not isinstance(enable_access_log, bool):
            raise TypeError(f"enable_access_log={enable_access_log!r}: expected True or False")
        for attr in additional_log_standard_attrs:
            if attr not in LOGRECORD_STANDARD_ATTRS:
                raise ValueError(
                    f"Unknown attribute '{attr}'. Additional log standard attributes must be one of "
                    f"{set(LOGRECORD_STANDARD_ATTRS)}."
                )
        self.encoding = encoding
        self.log_level = log_level
        self.logs_dir = logs_dir
        self.enable_access_log = enable_access_log
        self.additional_log_standard_attrs = sorted(set(additional_log_standard_attrs))

    @classmethod
    def of(cls, value) -> Optional["LoggingConfig"]:
        """None, a dict of its fields (others are refused by name) or a `LoggingConfig`."""
        if value is None or isinstance(value, cls):
            return value
        if isinstance(value, dict):
            extra = sorted(set(value) - set(_LOGGING_FIELDS))
            if extra:
                raise ValueError(f"LoggingConfig: extra inputs are not permitted: {extra}")
            return cls(**value)
        raise TypeError(f"logging_config={value!r}: expected a dict or a LoggingConfig")

    def dict(self) -> dict:
        return {name: getattr(self, name) for name in _LOGGING_FIELDS}

    model_dump = dict

    def __eq__(self, other) -> bool:
        return isinstance(other, LoggingConfig) and self.dict() == other.dict()

    def __repr__(self) -> str:
        return "LoggingConfig(" + ", ".join(f"{k}={v!r}" for k, v in self.dict().items()) + ")"
