#!/usr/bin/env python3
"""Serve benchmark: oxray.serve vs. Ray Serve 2.60, same machine, one run.

    python bench/serve_bench.py                  # both sides
    python bench/serve_bench.py --side oxray     # one side

Each side runs in its own subprocess on a `num_cpus=2` cluster started before the clock (Ray
with `include_dashboard=False`), with `ray[serve]` 2.60 installed for Ray's side.
- handle calls: `--calls` sequential `handle.remote(i).result()` from the driver to a trivial
  one-replica deployment (after 200 warm-up calls); calls/s.
- HTTP: a trivial one-replica deployment (`__call__(self, request)` returning a string) loaded
  through the HTTP proxy by `wrk` (2 threads, 8 connections, 10 s, after 200 warm-up requests):
  requests/s, p50 and p99 latency; then one connection (`wrk -c1`) for the latency of a single
  request through the proxy to a replica that answers at once, beside a sequential handle call's.
- time to serve: `serve.run` of a two-replica deployment until its first HTTP answer; seconds.
- autoscaling: a deployment at one replica (`upscale_delay_s=0`, `metrics_interval_s=0.1`,
  `target_ongoing_requests=1`, `max_ongoing_requests=1`) gets four calls that each hold their
  replica until released; seconds from the calls until a second replica has taken one.
`wrk` is Debian's (`apt-get install wrk`). See bench/README.md (Serve).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wrk(url: str, connections: int, seconds: int) -> dict:
    """Requests/s and the p50/p99 latency (ms) of a `wrk --latency` run."""
    threads = min(2, connections)
    out = subprocess.run(
        ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency", url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    unit = {"us": 0.001, "ms": 1.0, "s": 1000.0}

    def latency(percent: str) -> float:
        value, scale = re.search(rf"^\s*{percent}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M).groups()
        return float(value) * unit[scale]

    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise RuntimeError(f"wrk got {errors.group(1)} error responses:\n{out}")
    return {
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
        "p50_ms": latency("50"),
        "p99_ms": latency("99"),
    }


def measure_http(serve, port: int) -> dict:
    @serve.deployment(ray_actor_options={"num_cpus": 0.1})
    class Hello:
        def __call__(self, request):
            return "hello"

    serve.run(Hello.bind(), name="hello", route_prefix="/hello")
    url = f"http://127.0.0.1:{port}/hello"
    for _ in range(200):
        assert urllib.request.urlopen(url, timeout=30).read() == b"hello"
    loaded = wrk(url, connections=8, seconds=10)
    single = wrk(url, connections=1, seconds=5)
    serve.delete("hello")
    return {
        "http_rps": loaded["rps"],
        "http_p50_ms": loaded["p50_ms"],
        "http_p99_ms": loaded["p99_ms"],
        "http_one_connection_p50_ms": single["p50_ms"],
    }


def measure(framework: str, calls: int) -> dict:
    import importlib

    if framework == "ray":
        os.environ.setdefault("RAY_SERVE_LOG_TO_STDERR", "0")
    ray = importlib.import_module(framework)
    serve = importlib.import_module(framework + ".serve")
    kwargs = {"num_cpus": 2}
    if framework == "ray":
        kwargs.update(include_dashboard=False, logging_level="ERROR")
    ray.init(**kwargs)
    out = {}
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    out.update(measure_http(serve, port))

    @serve.deployment(ray_actor_options={"num_cpus": 0.1})
    class Echo:
        def __call__(self, x):
            return x

    handle = serve.run(Echo.bind(), name="echo", route_prefix="/echo")
    for i in range(200):
        handle.remote(i).result()
    start = time.perf_counter()
    for i in range(calls):
        handle.remote(i).result()
    elapsed = time.perf_counter() - start
    out["handle_calls_per_s"] = calls / elapsed
    out["handle_call_ms"] = elapsed / calls * 1000
    serve.delete("echo")

    @serve.deployment(num_replicas=2, ray_actor_options={"num_cpus": 0.1})
    class Pair:
        def __call__(self, x):
            return x

    start = time.perf_counter()
    serve.run(Pair.bind(), name="pair", route_prefix="/pair")
    urllib.request.urlopen(f"http://127.0.0.1:{port}/pair", timeout=60).read()
    out["time_to_serve_s"] = time.perf_counter() - start
    serve.delete("pair")

    gate = tempfile.mkdtemp(prefix="serve-bench-")

    @serve.deployment(
        ray_actor_options={"num_cpus": 0.1},
        max_ongoing_requests=1,
        autoscaling_config={
            "min_replicas": 1,
            "max_replicas": 4,
            "target_ongoing_requests": 1,
            "metrics_interval_s": 0.1,
            "look_back_period_s": 1.0,
            "upscale_delay_s": 0,
            "downscale_delay_s": 600,
        },
    )
    class Held:
        def __call__(self, i):
            with open(os.path.join(gate, f"pid-{i}"), "w") as f:
                f.write(str(os.getpid()))
            while not os.path.exists(os.path.join(gate, "go")):
                time.sleep(0.005)
            return os.getpid()

    held = serve.run(Held.bind(), name="held", route_prefix="/held")
    first_pid = held.remote(-1)
    open(os.path.join(gate, "go"), "w").close()
    first_pid = first_pid.result()
    os.remove(os.path.join(gate, "go"))
    start = time.perf_counter()
    responses = [held.remote(i) for i in range(4)]
    deadline = start + 120
    second = None
    while second is None and time.perf_counter() < deadline:
        for name in os.listdir(gate):
            if name.startswith("pid-") and name != "pid--1":
                try:
                    pid = int(open(os.path.join(gate, name)).read() or 0)
                except (OSError, ValueError):
                    continue
                if pid and pid != first_pid:
                    second = time.perf_counter()
        time.sleep(0.005)
    out["autoscale_new_replica_s"] = None if second is None else second - start
    open(os.path.join(gate, "go"), "w").close()
    for r in responses:
        r.result()
    serve.shutdown()
    ray.shutdown()
    shutil.rmtree(gate, ignore_errors=True)
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--side", choices=["oxray", "ray"])
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    if args.side:
        print("RESULT " + json.dumps(measure(args.side, args.calls)), flush=True)
        return
    figures = {}
    for name in ("oxray", "ray"):
        cmd = [sys.executable, __file__, "--side", name, "--calls", str(args.calls)]
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=tempfile.gettempdir(), timeout=1200)
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        if not lines:
            print(done.stdout[-3000:], done.stderr[-3000:], file=sys.stderr)
            raise SystemExit(f"{name} failed")
        figures[name] = json.loads(lines[-1][len("RESULT ") :])
    rows = [
        ("HTTP requests/s (wrk, 8 connections, 1 replica)", "http_rps", "{:.0f}", "higher"),
        ("HTTP p50 latency under that load (ms)", "http_p50_ms", "{:.2f}", "lower"),
        ("HTTP p99 latency under that load (ms)", "http_p99_ms", "{:.2f}", "lower"),
        ("HTTP p50 latency, one connection (ms)", "http_one_connection_p50_ms", "{:.2f}", "lower"),
        ("handle calls/s (sequential, 1 replica)", "handle_calls_per_s", "{:.0f}", "higher"),
        ("one handle call (ms)", "handle_call_ms", "{:.2f}", "lower"),
        ("serve.run of 2 replicas to first HTTP answer (s)", "time_to_serve_s", "{:.2f}", "lower"),
        ("load step to a new replica serving (s)", "autoscale_new_replica_s", "{:.2f}", "lower"),
    ]
    print("| | oxray | Ray Serve 2.60 | oxray vs Ray |\n| --- | ---: | ---: | ---: |")
    for label, key, fmt, better in rows:
        o, r = figures["oxray"].get(key), figures["ray"].get(key)
        if o is None or r is None:
            print(f"| {label} | {o} | {r} | |")
            continue
        ratio = o / r if better == "higher" else r / o
        print(f"| {label} | {fmt.format(o)} | {fmt.format(r)} | {ratio:.1f}x |")


if __name__ == "__main__":
    main()
