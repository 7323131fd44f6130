"""Where `oxray start` leaves its traces on a host: the current cluster's
address, each running node's pid file, the head's state directory and token."""

from __future__ import annotations

import json
import os
import secrets
from typing import Optional


def temp_root() -> str:
    return os.environ.get("OXRAY_TEMP_DIR") or "/tmp/oxray"


def current_cluster_file() -> str:
    return os.path.join(temp_root(), "oxray_current_cluster")


def nodes_dir() -> str:
    return os.path.join(temp_root(), "nodes")


def default_state_dir() -> str:
    return os.path.join(temp_root(), "state")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _write_private(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def read_or_create_token(state_dir: str) -> str:
    """The head's token, kept (0600) in its state directory so a restart keeps it."""
    path = os.path.join(state_dir, "token")
    try:
        with open(path) as f:
            token = f.read().strip()
        if token:
            return token
    except FileNotFoundError:
        pass
    token = secrets.token_hex(32)
    _write_private(path, token)
    return token


def write_current_cluster(address: str, token_file: str, pid: int) -> None:
    _write_private(current_cluster_file(), json.dumps({"address": address, "token_file": token_file, "pid": pid}))


def read_current_cluster() -> Optional[dict]:
    """The cluster `oxray start --head` runs on this host, if its process is alive."""
    try:
        with open(current_cluster_file()) as f:
            info = json.load(f)
    except (FileNotFoundError, ValueError):
        return None
    if not pid_alive(int(info.get("pid", 0))):
        return None
    return info


def read_token_file(path: Optional[str]) -> Optional[str]:
    if not path:
        return None
    try:
        with open(path) as f:
            return f.read().strip() or None
    except OSError:
        return None


def write_node_record(record: dict) -> str:
    path = os.path.join(nodes_dir(), f"{record['pid']}.json")
    _write_private(path, json.dumps(record))
    return path


def node_records() -> list:
    out = []
    try:
        names = os.listdir(nodes_dir())
    except FileNotFoundError:
        return out
    for name in sorted(names):
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(nodes_dir(), name)) as f:
                out.append(json.load(f))
        except (OSError, ValueError):
            continue
    return out
