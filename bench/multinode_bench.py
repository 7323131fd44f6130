#!/usr/bin/env python3
"""Cross-node benchmark: oxray vs. Ray on one host, two nodes each.

    python bench/multinode_bench.py            # both, side by side
    python bench/multinode_bench.py --framework oxray --json

oxray runs a head and a second node agent as separate processes (`oxray start`);
Ray runs two raylets through `ray.cluster_utils.Cluster`. The driver sits on the
head node; work is pinned to the second node with a custom resource `node_b`.
Each side runs in its own subprocess. See bench/README.md for what each figure means.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

MIB = 1024 * 1024
SIZE = 512 * MIB
REPS = 3
N_RTT = 300


def start_oxray(root):
    env = {**os.environ, "OXRAY_TEMP_DIR": root}
    cli = [sys.executable, "-m", "oxray.scripts.cli"]
    store = str(2 * SIZE + 256 * MIB)
    subprocess.run(
        cli
        + [
            "start",
            "--head",
            "--dashboard-port",
            "0",
            "--port",
            "0",
            "--num-cpus",
            "1",
            "--object-store-memory",
            store,
        ],
        env=env,
        check=True,
        capture_output=True,
    )
    with open(os.path.join(root, "oxray_current_cluster")) as f:
        address = json.load(f)["address"]
    with open(os.path.join(root, "state", "token")) as f:
        token = f.read().strip()
    subprocess.run(
        cli
        + [
            "start",
            "--address",
            address,
            "--token",
            token,
            "--num-cpus",
            "1",
            "--object-store-memory",
            store,
            "--resources",
            '{"node_b": 1}',
        ],
        env=env,
        check=True,
        capture_output=True,
    )
    os.environ["OXRAY_TEMP_DIR"] = root
    import oxray as ray

    ray.init()
    while sum(1 for n in ray.nodes() if n["Alive"]) < 2:
        time.sleep(0.1)

    def stop():
        ray.shutdown()
        subprocess.run(cli + ["stop", "--force"], env=env, capture_output=True)

    return ray, stop


def start_ray():
    import ray
    from ray.cluster_utils import Cluster

    store = 2 * SIZE + 256 * MIB
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": store})
    cluster.add_node(num_cpus=1, resources={"node_b": 1}, object_store_memory=store)
    ray.init(address=cluster.address, log_to_driver=False)
    cluster.wait_for_nodes()

    def stop():
        ray.shutdown()
        cluster.shutdown()

    return ray, stop


def child(framework):
    import numpy as np

    root = tempfile.mkdtemp(prefix="oxray-mn-bench-")
    ray, stop = start_oxray(root) if framework == "oxray" else start_ray()
    out = {}
    try:

        @ray.remote(resources={"node_b": 0.01}, num_cpus=0)
        def touch(x):
            return int(x[0]) + int(x[-1])

        @ray.remote(resources={"node_b": 0.01}, num_cpus=0)
        def make(n):
            return np.ones(n, dtype=np.uint8)

        @ray.remote(resources={"node_b": 0.01}, num_cpus=0)
        def noop():
            return None

        @ray.remote(resources={"node_b": 0.01}, num_cpus=0)
        class Echo:
            def ping(self):
                return None

        ray.get(noop.remote())
        rtt = []
        for _ in range(N_RTT):
            t = time.perf_counter()
            ray.get(noop.remote())
            rtt.append(time.perf_counter() - t)
        out["task_rtt_ms"] = statistics.median(rtt) * 1e3
        echo = Echo.remote()
        ray.get(echo.ping.remote())
        calls = []
        for _ in range(N_RTT):
            t = time.perf_counter()
            ray.get(echo.ping.remote())
            calls.append(time.perf_counter() - t)
        out["actor_rtt_ms"] = statistics.median(calls) * 1e3
        push = []
        for _ in range(REPS):
            ref = ray.put(np.ones(SIZE, dtype=np.uint8))
            t = time.perf_counter()
            ray.get(touch.remote(ref))
            push.append(time.perf_counter() - t)
            del ref
        out["push_gb_s"] = SIZE / 1e9 / min(push)
        pull = []
        for _ in range(REPS):
            ref = make.remote(SIZE)
            ray.wait([ref], fetch_local=False)
            t = time.perf_counter()
            value = ray.get(ref)
            pull.append(time.perf_counter() - t)
            assert value.nbytes == SIZE
            del value, ref
        out["pull_gb_s"] = SIZE / 1e9 / min(pull)
    finally:
        stop()
    return out


METRICS = [
    ("task_rtt_ms", "cross-node task round trip (ms, median)", "lower"),
    ("actor_rtt_ms", "cross-node actor call round trip (ms, median)", "lower"),
    ("push_gb_s", "512 MiB driver -> other node, read by a task (GB/s)", "higher"),
    ("pull_gb_s", "512 MiB other node -> driver get (GB/s)", "higher"),
]


def _fmt(value):
    return "-" if value is None else f"{value:.3f}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--framework", choices=("oxray", "ray"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.framework:
        result = child(args.framework)
        print(json.dumps(result) if args.json else result)
        return
    results = {}
    for fw in ("oxray", "ray"):
        proc = subprocess.run(
            [sys.executable, __file__, "--framework", fw, "--json"], capture_output=True, text=True, timeout=900
        )
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        results[fw] = json.loads(lines[-1]) if lines else None
        if not lines:
            print(f"{fw} failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
    print(f"{'metric':<55} {'oxray':>10} {'ray':>10} {'oxray vs ray':>14}")
    for key, label, better in METRICS:
        o = (results["oxray"] or {}).get(key)
        r = (results["ray"] or {}).get(key)
        ratio = ""
        if o and r:
            ratio = (
                f"{(r / o if better == 'lower' else o / r):.2f}x better"
                if (o < r) == (better == "lower")
                else f"{(o / r if better == 'lower' else r / o):.2f}x worse"
            )
        print(f"{label:<55} {_fmt(o):>10} {_fmt(r):>10} {ratio:>14}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
