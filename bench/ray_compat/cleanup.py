"""Kills the processes a harness run left behind: oxray node agents, workers and drivers
that tests started. They are found by the RAY_COMPAT_WORK=<work dir> variable they all
inherit (oxray's workers run in their own sessions, so a process group is not enough);
this process and its ancestors are spared.

    python cleanup.py WORK_DIR
"""

import os
import signal
import sys
import time


def _ancestors() -> set[int]:
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids


def leftovers(work: str) -> list[int]:
    marker = f"RAY_COMPAT_WORK={work}".encode()
    spared = _ancestors()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in spared:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if marker in f.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def main() -> int:
    work = os.path.abspath(sys.argv[1])
    pids = leftovers(work)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.time() + 3
        while pids and time.time() < deadline:
            time.sleep(0.1)
            pids = [p for p in leftovers(work) if p in pids]
        if not pids:
            break
    if pids:
        print(f"cleanup: processes still alive: {pids}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
