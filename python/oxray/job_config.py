"""Ray's `JobConfig`: a driver's job settings (namespace, runtime_env, default actor
lifetime) handed to `init(job_config=...)` as one object."""

from __future__ import annotations

import os
from typing import Any, Dict, Optional


class JobConfig:
    """What `init(job_config=...)` applies to the driver's job: its namespace, runtime_env
    (`init`'s own `namespace=` and `runtime_env=` win over them), code search path and the
    lifetime of actors created without one (theirs, and those their tasks and actors create).
    Settings oxray does not carry out (the JVM's, metadata) raise when given rather than
    being dropped."""

    def __init__(
        self,
        jvm_options: Optional[list] = None,
        code_search_path: Optional[list] = None,
        runtime_env: Optional[dict] = None,
        _client_job: bool = False,
        metadata: Optional[Dict[str, str]] = None,
        ray_namespace: Optional[str] = None,
        default_actor_lifetime: str = "non_detached",
        _py_driver_sys_path: Optional[list] = None,
    ):
        for name, value in (("jvm_options", jvm_options), ("_py_driver_sys_path", _py_driver_sys_path)):
            if value:
                raise NotImplementedError(
                    f"JobConfig({name}={value!r}) is not supported by oxray: it runs Python workers only"
                )
        self.set_code_search_path(code_search_path)
        self.set_metadata(metadata)
        self.set_runtime_env(runtime_env)
        if ray_namespace is not None:
            self.set_ray_namespace(ray_namespace)
        else:
            self.ray_namespace = None
        self.set_default_actor_lifetime(default_actor_lifetime)
        self._client_job = _client_job

    def set_code_search_path(self, code_search_path: Optional[list]) -> None:
        """Directories (or zip files) the job's workers import code from: added to their
        PYTHONPATH, which is what Ray's `code_search_path` means for Python."""
        paths = list(code_search_path or [])
        for path in paths:
            if not isinstance(path, (str, os.PathLike)):
                raise TypeError(f"JobConfig(code_search_path=...): expected a list of paths, got {path!r}")
        self.code_search_path = [os.path.abspath(os.fspath(p)) for p in paths]

    def set_metadata(self, metadata: Optional[Dict[str, str]]) -> None:
        if metadata:
            raise NotImplementedError(
                f"JobConfig(metadata={metadata!r}) is not supported by oxray for a driver's job: "
                "submit the script with `oxray job submit --metadata-json` to attach metadata"
            )
        self.metadata = {}

    def set_runtime_env(self, runtime_env: Optional[dict], validate: bool = False) -> None:
        from oxray._private.options import validate_runtime_env

        validate_runtime_env(runtime_env)
        self.runtime_env = dict(runtime_env or {})

    def set_ray_namespace(self, ray_namespace: str) -> None:
        from oxray._private.options import validate_namespace

        validate_namespace(ray_namespace)
        self.ray_namespace = ray_namespace

    def set_default_actor_lifetime(self, default_actor_lifetime: str) -> None:
        if default_actor_lifetime not in ("detached", "non_detached"):
            raise ValueError(
                f"Default actor lifetime must be one of 'detached' or 'non_detached', got {default_actor_lifetime!r}"
            )
        self.default_actor_lifetime = default_actor_lifetime

    @classmethod
    def from_json(cls, job_config_json: Dict[str, Any]) -> "JobConfig":
        return cls(**job_config_json)

    def __repr__(self):
        return (
            f"JobConfig(runtime_env={self.runtime_env!r}, ray_namespace={self.ray_namespace!r}, "
            f"default_actor_lifetime={self.default_actor_lifetime!r})"
        )
