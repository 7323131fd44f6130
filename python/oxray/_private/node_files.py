"""Where oxray leaves its traces on a host: the current cluster's address and
token file, each running node's pid file, the head's state directory, and the
session directories. All of it lives under a per-user root that must be owned
by this user and private; anything else found there is refused, not trusted."""

from __future__ import annotations

import json
import os
import secrets
import stat
import tempfile
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    import psutil


class InsecurePathError(PermissionError):
    """A local oxray file or directory that another user owns or may write or read."""


def _private_dir_usable(path: str) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def temp_root() -> str:
    """`OXRAY_TEMP_DIR`, else `$XDG_RUNTIME_DIR/oxray` when that dir is private to
    this user, else `/tmp/oxray-<uid>`."""
    if os.environ.get("OXRAY_TEMP_DIR"):
        return os.environ["OXRAY_TEMP_DIR"]
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
    if runtime_dir and _private_dir_usable(runtime_dir):
        return os.path.join(runtime_dir, "oxray")
    return f"/tmp/oxray-{os.getuid()}"


def current_cluster_file() -> str:
    return os.path.join(temp_root(), "oxray_current_cluster")


def nodes_dir() -> str:
    return os.path.join(temp_root(), "nodes")


def default_state_dir() -> str:
    return os.path.join(temp_root(), "state")


def _check_private(path: str, st: os.stat_result) -> None:
    is_dir = stat.S_ISDIR(st.st_mode)
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid == os.getuid() and not mode & 0o077:
        return
    kind = "directory" if is_dir else "file"
    if st.st_uid != os.getuid():
        fix = "it is not yours: remove it, or set OXRAY_TEMP_DIR to a directory of your own"
    else:
        fix = f"run `chmod {'700' if is_dir else '600'} {path}`, or remove it"
    raise InsecurePathError(
        f"refusing to use the {kind} {path}: it is owned by uid {st.st_uid} with mode {oct(mode)}, "
        f"but oxray keeps its token and cluster address there, so it must be owned by you "
        f"(uid {os.getuid()}) and private to you; {fix}"
    )


def ensure_private_dir(path: str) -> str:
    """Creates `path` (and missing parents) as 0700, or checks an existing one is ours and private."""
    try:
        os.makedirs(path, mode=0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise InsecurePathError(f"refusing to use {path}: it is not a directory (a symbolic link or file is there)")
    _check_private(path, st)
    return path


def ensure_temp_root() -> str:
    return ensure_private_dir(temp_root())


def read_private(path: str) -> Optional[str]:
    """The text of a file only this user can read or write; None when it does not
    exist. A symbolic link, or a file another user owns or may read, is refused."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        if os.path.islink(path):
            raise InsecurePathError(f"refusing to read {path}: it is a symbolic link; remove it") from e
        raise
    with os.fdopen(fd) as f:
        _check_private(path, os.fstat(fd))
        return f.read()


def write_private(path: str, text: str) -> None:
    """Writes `path` as a new 0600 file (never through a planted link) and moves it into place."""
    directory = ensure_private_dir(os.path.dirname(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def read_or_create_token(state_dir: str) -> str:
    """The head's token, kept (0600) in its state directory so a restart keeps it."""
    path = os.path.join(ensure_private_dir(state_dir), "token")
    token = (read_private(path) or "").strip()
    if token:
        return token
    token = secrets.token_hex(32)
    write_private(path, token)
    return token


def read_token_file(path: Optional[str]) -> Optional[str]:
    if not path:
        return None
    return (read_private(path) or "").strip() or None


def process_create_time(pid: int) -> Optional[float]:
    """When process `pid` started (None when there is none): with the pid it names
    one process, even once the pid is reused."""
    import psutil  # here: a worker's start never needs it (~20 ms of import)

    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return None


def same_process(pid: int, create_time: Optional[float]) -> Optional[psutil.Process]:
    """The running process `pid` if it is the one that started at `create_time`."""
    if create_time is None:
        return None
    import psutil

    try:
        proc = psutil.Process(int(pid))
        if abs(proc.create_time() - float(create_time)) < 0.01 and proc.status() != psutil.STATUS_ZOMBIE:
            return proc
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied, ValueError, TypeError):
        pass
    return None


