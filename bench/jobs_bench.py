#!/usr/bin/env python3
"""Jobs benchmark: the Jobs API of an oxray head vs Ray 2.60's, same clients, one run.

    python bench/jobs_bench.py                  # both sides, side by side
    python bench/jobs_bench.py --framework oxray
    python bench/jobs_bench.py --json

Each side runs a real head on 127.0.0.1 (`oxray start --head` / `ray start --head`, 2 CPUs)
under a private temp dir, then measures with the clients a user would use:
  * SDK `submit_job` -> SUCCEEDED of a hello world (`JobSubmissionClient`, polled every 10 ms),
    median of --repeat runs;
  * blocking `ray job submit --working-dir <dir> -- python hello.py` with Ray's CLI (against
    either head), and `oxray job submit` of the same against oxray, median of --repeat runs;
  * 100 concurrent no-op jobs (`true`), submitted from 8 threads: jobs/s until all are terminal.
See bench/README.md ("Jobs benchmark").
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Optional

HELLO = "print('hello world')\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(cmd, env, timeout=300):
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


class OxrayHead:
    name = "oxray"

    def __init__(self, root):
        self.env = {**os.environ, "OXRAY_TEMP_DIR": os.path.join(root, "oxray")}
        self.env.pop("RAY_ADDRESS", None)
        self.port, self.dashboard_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.dashboard_port}"
        self.cli = [sys.executable, "-m", "oxray.scripts.cli"]

    def start(self):
        started = run(
            self.cli
            + ["start", "--head", "--port", str(self.port), "--dashboard-port", str(self.dashboard_port)]
            + ["--num-cpus", "2"],
            self.env,
        )
        if started.returncode:
            raise RuntimeError(started.stdout + started.stderr)
        self.token = run(self.cli + ["get-auth-token"], self.env).stdout.strip()
        # Ray's CLI and SDK, pointed at this head, send the token from the environment.
        self.client_env = {**self.env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token}

    def stop(self):
        run(self.cli + ["stop", "--force"], self.env)

    def sdk(self):
        from oxray.job_submission import JobSubmissionClient

        os.environ["OXRAY_TEMP_DIR"] = self.env["OXRAY_TEMP_DIR"]
        return JobSubmissionClient(self.url, headers={"Authorization": f"Bearer {self.token}"})


class RayHead:
    name = "ray"

    def __init__(self, root):
        self.tmp = os.path.join(root, "ray")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        self.port, self.dashboard_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.dashboard_port}"
        self.ray = os.path.join(os.path.dirname(sys.executable), "ray")

    def start(self):
        started = run(
            [self.ray, "start", "--head", f"--port={self.port}", f"--dashboard-port={self.dashboard_port}"]
            + ["--num-cpus=2", "--include-dashboard=true", f"--temp-dir={self.tmp}", "--disable-usage-stats"],
            self.env,
        )
        if started.returncode:
            raise RuntimeError(started.stdout + started.stderr)
        self.client_env = dict(self.env)
        # `ray start --head` turns token auth on when a token exists (~/.ray/auth_token): use it.
        token_file = os.path.expanduser("~/.ray/auth_token")
        self.headers = {}
        if os.path.exists(token_file):
            with open(token_file) as f:
                token = f.read().strip()
            self.client_env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
            self.headers = {"Authorization": f"Bearer {token}"}
        # The dashboard's job module comes up after `ray start` returns.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                self.sdk().list_jobs()
                return
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.5)
        raise RuntimeError("Ray's Jobs API did not come up in 120 s")

    def stop(self):
        run([self.ray, "stop", "--force"], self.env)

    def sdk(self):
        from ray.job_submission import JobSubmissionClient

        return JobSubmissionClient(self.url, headers=self.headers)


def wait_terminal(client, job_id, poll=0.01, timeout=300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = str(client.get_job_status(job_id))
        if status in ("SUCCEEDED", "FAILED", "STOPPED"):
            return status
        time.sleep(poll)
    raise RuntimeError(f"job {job_id} did not finish in {timeout} s")


def measure(head, work, repeat):
    out = {}
    client = head.sdk()
    latencies = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        job = client.submit_job(entrypoint=f"{sys.executable} -c \"print('hello world')\"")
        status = wait_terminal(client, job)
        latencies.append(time.perf_counter() - t0)
        if status != "SUCCEEDED":
            raise RuntimeError(f"hello world {status}: {client.get_job_logs(job)}")
    out["sdk_submit_to_succeeded_s"] = statistics.median(latencies)
    ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
    env = {**head.client_env, "RAY_ADDRESS": head.url}
    cli_times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        done = run([ray_cli, "job", "submit", "--working-dir", work, "--", sys.executable, "hello.py"], env)
        cli_times.append(time.perf_counter() - t0)
        if done.returncode or "hello world" not in done.stdout + done.stderr:
            raise RuntimeError(f"ray job submit failed: {done.stdout}{done.stderr}")
    out["ray_cli_submit_s"] = statistics.median(cli_times)
    if head.name == "oxray":
        own = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            done = run(
                [sys.executable, "-m", "oxray.scripts.cli", "job", "submit", "--address", head.url]
                + ["--working-dir", work, "--", sys.executable, "hello.py"],
                {**head.env, "OXRAY_TOKEN": head.token},
            )
            own.append(time.perf_counter() - t0)
            if done.returncode or "hello world" not in done.stdout:
                raise RuntimeError(f"oxray job submit failed: {done.stdout}{done.stderr}")
        out["oxray_cli_submit_s"] = statistics.median(own)
    n = 100
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        jobs = list(pool.map(lambda _: client.submit_job(entrypoint="true"), range(n)))
        statuses = list(pool.map(lambda j: wait_terminal(client, j, poll=0.05), jobs))
    elapsed = time.perf_counter() - t0
    if statuses.count("SUCCEEDED") != n:
        raise RuntimeError(f"no-op jobs: {statuses}")
    out["noop_jobs_per_s"] = n / elapsed
    return out


def side(framework, repeat):
    root = tempfile.mkdtemp(prefix=f"jobs_bench_{framework}_")
    work = os.path.join(root, "work")
    os.makedirs(work)
    with open(os.path.join(work, "hello.py"), "w") as f:
        f.write(HELLO)
    head = OxrayHead(root) if framework == "oxray" else RayHead(root)
    try:
        head.start()
        return measure(head, work, repeat)
    finally:
        head.stop()
        shutil.rmtree(root, ignore_errors=True)


ROWS = [
    ("sdk_submit_to_succeeded_s", "SDK submit_job -> SUCCEEDED, hello world", "s", "<= 0.5 s"),
    ("ray_cli_submit_s", "`ray job submit --working-dir` (Ray's CLI), blocking", "s", "< 2 s"),
    ("oxray_cli_submit_s", "`oxray job submit --working-dir`, blocking", "s", "< 1 s"),
    ("noop_jobs_per_s", "100 concurrent no-op jobs", "jobs/s", ""),
]


def _fmt(value) -> str:
    return f"{value:.3f}" if value is not None else "-"


def run_sides(script: str, framework: str, repeat: int) -> dict:
    """Runs `script --side oxray` and `--side ray` (or one), each in its own process so one's
    imports and threads do not weigh on the other; their JSON results by side."""
    results = {}
    for side_name in ("oxray", "ray") if framework == "both" else (framework,):
        proc = run([sys.executable, script, "--side", side_name, "--repeat", str(repeat)], os.environ, 1800)
        if proc.returncode:
            print(f"{side_name}: failed\n{proc.stdout}\n{proc.stderr}", file=sys.stderr)
            continue
        results[side_name] = json.loads(proc.stdout.strip().splitlines()[-1])
    return results


def side_by_side(doc: str, script: str, side_fn) -> Optional[dict]:
    """The benchmarks' command line: `--side NAME` runs `side_fn(NAME, repeat)` and prints its JSON;
    otherwise both sides (or `--framework`) run, each in its own process, and their results are
    printed as JSON (`--json`, returning None) or returned for a table."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--framework", choices=("both", "oxray", "ray"), default="both")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--side", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        print(json.dumps(side_fn(args.side, args.repeat)))
        return None
    results = run_sides(script, args.framework, args.repeat)
    if args.json:
        print(json.dumps(results, indent=2))
        return None
    return results


def main():
    results = side_by_side(__doc__, __file__, side)
    if results is None:
        return
    print("| metric | unit | ray | oxray | oxray/ray | goal (oxray) |\n|---|---|---:|---:|---:|---|")
    for key, label, unit, goal in ROWS:
        o, r = results.get("oxray", {}).get(key), results.get("ray", {}).get(key)
        ratio = f"{o / r:.2f}" if o and r else ""
        print(f"| {label} | {unit} | {_fmt(r)} | {_fmt(o)} | {ratio} | {goal} |")


if __name__ == "__main__":
    main()
