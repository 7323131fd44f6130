"""`RuntimeEnv`: Ray's runtime environment as a dict, holding only the fields given."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Union


class RuntimeEnv(dict):
    """`RuntimeEnv(env_vars={"A": "1"})` is the dict `{"env_vars": {"A": "1"}}`, usable wherever a
    `runtime_env` dict is (`@remote`, `.options()`, `init()`, job submission)."""

    def __init__(
        self,
        *,
        py_modules: Optional[List[str]] = None,
        working_dir: Optional[str] = None,
        pip: Optional[Union[List[str], str, dict]] = None,
        conda: Optional[Union[dict, str]] = None,
        container: Optional[dict] = None,
        env_vars: Optional[Dict[str, str]] = None,
        worker_process_setup_hook: Any = None,
        config: Optional[dict] = None,
        **fields: Any,
    ):
        super().__init__()
        given = {
            "py_modules": py_modules,
            "working_dir": working_dir,
            "pip": pip,
            "conda": conda,
            "container": container,
            "env_vars": env_vars,
            "worker_process_setup_hook": worker_process_setup_hook,
            "config": config,
            **fields,
        }
        for name, value in given.items():
            if value is not None:
                self[name] = value
        if env_vars is not None and not (
            isinstance(env_vars, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in env_vars.items())
        ):
            raise TypeError(f"RuntimeEnv(env_vars={env_vars!r}): expected a dict of str -> str")

    def to_dict(self) -> dict:
        return dict(self)

    def env_vars(self) -> Dict[str, str]:
        return dict(self.get("env_vars") or {})

    def working_dir(self) -> str:
        return self.get("working_dir", "")

    def py_modules(self) -> List[str]:
        return list(self.get("py_modules") or [])

    def has_py_container(self) -> bool:
        return "container" in self

    def __repr__(self) -> str:
        return f"RuntimeEnv({dict(self)!r})"
