#!/usr/bin/env python3
"""Dashboard benchmark: what the dashboard costs on an oxray head vs Ray 2.60's, one run.

    python bench/dashboard_bench.py                  # both sides, side by side
    python bench/dashboard_bench.py --framework oxray
    python bench/dashboard_bench.py --json

Each side runs a real head on 127.0.0.1 (`oxray start --head` / `ray start --head
--include-dashboard=true`, 2 CPUs) under a private temp dir (the heads of bench/jobs_bench.py), then:
  * idle: CPU and RSS of the process serving the dashboard over 10 s (oxray: the head process, which is
    also the head node's agent; Ray: its dashboard head process alone);
  * 10 browsers: the same while 10 clients each fetch, every second, what the overview page refreshes
    (oxray: `/ui/overview`; Ray: `/nodes?view=summary`, `/api/cluster_status`, `/api/jobs/`), for 15 s;
  * first paint: time to the overview's first contentful paint in headless Debian Chromium
    (a fresh browser context each time, so nothing is cached), median of --repeat;
  * oxray only: the head's RSS after 1,000 and after 2,000 jobs, and after 100 and 200 finished Train
    runs of 50 reports each (sent as their controllers send them): history is bounded, so it stays flat.
See bench/README.md ("Dashboard benchmark").
"""

from __future__ import annotations

import concurrent.futures
import glob
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

import psutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from jobs_bench import OxrayHead, RayHead, side_by_side, wait_terminal  # noqa: E402

