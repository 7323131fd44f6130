"""The ``ray`` command for the harness: runs oxray's CLI (``oxray start|stop|status|...``).

``ray start`` takes a few of Ray's flags that only tune Ray's own processes (worker port
ranges, usage stats): they are dropped. Two defaults differ, so that a test cluster
never takes the fixed ports another cluster on this host may hold: ``--port 0`` and
``--dashboard-port 0`` (a free port each) unless the command names them.
"""

import sys

_DROPPED = ("--min-worker-port", "--max-worker-port", "--disable-usage-stats", "--include-dashboard")


def translate(argv):
    if not argv or argv[0] != "start":
        return list(argv)
    out = []
    skip_value = False
    for arg in argv:
        if skip_value:
            skip_value = False
            continue
        name = arg.split("=", 1)[0]
        if name in _DROPPED:
            # "--flag=value", "--flag value", or a boolean flag.
            skip_value = "=" not in arg and name != "--disable-usage-stats"
            continue
        out.append(arg)
    names = {a.split("=", 1)[0] for a in out}
    if "--head" in names and "--port" not in names:
        out += ["--port", "0"]
    if "--head" in names and "--dashboard-port" not in names:
        out += ["--dashboard-port", "0"]
    return out


def main():
    from oxray.scripts.cli import main as oxray_main

    oxray_main(translate(sys.argv[1:]))


if __name__ == "__main__":
    main()
