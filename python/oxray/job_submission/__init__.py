"""`oxray.job_submission`: Ray's Jobs SDK (`JobSubmissionClient`, `JobStatus`,
`JobDetails`, `JobType`) over the head's Jobs REST API, with the same methods,
results and errors as Ray's, so `from oxray.job_submission import ...` replaces
`from ray.job_submission import ...`.

The address defaults to `RAY_API_SERVER_ADDRESS` / `RAY_ADDRESS` (when http) and
then the cluster `oxray start --head` runs on this host; the token to
`OXRAY_TOKEN` / `RAY_AUTH_TOKEN` and then that cluster's token file, sent only to that cluster's
own address. A local
`working_dir` (or `py_modules` entry) is zipped and uploaded as Ray's clients
do (`_ray_pkg_<hash>.zip`)."""

from __future__ import annotations

import asyncio
import enum
import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Dict, List, Optional, Union

from oxray._private import head_http
from oxray.job_submission import _package


class JobStatus(str, enum.Enum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    STOPPED = "STOPPED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"

    def __str__(self) -> str:
        return f"{self.value}"

    def is_terminal(self) -> bool:
        return self.value in ("STOPPED", "SUCCEEDED", "FAILED")


class JobType(str, enum.Enum):
    SUBMISSION = "SUBMISSION"
    DRIVER = "DRIVER"


@dataclass
class JobDetails:
    """A job as `GET /api/jobs/<id>` describes it (Ray's `JobDetails`)."""

    type: JobType
    entrypoint: str
    status: JobStatus
    job_id: Optional[str] = None
    submission_id: Optional[str] = None
    driver_info: Optional[dict] = None
    message: Optional[str] = None
    error_type: Optional[str] = None
    start_time: Optional[int] = None
    end_time: Optional[int] = None
    metadata: Dict[str, str] = field(default_factory=dict)
    runtime_env: Dict[str, Any] = field(default_factory=dict)
    driver_agent_http_address: Optional[str] = None
    driver_node_id: Optional[str] = None
    driver_exit_code: Optional[int] = None

    @classmethod
    def from_json(cls, value: dict) -> "JobDetails":
        known = {k: value.get(k) for k in cls.__dataclass_fields__ if k in value}
        known["type"] = JobType(value["type"])
        known["status"] = JobStatus(value["status"])
        known["metadata"] = value.get("metadata") or {}
        known["runtime_env"] = value.get("runtime_env") or {}
        return cls(**known)


JobInfo = JobDetails


class JobSubmissionClient:
    """Submits and manages jobs on an oxray (or Ray) cluster's Jobs API."""

    def __init__(
        self,
        address: Optional[str] = None,
        create_cluster_if_needed: bool = False,
        cookies: Optional[Dict[str, Any]] = None,
        metadata: Optional[Dict[str, Any]] = None,
        headers: Optional[Dict[str, Any]] = None,
        verify: Optional[Union[bool, str]] = True,
    ):
        if create_cluster_if_needed:
            raise ValueError("create_cluster_if_needed=True is not supported by oxray: start one with `oxray start`")
        if verify is not True and not isinstance(verify, str):
            raise ValueError(
                f"verify={verify!r} is not supported by oxray's client: an https:// head is always verified, "
                "against OXRAY_TLS_CA or a CA bundle given as verify='/path/to/ca.pem'"
            )
        self._tls = head_http.tls_context(verify if isinstance(verify, str) else None)
        current = head_http.local_cluster()  # this host's cluster: the default address and token
        self._address = head_http.resolve_address(address, current, "JobSubmissionClient")
        self._headers = dict(headers or {})
        if not any(k.lower() == "authorization" for k in self._headers):
            token = head_http.token_for(current, self._address)
            if token:
                self._headers["Authorization"] = f"Bearer {token}"
        if cookies:
            self._headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in cookies.items())
        self._default_metadata = dict(metadata or {})
        self.get_version()

    # -- HTTP --

    def _request(self, method: str, path: str, body: Optional[bytes] = None, content_type: Optional[str] = None):
        request = urllib.request.Request(self._address + path, data=body, method=method, headers=self._headers)
        if content_type:
            request.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(request, timeout=300, context=self._tls) as reply:
                return reply.status, reply.read()
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")
            if e.code in (401, 403):
                raise head_http.auth_error(text) from None
            return e.code, text.encode()
        except urllib.error.URLError as e:
            raise ConnectionError(f"Failed to connect to the Jobs API at {self._address}: {e.reason}") from None

    def _json(self, method: str, path: str, payload=None):
        body = None if payload is None else json.dumps(payload).encode()
        status, data = self._request(method, path, body, "application/json" if body is not None else None)
        if status != 200:
            raise RuntimeError(f"Request failed with status code {status}: {data.decode(errors='replace')}.")
        return json.loads(data) if data else None

    def get_version(self) -> str:
        return self._json("GET", "/api/version")["version"]

    def _put_package(self, name: str, data: bytes) -> str:
        """Uploads a package unless the server has it; its `gcs://` URI."""
        status, _ = self._request("GET", f"/api/packages/gcs/{name}")
        if status == 404:
            status, text = self._request("PUT", f"/api/packages/gcs/{name}", data, "application/octet-stream")
            if status != 200:
                raise RuntimeError(f"Request failed with status code {status}: {text.decode(errors='replace')}.")
        return f"gcs://{name}"

    def _upload(self, runtime_env: dict) -> dict:
        """Uploads local working_dir and py_modules as Ray's clients do; URIs pass through."""
        env = dict(runtime_env)
        working_dir = env.get("working_dir")
        if isinstance(working_dir, str) and "://" not in working_dir:
            env["working_dir"] = self._put_package(*_package.zip_directory(working_dir, env.get("excludes") or []))
        modules = env.get("py_modules")
        if isinstance(modules, list):
            uris = []
            for module in modules:
                module = os.fspath(module) if isinstance(module, os.PathLike) else module
                if not isinstance(module, str):
                    raise TypeError(f"py_modules entries must be paths or URIs, got {module!r}")
                if "://" in module:
                    uris.append(module)
                elif module.endswith(".whl"):
                    with open(module, "rb") as f:
                        uris.append(self._put_package(os.path.basename(module), f.read()))
                else:
                    package = _package.zip_directory(
                        module, env.get("excludes") or [], what="py_modules entry", include_parent_dir=True
                    )
                    uris.append(self._put_package(*package))
            env["py_modules"] = uris
        return env

    # -- Ray's methods --

    def submit_job(
        self,
        *,
        entrypoint: str,
        job_id: Optional[str] = None,
        runtime_env: Optional[Dict[str, Any]] = None,
        metadata: Optional[Dict[str, str]] = None,
        submission_id: Optional[str] = None,
        entrypoint_num_cpus: Optional[float] = None,
        entrypoint_num_gpus: Optional[float] = None,
        entrypoint_memory: Optional[int] = None,
        entrypoint_resources: Optional[Dict[str, float]] = None,
        entrypoint_label_selector: Optional[Dict[str, str]] = None,
    ) -> str:
        if job_id is not None and submission_id is not None:
            raise ValueError("give submission_id or the deprecated job_id, not both")
        payload = {
            "entrypoint": entrypoint,
            "submission_id": submission_id or job_id,
            "runtime_env": self._upload(runtime_env) if runtime_env else None,
            "metadata": {**self._default_metadata, **(metadata or {})} or None,
            "entrypoint_num_cpus": entrypoint_num_cpus,
            "entrypoint_num_gpus": entrypoint_num_gpus,
            "entrypoint_memory": entrypoint_memory,
            "entrypoint_resources": entrypoint_resources,
            "entrypoint_label_selector": entrypoint_label_selector,
        }
        reply = self._json("POST", "/api/jobs/", {k: v for k, v in payload.items() if v is not None})
        return reply["submission_id"]

    def stop_job(self, job_id: str) -> bool:
        return self._json("POST", f"/api/jobs/{job_id}/stop")["stopped"]

    def delete_job(self, job_id: str) -> bool:
        return self._json("DELETE", f"/api/jobs/{job_id}")["deleted"]

    def get_job_info(self, job_id: str) -> JobDetails:
        return JobDetails.from_json(self._json("GET", f"/api/jobs/{job_id}"))

    def list_jobs(self) -> List[JobDetails]:
        return [JobDetails.from_json(j) for j in self._json("GET", "/api/jobs/")]

    def get_job_status(self, job_id: str) -> JobStatus:
        return self.get_job_info(job_id).status

    def get_job_logs(self, job_id: str) -> str:
        return self._json("GET", f"/api/jobs/{job_id}/logs")["logs"]

    async def tail_job_logs(self, job_id: str) -> AsyncIterator[str]:
        """The job's output as it is written, until the job has ended."""
        sent = 0
        while True:
            info = await asyncio.to_thread(self.get_job_info, job_id)
            logs = await asyncio.to_thread(self.get_job_logs, job_id)
            if len(logs) > sent:
                yield logs[sent:]
                sent = len(logs)
            if info.status.is_terminal():
                final = await asyncio.to_thread(self.get_job_logs, job_id)
                if len(final) > sent:
                    yield final[sent:]
                return
            await asyncio.sleep(0.2)


__all__ = ["JobDetails", "JobInfo", "JobStatus", "JobSubmissionClient", "JobType"]
