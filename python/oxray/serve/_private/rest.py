"""What the head's Serve REST API runs on the cluster, as an internal job (`python -m
oxray.serve._private.rest apply|shutdown`): `apply` starts Serve if it is not running and gives
the controller the config from `OXRAY_SERVE_CONFIG` (Ray's `ServeDeploySchema`); `shutdown` shuts
Serve down."""

from __future__ import annotations

import json
import os
import sys


def main(argv) -> int:
    import oxray as ray
    from oxray import serve
    from oxray.serve import api

    if len(argv) != 1 or argv[0] not in ("apply", "shutdown"):
        print("usage: python -m oxray.serve._private.rest apply|shutdown", file=sys.stderr)
        return 2
    ray.init()
    if argv[0] == "shutdown":
        serve.shutdown()
        return 0
    config = json.loads(os.environ["OXRAY_SERVE_CONFIG"])
    ray.get(api._start_controller().apply_config.remote(config))
    print(f"Sent the config of {len(config.get('applications') or [])} application(s) to Serve's controller.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
