"""A replica's log file, where and as Ray Serve writes it:
`<session>/logs/serve/replica_<app>_<deployment>_<replica id>.log` (private to the user), holding
the `ray.serve` logger's records (the user's code may log there too, as in Ray), an access-log
line per request (`GET /calc 200 3.5ms`, or `CALL __call__ OK 1.2ms` for a handle's call) and the
traceback of each request that failed. The node's Logs page lists it under `logs/serve/`. Ray's
`LoggingConfig` (the deployment's, else its application's, else Serve's) sets the level, TEXT or
JSON lines, another directory, whether access lines are written, and standard `LogRecord`
attributes added to every line."""

from __future__ import annotations

import json
import logging
import os
import traceback
from typing import Optional

LOGGER_NAME = "ray.serve"
# Ray's text format: `INFO 2026-11-28 07:00:00,123 Calc abcd1234 <request id> -- GET /calc 200 3.5ms`.
FORMAT = "%(levelname)s %(asctime)s %(deployment)s %(replica)s %(request_id)s -- %(message)s"


class _ReplicaFields(logging.Filter):
    """Gives each record the replica's fields (a record's own request id wins)."""

    def __init__(self, app: str, deployment: str, replica: str):
        super().__init__()
        self.fields = {"application": app, "deployment": deployment, "replica": replica, "request_id": ""}

    def filter(self, record: logging.LogRecord) -> bool:
        for name, value in self.fields.items():
            if not hasattr(record, name):
                setattr(record, name, value)
        return True


def file_name(app: str, deployment: str, replica: str) -> str:
    """The file's name in `logs/serve/` (what the replica's details call `log_file_path`)."""
    safe = [part.replace(os.sep, "_") for part in (app, deployment, replica)]
    return "replica_{}_{}_{}.log".format(*safe)


class _JsonFormatter(logging.Formatter):
    """One JSON object per record, with Ray's keys."""

    def __init__(self, attrs: list):
        super().__init__()
        self.attrs = attrs

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "levelname": record.levelname,
            "asctime": self.formatTime(record),
            "deployment": record.deployment,
            "replica": record.replica,
            "application": record.application,
            "request_id": record.request_id,
            "message": record.getMessage(),
        }
        if record.exc_info:
            out["exc_text"] = self.formatException(record.exc_info)
        for attr in self.attrs:
            out[attr] = getattr(record, attr, None)
        return json.dumps(out, default=str)


class ReplicaLog:
    """The replica's log: the `ray.serve` logger, and its file once `open` (None outside a
    node's session)."""

    def __init__(self, app: str, deployment: str, replica: str):
        self.names = (app, deployment, replica)
        self.logger = logging.getLogger(LOGGER_NAME)
        self.path: Optional[str] = None
        self.access_lines = True

    def open(self, config: Optional[dict]) -> None:
        """Writes to the file as `config` (Ray's `LoggingConfig` as a dict; None: its defaults) says."""
        config = config or {}
        self.access_lines = config.get("enable_access_log", True)
        directory = config.get("logs_dir")
        if directory is None:
            session = os.environ.get("OXRAY_SESSION_DIR")
            if not session:
                return
            directory = os.path.join(session, "logs", "serve")
        os.makedirs(directory, mode=0o700, exist_ok=True)
        self.path = os.path.join(directory, file_name(*self.names))
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        handler = logging.StreamHandler(os.fdopen(fd, "a", buffering=1))
        attrs = list(config.get("additional_log_standard_attrs") or [])
        if config.get("encoding", "TEXT") == "JSON":
            handler.setFormatter(_JsonFormatter(attrs))
        else:
            extra = "".join(f" %({attr})s" for attr in attrs)
            handler.setFormatter(logging.Formatter(FORMAT.replace(" -- ", f"{extra} -- ")))
        handler.addFilter(_ReplicaFields(*self.names))
        self.logger.addHandler(handler)
        self.logger.setLevel(config.get("log_level", "INFO"))

    def access(self, line: str, request_id: str = "") -> None:
        if self.access_lines:
            self.logger.info(line, extra={"request_id": request_id})

    def failure(self, error: BaseException, request_id: str = "") -> None:
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        self.logger.error("Request failed:\n%s", text.rstrip(), extra={"request_id": request_id})