CHROMIUM = os.environ.get("OXRAY_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"


def oxray_process(head) -> psutil.Process:
    for path in glob.glob(os.path.join(head.env["OXRAY_TEMP_DIR"], "nodes", "*.json")):
        with open(path) as f:
            record = json.load(f)
        if record.get("head"):
            return psutil.Process(int(record["pid"]))
    raise RuntimeError("no oxray head process on record")


def ray_dashboard_process(head) -> psutil.Process:
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if "dashboard/dashboard.py" in cmdline and head.tmp in cmdline:
            return proc
    raise RuntimeError("no Ray dashboard process")


def usage(proc: psutil.Process, seconds: float) -> tuple[float, float]:
    """(CPU % of one core, RSS MiB at the end) of `proc` over `seconds`."""
    before = proc.cpu_times()
    time.sleep(seconds)
    after = proc.cpu_times()
    cpu = (after.user - before.user + after.system - before.system) / seconds * 100
    return cpu, proc.memory_info().rss / 2**20


def browsers(url: str, paths: list, headers: dict, stop: threading.Event, n: int = 10) -> None:
    import urllib.request

    def one():
        while not stop.is_set():
            started = time.monotonic()
            for path in paths:
                request = urllib.request.Request(url + path, headers=headers)
                with urllib.request.urlopen(request, timeout=30) as reply:
                    reply.read()
            stop.wait(max(0.0, 1.0 - (time.monotonic() - started)))

    threads = [threading.Thread(target=one, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()


def oxray_session_cookie(head) -> dict:
    """A browser session on oxray's head (its cookie carries a session id, never the token)."""
    import urllib.request

    login = urllib.request.Request(
        f"{head.url}/api/authenticate", method="POST", headers={"Authorization": f"Bearer {head.token}"}
    )
    with urllib.request.urlopen(login, timeout=30) as reply:
        name, value = reply.headers["Set-Cookie"].split(";", 1)[0].split("=", 1)
    return {"name": name, "value": value, "url": head.url}


def first_paint(page_url: str, cookie: dict | None, repeat: int) -> float:
    from playwright.sync_api import sync_playwright

    paints = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        for _ in range(repeat + 1):
            context = browser.new_context()
            if cookie:
                context.add_cookies([cookie])
            page = context.new_page()
            page.goto(page_url, wait_until="load")
            page.wait_for_function("performance.getEntriesByName('first-contentful-paint').length > 0", timeout=30_000)
            paints.append(page.evaluate("performance.getEntriesByName('first-contentful-paint')[0].startTime"))
            context.close()
        browser.close()
    return statistics.median(paints[1:]) / 1000  # the first load warms the server, not measured


def flat_history(head) -> dict:
    """oxray's head RSS as jobs and Train runs pile up past what it keeps."""
    import oxray
    from oxray._private.api import _client

    proc = oxray_process(head)
    client = head.sdk()
    out = {}
    for round_ in (1, 2):
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            jobs = list(pool.map(lambda _: client.submit_job(entrypoint="true"), range(1000)))
            list(pool.map(lambda j: wait_terminal(client, j, poll=0.05), jobs))
        out[f"rss_after_{1000 * round_}_jobs_mib"] = proc.memory_info().rss / 2**20
    os.environ["OXRAY_TOKEN"] = head.token
    oxray.init(address=f"127.0.0.1:{head.port}")
    native = _client()
    for round_ in (1, 2):
        for i in range(100):
            run_id = f"bench-{round_}-{i}"
            reports = [json.dumps({"index": r, "metrics": {"loss": 1 / (r + 1), "epoch": r}}) for r in range(50)]
            state = {
                "id": run_id,
                "name": run_id,
                "status": "FINISHED",
                "start_time_ns": time.time_ns(),
                "attempts": [],
            }
            native.update_train_run(run_id, json.dumps(state), reports)
        out[f"rss_after_{100 * round_}_runs_mib"] = proc.memory_info().rss / 2**20
    oxray.shutdown()
    return out


def measure(head, repeat: int) -> dict:
    out = {}
    if head.name == "oxray":
        proc = oxray_process(head)
        paths, headers = ["/ui/overview"], {"Authorization": f"Bearer {head.token}"}
        cookie = oxray_session_cookie(head)
        page_url = f"{head.url}/overview"
    else:
        proc = ray_dashboard_process(head)
        paths, headers = ["/nodes?view=summary", "/api/cluster_status", "/api/jobs/"], dict(head.headers)
        token = headers.get("Authorization", "").removeprefix("Bearer ")
        cookie = {"name": "ray-authentication-token", "value": token, "url": head.url} if token else None
        page_url = f"{head.url}/#/overview"
    time.sleep(5)  # let start-up settle before the idle figures
    out["idle_cpu_pct"], out["idle_rss_mib"] = usage(proc, 10)
    stop = threading.Event()
    browsers(head.url, paths, headers, stop)
    time.sleep(2)
    out["serving_cpu_pct"], out["serving_rss_mib"] = usage(proc, 15)
    stop.set()
    out["first_paint_s"] = first_paint(page_url, cookie, repeat)
    if head.name == "oxray":
        out.update(flat_history(head))
    return out


def side(framework: str, repeat: int) -> dict:
    root = tempfile.mkdtemp(prefix=f"dashboard_bench_{framework}_")
    head = OxrayHead(root) if framework == "oxray" else RayHead(root)
    try:
        head.start()
        return measure(head, repeat)
    finally:
        head.stop()
        shutil.rmtree(root, ignore_errors=True)


ROWS = [
    ("idle_cpu_pct", "idle: CPU of the dashboard's process", "% of a core"),
    ("idle_rss_mib", "idle: RSS of the dashboard's process", "MiB"),
    ("serving_cpu_pct", "10 browsers, overview every second: CPU", "% of a core"),
    ("serving_rss_mib", "10 browsers, overview every second: RSS", "MiB"),
    ("first_paint_s", "overview, first contentful paint", "s"),
    ("rss_after_1000_jobs_mib", "head RSS after 1,000 jobs", "MiB"),
    ("rss_after_2000_jobs_mib", "head RSS after 2,000 jobs", "MiB"),
    ("rss_after_100_runs_mib", "head RSS after 100 Train runs (and the jobs)", "MiB"),
    ("rss_after_200_runs_mib", "head RSS after 200 Train runs (and the jobs)", "MiB"),
]


def main():
    results = side_by_side(__doc__, __file__, side)
    if results is None:
        return
    print("| metric | unit | ray | oxray | oxray/ray |\n|---|---|---:|---:|---:|")
    for key, label, unit in ROWS:
        o, r = results.get("oxray", {}).get(key), results.get("ray", {}).get(key)
        ratio = f"{o / r:.2f}" if o is not None and r else ""
        fmt = lambda v: f"{v:.3f}" if v is not None else "-"  # noqa: E731
        print(f"| {label} | {unit} | {fmt(r)} | {fmt(o)} | {ratio} |")


if __name__ == "__main__":
    main()
