"""Ray's `serve.config`: `HTTPOptions` (what the HTTP proxies take), `gRPCOptions` (what the
gRPC proxies beside them take) and `ProxyLocation`."""

from __future__ import annotations

import enum
import os
from typing import Optional


class ProxyLocation(str, enum.Enum):
    """Which nodes run an HTTP proxy (Ray's default: every node)."""

    Disabled = "Disabled"
    HeadOnly = "HeadOnly"
    EveryNode = "EveryNode"


# Ray's fields the proxies do not carry out: refused by name.
_NOT_YET = {
    "ssl_keyfile_password": "HTTPS with an encrypted key (decrypt it, and keep the file private)",
    "ssl_ca_certs": "HTTPS client certificates",
    "middlewares": "proxy middlewares",
}


def _check_port(owner: str, port) -> None:
    if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
        raise ValueError(f"{owner}(port={port!r}): expected a port number from 0 to 65535")


def _check_timeout(owner: str, request_timeout_s) -> None:
    if request_timeout_s is not None and (not isinstance(request_timeout_s, (int, float)) or request_timeout_s <= 0):
        raise ValueError(f"{owner}(request_timeout_s={request_timeout_s!r}): expected a positive number or None")


def _options_of(cls, value, argument: str):
    """`value` as options of `cls`: None for the defaults, an instance, or a dict of its fields."""
    if value is None:
        return cls()
    if isinstance(value, cls):
        return value
    if isinstance(value, dict):
        return cls(**value)
    raise TypeError(f"{argument}={value!r}: expected a dict or a {cls.__name__}")


class HTTPOptions:
    """Ray's `HTTPOptions`: `host` (127.0.0.1), `port` (8000), `root_path`, `request_timeout_s`
    (None: no timeout), `keep_alive_timeout_s` (90; `RAY_SERVE_HTTP_KEEP_ALIVE_TIMEOUT_S`
    overrides it), and `ssl_keyfile` with `ssl_certfile` for HTTPS (PEM files each node's proxy
    reads at that path)."""

    def __init__(
        self,
        host: Optional[str] = "127.0.0.1",
        port: int = 8000,
        root_path: str = "",
        request_timeout_s: Optional[float] = None,
        keep_alive_timeout_s: float = 90,
        ssl_keyfile: Optional[str] = None,
        ssl_certfile: Optional[str] = None,
        **kwargs,
    ):
        for key, value in kwargs.items():
            if key in _NOT_YET:
                if value is not None:
                    raise NotImplementedError(f"HTTPOptions({key}=...): oxray's Serve does not do {_NOT_YET[key]} yet")
            elif key != "location":
                raise TypeError(f"HTTPOptions got an unexpected field {key!r}")
        _check_port("HTTPOptions", port)
        _check_timeout("HTTPOptions", request_timeout_s)
        if not isinstance(keep_alive_timeout_s, (int, float)) or keep_alive_timeout_s <= 0:
            raise ValueError(f"HTTPOptions(keep_alive_timeout_s={keep_alive_timeout_s!r}): expected a positive number")
        if root_path and (not root_path.startswith("/") or root_path.endswith("/")):
            raise ValueError(f"HTTPOptions(root_path={root_path!r}): expected '' or a path like '/prefix'")
        if (ssl_keyfile is None) != (ssl_certfile is None):
            raise ValueError(
                f"HTTPOptions(ssl_keyfile={ssl_keyfile!r}, ssl_certfile={ssl_certfile!r}): HTTPS needs both"
            )
        self.ssl_keyfile = None if ssl_keyfile is None else os.path.abspath(os.fspath(ssl_keyfile))
        self.ssl_certfile = None if ssl_certfile is None else os.path.abspath(os.fspath(ssl_certfile))
        self.host = host or "127.0.0.1"
        self.port = port
        self.root_path = root_path
        self.request_timeout_s = request_timeout_s
        self.keep_alive_timeout_s = keep_alive_timeout_s

    @classmethod
    def of(cls, value) -> "HTTPOptions":
        return _options_of(cls, value, "http_options")

    def to_wire(self) -> dict:
        """What the node agents' proxies take (`oxray_serve::routes::HttpOptions`)."""
        keep_alive = float(self.keep_alive_timeout_s)
        override = os.environ.get("RAY_SERVE_HTTP_KEEP_ALIVE_TIMEOUT_S")
        if override:
            try:
                if float(override) > 0:
                    keep_alive = float(override)
            except ValueError:
                raise ValueError(
                    f"RAY_SERVE_HTTP_KEEP_ALIVE_TIMEOUT_S={override!r}: expected a number of seconds"
                ) from None
        wire = {
            "host": self.host,
            "port": self.port,
            "root_path": self.root_path,
            "request_timeout_s": None if self.request_timeout_s is None else float(self.request_timeout_s),
            "keep_alive_timeout_s": keep_alive,
            "ssl_keyfile": self.ssl_keyfile,
            "ssl_certfile": self.ssl_certfile,
        }
        limit = os.environ.get("OXRAY_SERVE_MAX_REQUEST_BODY_BYTES")
        if limit:
            if not limit.isdigit() or int(limit) < 1:
                raise ValueError(f"OXRAY_SERVE_MAX_REQUEST_BODY_BYTES={limit!r}: expected a positive number of bytes")
            wire["max_request_body_bytes"] = int(limit)
        return wire