def http_scheme() -> str:
    """The scheme of the HTTP server a head in this process serves: https on a TLS cluster (the
    head speaks HTTPS with its certificate), else http."""
    return "https" if os.environ.get("OXRAY_TLS_CERT") else "http"


def write_current_cluster(address: str, token_file: str, pid: int, dashboard: Optional[str] = None) -> None:
    record = {"address": address, "token_file": token_file, "pid": pid, "create_time": process_create_time(pid)}
    if dashboard:
        record["dashboard_url"] = f"{http_scheme()}://{dashboard}"
    write_private(current_cluster_file(), json.dumps(record))


def read_current_cluster() -> Optional[dict]:
    """The cluster this user runs on this host (`oxray start --head`, or a driver's
    `init()`), if the process that published it still runs."""
    ensure_temp_root()
    text = read_private(current_cluster_file())
    if text is None:
        return None
    try:
        info = json.loads(text)
    except ValueError:
        return None
    if not isinstance(info, dict) or same_process(info.get("pid", 0), info.get("create_time")) is None:
        return None
    return info


def remove_current_cluster_if(address: str) -> None:
    """Removes the current-cluster file if it still names `address` and this process."""
    try:
        current = read_current_cluster()
    except (OSError, ValueError):
        return
    if current is None or (current.get("address") == address and current.get("pid") == os.getpid()):
        try:
            os.unlink(current_cluster_file())
        except FileNotFoundError:
            pass


def drivers_dir() -> str:
    return os.path.join(temp_root(), "drivers")


def publish_embedded_cluster(address: str, token: str, session_dir: str, dashboard_url: Optional[str] = None) -> str:
    """Records the cluster this driver's `init()` started, so other drivers on
    this host can join it by address or with `init(address="auto")`, and
    clients find its HTTP server (`dashboard_url`, when it serves one)."""
    token_file = os.path.join(session_dir, "token")
    write_private(token_file, token)
    path = os.path.join(drivers_dir(), f"{os.getpid()}.json")
    record = {"address": address, "token_file": token_file, "pid": os.getpid(), "dashboard_url": dashboard_url}
    write_private(path, json.dumps({**record, "create_time": process_create_time(os.getpid())}))
    return path


def embedded_clusters() -> list:
    """The clusters running drivers on this host started with `init()`, newest first;
    records of drivers that are gone are removed."""
    try:
        names = os.listdir(drivers_dir())
    except FileNotFoundError:
        return []
    live = []
    for name in names:
        path = os.path.join(drivers_dir(), name)
        try:
            info = json.loads(read_private(path) or "null")
        except ValueError:
            info = None
        if isinstance(info, dict) and same_process(info.get("pid", 0), info.get("create_time")):
            live.append(info)
        elif name.endswith(".json"):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
    return sorted(live, key=lambda info: -float(info["create_time"]))


def find_local_cluster(address: Optional[str] = None) -> Optional[dict]:
    """The cluster on this host at `address` (any, if None): the one `oxray start`
    runs first, then those drivers started."""
    candidates = [c for c in [read_current_cluster()] if c] + embedded_clusters()
    return next((c for c in candidates if address is None or c.get("address") == address), None)


def write_node_record(record: dict) -> str:
    record = {**record, "create_time": process_create_time(int(record["pid"]))}
    path = os.path.join(nodes_dir(), f"{record['pid']}.json")
    write_private(path, json.dumps(record))
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
            out.append(json.loads(read_private(os.path.join(nodes_dir(), name)) or "null"))
        except ValueError:
            continue
    return [r for r in out if isinstance(r, dict) and "pid" in r]
