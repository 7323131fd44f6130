"""A node process started by `oxray start`: the node agent (and the head, with
--head) until SIGTERM, then a clean shutdown that leaves no workers behind."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

from oxray import _native
from oxray._private import node_files


def run(config: dict, on_ready=None) -> int:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    session_dir = os.path.join(
        node_files.ensure_temp_root(), time.strftime("session_%Y-%m-%d_%H-%M-%S_") + str(os.getpid())
    )
    python_path = os.pathsep.join(p for p in [os.getcwd(), *sys.path] if p)
    try:
        cluster = _native.start_cluster(
            session_dir=session_dir,
            python=sys.executable,
            cwd=os.getcwd(),
            num_cpus=config.get("num_cpus"),
            num_gpus=config.get("num_gpus"),
            resources=config.get("resources") or {},
            labels=config.get("labels") or {},
            object_store_memory=config.get("object_store_memory"),
            worker_env=[("PYTHONPATH", python_path)],
            host=config["host"],
            token=config["token"],
            join=config.get("join"),
            port=config.get("port") or 0,
            state_dir=config.get("state_dir"),
            nodes_may_join=True,
            dashboard=(config["dashboard_host"], config["dashboard_port"]) if config.get("join") is None else None,
            metrics=(config["host"], config.get("metrics_export_port") or 0),
        )
    except Exception as e:  # reported by `oxray start`, which reads this process's log
        print(f"oxray node failed to start: {e}", file=sys.stderr, flush=True)
        return 1
    record = {
        "pid": os.getpid(),
        "head": config.get("join") is None,
        "address": cluster.agent_address,
        "head_address": cluster.head_address,
        "node_id": cluster.node_id,
        "session_dir": cluster.session_dir,
        "dashboard_url": f"{node_files.http_scheme()}://{cluster.dashboard_address}"
        if cluster.dashboard_address
        else None,
    }
    record_path = node_files.write_node_record(record)
    if record["head"]:
        node_files.write_current_cluster(
            cluster.head_address, config["token_file"], os.getpid(), cluster.dashboard_address
        )
    print(f"oxray node {cluster.node_id} up at {cluster.agent_address}", flush=True)
    if on_ready:
        on_ready(record)
    try:
        while not stop.wait(1.0):
            pass
    finally:
        cluster.shutdown()
        for path in (record_path,):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        if record["head"]:
            node_files.remove_current_cluster_if(cluster.head_address)
    return 0


if __name__ == "__main__":
    # The config (with the token) arrives on stdin, never in argv where `ps` shows it.
    sys.exit(run(json.loads(sys.stdin.readline())))