class gRPCOptions:  # noqa: N801 - Ray's name
    """Ray's `gRPCOptions`: `port` (9000) and `grpc_servicer_functions` (import paths of the generated
    `add_<Service>Servicer_to_server` functions; none: no gRPC proxy runs), `request_timeout_s`
    (None: only the call's own deadline). The proxy binds `HTTPOptions.host` (127.0.0.1 unless
    told otherwise; Ray's binds every interface). `enable_reflection`: oxray's proxy serves no
    reflection; True with servicer functions is refused, False is what it does."""

    def __init__(
        self,
        port: int = 9000,
        grpc_servicer_functions: Optional[list] = None,
        request_timeout_s: Optional[float] = None,
        enable_reflection: Optional[bool] = None,
    ):
        _check_port("gRPCOptions", port)
        functions = list(grpc_servicer_functions or [])
        for function in functions:
            if not isinstance(function, str) or "." not in function:
                raise ValueError(
                    f"gRPCOptions(grpc_servicer_functions=[{function!r}]): expected import paths such as "
                    "'user_defined_protos_pb2_grpc.add_UserDefinedServiceServicer_to_server'"
                )
        _check_timeout("gRPCOptions", request_timeout_s)
        if enable_reflection and functions:
            raise NotImplementedError(
                "gRPCOptions(enable_reflection=True): oxray's gRPC proxy serves no reflection service; "
                "give clients the .proto files (or pass enable_reflection=False)"
            )
        self.port = port
        self.grpc_servicer_functions = functions
        self.request_timeout_s = request_timeout_s
        self.enable_reflection = False

    @classmethod
    def of(cls, value) -> "gRPCOptions":
        return _options_of(cls, value, "grpc_options")

    def to_wire(self) -> Optional[dict]:
        """What the node agents' proxies take (`oxray_serve::routes::GrpcOptions`); None: no gRPC proxy."""
        if not self.grpc_servicer_functions:
            return None
        return {
            "port": self.port,
            "grpc_servicer_functions": list(self.grpc_servicer_functions),
            "request_timeout_s": None if self.request_timeout_s is None else float(self.request_timeout_s),
        }


def proxy_location_of(value) -> str:
    if value is None:
        return ProxyLocation.EveryNode.value
    if isinstance(value, ProxyLocation):
        return value.value
    if isinstance(value, str) and value in ProxyLocation.__members__:
        return value
    raise ValueError(f"proxy_location={value!r}: expected one of {', '.join(ProxyLocation.__members__)}")
