"""A worker template: a warm Python process that forks workers on its node agent's request.

Starting a worker as a fresh interpreter costs its imports (the runtime's, and torch's for a Train
worker): 0.1 to several seconds. A template pays them once; each worker is then one `fork()`, which
shares the imported modules' pages with the template until written.

The agent starts one template per import setup (the interpreter, working directory, the import
path and the environment variables read at import time; see `oxray-runtime`'s `agent/template.rs`)
with a SOCK_SEQPACKET socket on fd 3. Each request is one message: JSON
`{"worker_id", "set", "unset"}` (how the worker's environment differs from the template's) with its
stdout and stderr pipes attached (SCM_RIGHTS). The
template answers `{"pid"}` (or `{"error"}`) in request order and reports each worker's end as
`{"exited": pid, "status": <wait status>}`, since only a parent can reap its children.

The template starts none of the runtime's threads (a fork copies only the calling thread, so a
lock another thread held would stay held in the child for ever): it imports modules and waits.
It dies with its agent (parent-death signal); its workers die with it in turn.
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import json
import os
import selectors
import signal
import socket
import sys

_CONTROL_FD = 3
_PR_SET_PDEATHSIG = 1
_MAX_REQUEST = 1 << 20


def _set_parent_death_signal(libc, sig: int) -> None:
    if libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")


def _warm_up() -> None:
    """The worker's own modules, then what this template was asked to preload
    (`OXRAY_TEMPLATE_PRELOAD`, comma-separated: e.g. torch for Train workers)."""
    importlib.import_module("oxray._private.worker_main")
    for name in os.environ.get("OXRAY_TEMPLATE_PRELOAD", "").split(","):
        name = name.strip()
        if not name:
            continue
        try:
            importlib.import_module(name)
        except Exception as e:  # a worker that needs it reports the failure itself
            print(f"oxray worker template: preloading {name!r} failed: {type(e).__name__}: {e}", file=sys.stderr)


def _send(control: socket.socket, message: dict) -> None:
    control.send(json.dumps(message).encode())


def _reap(control: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(control, {"exited": pid, "status": status})


def serve(libc):
    """Answers fork requests until the agent closes the socket. Returns, in a forked child
    only, the request it was forked for (the parent never returns: it exits)."""
    control = socket.socket(fileno=_CONTROL_FD)
    children_ended_r, children_ended_w = os.pipe()
    os.set_blocking(children_ended_w, False)
    signal.set_wakeup_fd(children_ended_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # the wakeup fd is written on each one
    events = selectors.DefaultSelector()
    events.register(control, selectors.EVENT_READ, "request")
    events.register(children_ended_r, selectors.EVENT_READ, "children")
    while True:
        for key, _ in events.select():
            if key.data == "children":
                os.read(children_ended_r, 4096)
                _reap(control)
                continue
            message, fds, _flags, _address = socket.recv_fds(control, _MAX_REQUEST, 2)
            if not message:
                os._exit(0)  # the agent is gone: its workers get their parent-death signal
            try:
                request = json.loads(message)
                if len(fds) != 2:
                    raise ValueError(f"expected the worker's stdout and stderr pipes, got {len(fds)} descriptors")
                pid = os.fork()
            except Exception as e:  # noqa: BLE001 - the agent starts this worker without a template
                for fd in fds:
                    os.close(fd)
                _send(control, {"error": f"{type(e).__name__}: {e}"})
                continue
            if pid == 0:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                events.close()
                control.close()
                os.close(children_ended_r)
                os.close(children_ended_w)
                return request, fds
            for fd in fds:
                os.close(fd)
            _send(control, {"pid": pid})


def become_worker(libc, request: dict, fds) -> None:
    """In the forked child: what a freshly started worker would have (its own session, its
    output pipes, its environment), then the worker's loop."""
    template_pid = os.getppid()
    os.setsid()  # its own process group: Ctrl-C in the driver's terminal is not its
    _set_parent_death_signal(libc, signal.SIGTERM)
    if os.getppid() != template_pid:
        os._exit(1)  # the template died before the signal was set
    stdout, stderr = fds
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(stdout, 1)
    os.dup2(stderr, 2)
    for fd in (devnull, stdout, stderr):
        os.close(fd)
    # The environment a process the agent started now would have: the request names what differs
    # from this template's own (the agent's may have changed since, and the worker has its own).
    for name in request["unset"]:
        os.environ.pop(name, None)
    os.environ.update(request["set"])
    os.environ["OXRAY_WORKER_ID"] = request["worker_id"]
    from oxray._private import worker_main

    worker_main.main()


def main() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    # Dies with the agent; its workers then get theirs (SIGTERM, which kills each one's group).
    _set_parent_death_signal(libc, signal.SIGTERM)
    _warm_up()
    # What the imports made moves out of the collector's reach: a worker's collections then never
    # write to (and so copy) the pages it shares with this template.
    gc.collect()
    gc.freeze()
    request, fds = serve(libc)
    become_worker(libc, request, fds)


if __name__ == "__main__":
    main()
