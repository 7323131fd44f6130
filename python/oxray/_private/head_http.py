"""Finding a cluster's HTTP server (Jobs, State API, dashboard) and its token,
and calling it, for `oxray.job_submission` and `oxray.util.state`.

The address: `RAY_API_SERVER_ADDRESS` / `RAY_ADDRESS` when http (they override
the argument, as in Ray), else an `http(s)://` one given, else this process's own cluster if it serves one, else
the cluster `oxray start --head` (or another driver's `init()`) runs on this
host. The token: `OXRAY_TOKEN` / `RAY_AUTH_TOKEN` (a token the caller gave), else this host's
cluster's, and that one only to that cluster's own address: a client pointed at another server
never hands it this host's token."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Optional, Tuple

from oxray.exceptions import AuthenticationError


def local_cluster(serve: bool = True) -> Optional[dict]:
    """This process's cluster (with `serve`, its head starts serving HTTP on 127.0.0.1 if it
    did not yet, as Ray's head always serves its State API), else the first one on this host."""
    from oxray._private import node_files
    from oxray._private.api import STATE

    if STATE.cluster is not None:
        url = STATE.address_info.get("dashboard_url") or (serve_http_here() if serve else None)
        if not url:
            return None
        scheme = node_files.http_scheme()
        return {"dashboard_url": url if "://" in url else f"{scheme}://{url}", "token": STATE.cluster.token}
    try:
        return node_files.find_local_cluster(None)
    except Exception:  # noqa: BLE001 - no readable cluster files: there is no local cluster
        return None


def serve_http_here() -> str:
    """Starts this process's embedded head's HTTP server (loopback only, token required)."""
    from oxray._private import node_files
    from oxray._private.api import STATE

    with STATE.lock:
        cluster = STATE.cluster
        address = cluster.serve_http("127.0.0.1", 0)
        STATE.address_info["dashboard_url"] = address
        if STATE.published:
            # Other drivers that joined this cluster find its HTTP server from the record too.
            STATE.published = node_files.publish_embedded_cluster(
                cluster.head_address, cluster.token, cluster.session_dir, f"{node_files.http_scheme()}://{address}"
            )
    return address


def resolve_address(address: Optional[str], current: Optional[dict], what: str) -> str:
    # As in Ray, the environment overrides the argument.
    for candidate in (os.environ.get("RAY_API_SERVER_ADDRESS"), os.environ.get("RAY_ADDRESS"), address):
        if candidate and candidate.startswith(("http://", "https://")):
            return candidate.rstrip("/")
    if address and address != "auto":
        raise ValueError(
            f"{what}(address={address!r}): expected the head's HTTP address, such as "
            "http://127.0.0.1:8265 (`oxray start --head` prints it)"
        )
    if current and current.get("dashboard_url"):
        return current["dashboard_url"]
    raise ConnectionError(
        f"{what}: no HTTP address of a cluster: pass one (http://HOST:8265), set RAY_ADDRESS, start a cluster "
        "here with `oxray start --head`, or init(include_dashboard=True)"
    )


def token_for(current: Optional[dict], url: str) -> Optional[str]:
    """The token to send to the server at `url`: the caller's, else the local cluster's when `url`
    is that cluster's own HTTP address."""
    token = os.environ.get("OXRAY_TOKEN") or os.environ.get("RAY_AUTH_TOKEN")
    if token:
        return token
    if not current or not same_server(url, current.get("dashboard_url")):
        return None
    if current.get("token"):
        return current["token"]
    if current.get("token_file"):
        from oxray._private import node_files

        return node_files.read_token_file(current["token_file"])
    return None


_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def same_server(url: str, other: Optional[str]) -> bool:
    """Whether two HTTP addresses name one server: the same scheme and port, and the same host
    (loopback names counting as one)."""
    if not other:
        return False
    a, b = urllib.parse.urlsplit(url), urllib.parse.urlsplit(other if "://" in other else f"http://{other}")
    default = {"http": 80, "https": 443}
    try:
        ports = (a.port or default.get(a.scheme), b.port or default.get(b.scheme))
    except ValueError:  # a port that is not a number
        return False
    hosts = (a.hostname or "", b.hostname or "")
    same_host = hosts[0] == hosts[1] or (hosts[0] in _LOOPBACK and hosts[1] in _LOOPBACK)
    return a.scheme == b.scheme and ports[0] == ports[1] and same_host


def endpoint(address: Optional[str], what: str) -> Tuple[str, dict]:
    """The base URL and the headers (the token) for calls to a cluster's HTTP server."""
    current = local_cluster()
    url = resolve_address(address, current, what)
    token = token_for(current, url)
    return url, ({"Authorization": f"Bearer {token}"} if token else {})


def tls_context(ca_file: Optional[str] = None):
    """How an `https://` head is verified: against the cluster's CA (`ca_file`, else
    `OXRAY_TLS_CA`, which `oxray start --tls-ca` and TLS clusters' drivers set), else the system's."""
    import ssl

    ca = ca_file or os.environ.get("OXRAY_TLS_CA")
    return ssl.create_default_context(cafile=ca) if ca else None


def auth_error(text: str) -> AuthenticationError:
    """What a 401 or 403 from the head becomes, with the fix."""
    return AuthenticationError(
        f"Authentication required: {text}. Set OXRAY_TOKEN (or RAY_AUTH_TOKEN) to the cluster's token "
        "(`oxray get-auth-token` prints it)"
    )


def get_json(url: str, headers: dict, path: str, params=(), timeout: float = 60):
    """GETs `path` (with `params`, a list of pairs) and returns the parsed body;
    401/403 raise `AuthenticationError`, another failure `RuntimeError` with the body."""
    query = urllib.parse.urlencode(list(params))
    request = urllib.request.Request(f"{url}{path}{'?' + query if query else ''}", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=tls_context()) as reply:
            return json.loads(reply.read())
    except urllib.error.HTTPError as e:
        text = e.read().decode(errors="replace")
        if e.code in (401, 403):
            raise auth_error(text) from None
        try:
            message = json.loads(text).get("msg") or text
        except ValueError:
            message = text
        raise RuntimeError(f"{path} failed with status {e.code}: {message}") from None
    except urllib.error.URLError as e:
        raise ConnectionError(f"Failed to connect to the cluster's HTTP server at {url}: {e.reason}") from None
