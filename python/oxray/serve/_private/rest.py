"""What the head runs on the cluster for Serve, as an internal job (`python -m
oxray.serve._private.rest apply|shutdown|recover`): `apply` (the REST API's PUT) starts Serve if it
is not running and gives the controller the config from `OXRAY_SERVE_CONFIG` (Ray's
`ServeDeploySchema`); `shutdown` (its DELETE) shuts Serve down; `recover` (a head started again
with a Serve checkpoint) starts the controller, which takes the applications back, or has the one
that outlived the head report to the new one."""

from __future__ import annotations

import json
import os
import sys


def main(argv) -> int:
    import oxray as ray
    from oxray import serve
    from oxray.serve import api

    if len(argv) != 1 or argv[0] not in ("apply", "shutdown", "recover"):
        print("usage: python -m oxray.serve._private.rest apply|shutdown|recover", file=sys.stderr)
        return 2
    ray.init()
    if argv[0] == "shutdown":
        serve.shutdown()
        return 0
    if argv[0] == "recover":
        names = ray.get(api._start_controller().recover.remote())
        print(f"Serve's controller runs {len(names)} application(s) after the head's restart: {names}")
        return 0
    config = json.loads(os.environ["OXRAY_SERVE_CONFIG"])
    ray.get(api._start_controller().apply_config.remote(config))
    print(f"Sent the config of {len(config.get('applications') or [])} application(s) to Serve's controller.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
