#!/usr/bin/env python3
"""Core-runtime benchmark: oxray vs. Ray, same workloads, same script.

    python bench/core_bench.py                    # both sides that import, side by side
    python bench/core_bench.py --quick            # fewer iterations
    python bench/core_bench.py --framework ray    # one side only (still in a subprocess)
    python bench/core_bench.py --framework oxray --json   # machine-readable

Every side runs in its own subprocess ("child") with a hard timeout; inside the
child every workload has its own soft timeout (SIGALRM) and its own try/except,
so a failing workload shows up as an error in its cell and the run goes on.
The child imports its framework under the name ``ray`` (``import oxray as ray``
or ``import ray``) and uses only ray.init / shutdown / remote / get / put and
actors.  See bench/README.md for what each figure means.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

FRAMEWORKS = ("oxray", "ray")
MIB = 1024 * 1024
ARRAY_BYTES = 256 * MIB
N_TASKS = 2000  # batch size for throughput workloads (fixed, also in --quick)
N_RTT = 500  # samples for the round-trip workloads (fixed, also in --quick)

# --------------------------------------------------------------------------
# Metric catalogue: key -> (label, unit, better, group, format)
# "group" is the workload that produces the metric; if that workload fails,
# every metric of the group shows the error.
# --------------------------------------------------------------------------
METRICS = [
    ("import_s", "import of the module", "s", "lower", "import", "{:.3f}"),
    ("init_s", "init(num_cpus=2), first in process", "s", "lower", "init", "{:.3f}"),
    ("init_repeat_s", "init(), median of re-inits in process", "s", "lower", "init_repeat", "{:.3f}"),
    ("shutdown_s", "shutdown(), after the workloads", "s", "lower", "shutdown", "{:.3f}"),
    ("shutdown_repeat_s", "shutdown(), median of re-inits", "s", "lower", "init_repeat", "{:.3f}"),
    ("task_tput", "2,000 no-op tasks, throughput", "tasks/s", "higher", "task_tput", "{:,.0f}"),
    ("task_rtt_ms", "sync task round trip, median of 500", "ms", "lower", "task_rtt", "{:.3f}"),
    ("actor_rtt_ms", "sync actor call, median of 500", "ms", "lower", "actor_rtt", "{:.3f}"),
    ("actor_tput", "2,000 actor calls, throughput", "calls/s", "higher", "actor_tput", "{:,.0f}"),
    ("put_ms", "put 256 MiB ndarray", "ms", "lower", "putget", "{:.1f}"),
    ("get_ms", "get 256 MiB ndarray", "ms", "lower", "putget", "{:.1f}"),
    ("putget_gbps", "put+get 256 MiB, bandwidth", "GB/s", "higher", "putget", "{:.2f}"),
    ("memcpy_ms", "np.copy 256 MiB (baseline)", "ms", "lower", "putget", "{:.1f}"),
    ("putget_over_memcpy_best", "(put+get) / memcpy, best of N each", "x", "lower", "putget", "{:.2f}"),
    ("putget_over_memcpy", "(put+get) / memcpy, medians (info)", "x", "lower", "putget", "{:.2f}"),
    ("first_read_ms", "task(new ref of 256 MiB), first call per worker", "ms", "lower", "first_read", "{:.1f}"),
    ("later_read_ms", "task(that ref), later calls", "ms", "lower", "first_read", "{:.1f}"),
    ("pass_ref_ms", "task(ref of 256 MiB) -> arr[0]", "ms", "lower", "pass_ref", "{:.1f}"),
    ("pass_value_ms", "task(256 MiB by value) -> arr[0]", "ms", "lower", "pass_value", "{:.1f}"),
    ("idle_mem_mib", "idle cluster memory (PSS)", "MiB", "lower", "memory", "{:.1f}"),
    ("idle_mem_rss_mib", "idle cluster memory (RSS, info)", "MiB", "lower", "memory", "{:.1f}"),
    ("idle_procs", "cluster processes (descendants)", "count", "lower", "memory", "{:.0f}"),
    ("first_task_ms", "first task right after init", "ms", "lower", "warmup", "{:.1f}"),
    (
        "first_task_idle_node_ms",
        "first task on a node up with no worker (median of re-inits)",
        "ms",
        "lower",
        "init_repeat",
        "{:.1f}",
    ),
    ("actor_churn_per_s", "actors created and called once, per second", "actors/s", "higher", "actor_churn", "{:,.1f}"),
    ("actors_1000_s", "1,000 actors created and called once (oxray)", "s", "lower", "actor_churn", "{:.2f}"),
]
METRIC_BY_KEY = {m[0]: m for m in METRICS}

# Goals from the issue.  kind "ratio": compares oxray/ray; kind "abs": oxray's own value.
GOALS = [
    ("init_s", "ratio", "<=", 1 / 20, "oxray >= 20x faster (ratio <= 0.05)"),
    ("task_tput", "ratio", ">=", 5.0, "oxray >= 5x Ray (ratio >= 5)"),
    ("task_rtt_ms", "ratio", "<=", 1 / 5, "<= 1/5 of Ray (ratio <= 0.2)"),
    ("putget_over_memcpy_best", "abs", "<=", 2.0, "oxray put+get <= 2x one memcpy"),
    ("idle_mem_mib", "abs", "<", 60.0, "oxray < 60 MiB"),
    ("actors_1000_s", "abs", "<=", 10.0, "1,000 actors in <= 10 s"),
    ("first_task_idle_node_ms", "abs", "<=", 20.0, "first task on a cold node <= 20 ms"),
]


# ==========================================================================
# Child side: runs the workloads in-process for one framework.
# ==========================================================================


def _noop():
    return None


def _first(arr):
    return arr[0]


def _first_and_pid(arr):
    import os

    return arr[0], os.getpid()


class _Actor:
    def m(self):
        return None


WORKLOAD_GROUPS = (
    "define",
    "warmup",
    "memory",
    "task_rtt",
    "task_tput",
    "actor_rtt",
    "actor_tput",
    "actor_churn",
    "first_read",
    "putget",
    "pass_ref",
    "pass_value",
)


class WorkloadTimeout(Exception):
    pass


def _alarm_handler(signum, frame):  # pragma: no cover - timing dependent
    raise WorkloadTimeout("workload exceeded its soft timeout")


def _now():
    return time.perf_counter()


def _median(xs):
    return statistics.median(xs)


def _summ(xs, scale=1.0):
    xs = sorted(x * scale for x in xs)
    n = len(xs)
    return {
        "n": n,
        "median": statistics.median(xs),
        "min": xs[0],
        "max": xs[-1],
        "p90": xs[min(n - 1, int(math.ceil(0.9 * n)) - 1)],
        "p99": xs[min(n - 1, int(math.ceil(0.99 * n)) - 1)],
    }


def _log(fw, msg):
    print(f"[{fw}] {msg}", file=sys.stderr, flush=True)


class Child:
    def __init__(self, args):
        self.fw = args.child
        self.args = args
        self.out = args.out
        self.quick = args.quick
        self.res = {
            "framework": self.fw,
            "module": self.fw,
            "version": None,
            "python": sys.version.split()[0],
            "quick": self.quick,
            "metrics": {},
            "details": {},
            "errors": {},
            "pids": [],  # [pid, create_time] of cluster processes seen; for cleanup
            "done": False,
        }
        self.ray = None
        self.psutil = None
        self.np = None
        self.initialized = False
        self.t_init_wall = time.time()
        self._seen = set()
        self.ran = set()  # groups that went through run_step or skip
        self.interrupted = False

    # -- bookkeeping -------------------------------------------------------
    def save(self):
        tmp = self.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.res, f, indent=1, default=str)
        os.replace(tmp, self.out)

    def note_pids(self):
        """Remember every live descendant (pid, create_time) so the parent
        can kill leftovers even if this process dies or hangs."""
        if self.psutil is None:
            return
        try:
            for p in self.psutil.Process().children(recursive=True):
                try:
                    key = (p.pid, p.create_time())
                except Exception:
                    continue
                if key not in self._seen:
                    self._seen.add(key)
                    self.res["pids"].append(list(key))
        except Exception:
            pass
        self.save()

    def run_step(self, group, fn, timeout=None):
        """Run one workload with a soft timeout; record metrics or the error."""
        timeout = timeout or self.args.workload_timeout
        _log(self.fw, f"{group} ...")
        t0 = _now()
        old = signal.signal(signal.SIGALRM, _alarm_handler)
        signal.setitimer(signal.ITIMER_REAL, timeout)
        ok = False
        try:
            out = fn()
            signal.setitimer(signal.ITIMER_REAL, 0)
            metrics, details = out if isinstance(out, tuple) else (out, None)
            self.res["metrics"].update(metrics or {})
            if details:
                self.res["details"][group] = details
            ok = True
            shown = ", ".join(f"{k}={v:.4g}" for k, v in (metrics or {}).items())
            _log(self.fw, f"{group} ok ({_now() - t0:.1f}s) {shown}")
        except BaseException as e:  # noqa: BLE001 - record, then re-raise interrupts
            signal.setitimer(signal.ITIMER_REAL, 0)
            msg = f"{type(e).__name__}: {e}".strip()
            self.res["errors"][group] = msg[:2000]
            self.res["details"].setdefault("tracebacks", {})[group] = traceback.format_exc()[-4000:]
            _log(self.fw, f"{group} FAILED: {msg[:300]}")
            # SIGTERM (ours, or Ray's driver handler's SystemExit) / Ctrl-C:
            # stop the run; main()'s finally still calls shutdown().
            if not isinstance(e, Exception):
                self.interrupted = True
                raise
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
            self.ran.add(group)
            self.save()
        return ok

    def skip(self, group, why):
        self.ran.add(group)
        self.res["errors"][group] = f"skipped: {why}"
        self.save()

    # -- memory helpers ------------------------------------------------------
    def _mem(self, p):
        """(rss, pss, uss) in bytes; pss/uss None when not readable."""
        try:
            fi = p.memory_full_info()
            return fi.rss, getattr(fi, "pss", None), getattr(fi, "uss", None)
        except Exception:
            try:
                return p.memory_info().rss, None, None
            except Exception:
                return None, None, None

    # -- the run -----------------------------------------------------------
    def main(self):  # noqa: C901 - the benchmark child's whole run: setup, each workload, teardown
        fw = self.fw
        os.environ.pop("RAY_AUTH_MODE", None)

        # If the parent dies (even by SIGKILL) we get SIGTERM; SIGTERM unwinds
        # through the finally blocks so that ray.shutdown() still runs.
        def _term(signum, frame):
            raise KeyboardInterrupt(f"signal {signum}")

        signal.signal(signal.SIGTERM, _term)
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PDEATHSIG
            if os.getppid() == 1:
                raise KeyboardInterrupt("parent already gone")
        except KeyboardInterrupt:
            raise
        except Exception:
            pass
        self.save()
        try:
            import numpy as np

            self.np = np
        except Exception as e:
            self.res["errors"]["numpy"] = f"numpy not importable: {e}"
        try:
            import psutil

            self.psutil = psutil
        except Exception as e:
            self.res["errors"]["psutil"] = f"psutil not importable: {e}"

        def do_import():
            t0 = _now()
            mod = importlib.import_module(fw)
            dt = _now() - t0
            self.ray = mod
            self.res["version"] = getattr(mod, "__version__", None)
            return {"import_s": dt}

        if not self.run_step("import", do_import):
            self.finish()
            return

        ray = self.ray
        me = self.psutil.Process() if self.psutil else None
        base = self._mem(me) if me else (None, None, None)
        init_kwargs = {"num_cpus": 2}
        if fw == "ray":
            init_kwargs["include_dashboard"] = False
        self.res["details"]["init_kwargs"] = init_kwargs

        def do_init():
            gc.collect()
            self.t_init_wall = time.time()
            t0 = _now()
            ray.init(**init_kwargs)
            dt = _now() - t0
            self.initialized = True
            return {"init_s": dt}

        try:
            if self.run_step("init", do_init):
                self.note_pids()
                try:
                    self.workloads(base)
                except Exception as e:  # a bug outside run_step: keep going
                    msg = f"{type(e).__name__}: {e}"
                    self.res["errors"]["workloads"] = msg
                    _log(fw, f"workloads aborted: {msg}")
                    for g in WORKLOAD_GROUPS:
                        if g not in self.ran:
                            self.skip(g, f"workloads aborted ({msg[:200]})")
            else:
                for g in WORKLOAD_GROUPS:
                    self.skip(g, "init failed")
        finally:
            self.note_pids()
            if self.initialized or "init" in self.res["errors"]:
                signal.signal(signal.SIGTERM, signal.SIG_IGN)  # let shutdown finish
                self.run_step("shutdown", self.do_shutdown)
                signal.signal(signal.SIGTERM, _term)
        if "shutdown" in self.res["errors"] or "init" in self.res["errors"]:
            self.skip("init_repeat", "first init/shutdown failed")
        elif self.args.init_repeats > 0:
            self.run_step("init_repeat", self.do_init_repeat, timeout=self.args.workload_timeout * 2)
        self.check_leftovers()
        self.finish()

    def do_shutdown(self):
        t0 = _now()
        self.ray.shutdown()
        dt = _now() - t0
        self.initialized = False
        return {"shutdown_s": dt}

    def do_init_repeat(self):
        ray = self.ray
        kw = self.res["details"]["init_kwargs"]
        inits, shuts, firsts = [], [], []
        noop = ray.remote(_noop)
        for _ in range(self.args.init_repeats):
            gc.collect()
            t0 = _now()
            ray.init(**kw)
            t1 = _now()
            self.initialized = True
            self.note_pids()
            # A node up for a while with no worker yet (what it starts on its own is warm): the
            # first task's cost is starting its worker.
            time.sleep(self.args.settle)
            t_task = _now()
            ray.get(noop.remote())
            firsts.append(_now() - t_task)
            t_shutdown = _now()
            ray.shutdown()
            t2 = _now()
            self.initialized = False
            inits.append(t1 - t0)
            shuts.append(t2 - t_shutdown)
        return (
            {
                "init_repeat_s": _median(inits),
                "shutdown_repeat_s": _median(shuts),
                "first_task_idle_node_ms": _median(firsts) * 1e3,
            },
            {"init_s": inits, "shutdown_s": shuts, "first_task_s": firsts},
        )

    def check_leftovers(self):
        """Descendants still alive a few seconds after the last shutdown."""
        if self.psutil is None:
            return
        deadline = _now() + 10
        alive = []
        while _now() < deadline:
            alive = []
            for p in self.psutil.Process().children(recursive=True):
                try:
                    if p.status() != self.psutil.STATUS_ZOMBIE:
                        alive.append(p)
                except Exception:
                    pass
            if not alive:
                break
            time.sleep(0.25)
        left = []
        for p in alive:
            try:
                left.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
            except Exception:
                left.append(str(p.pid))
        self.res["details"]["leftover_after_shutdown"] = left

    def finish(self):
        self.res["done"] = True
        self.save()

    def workloads(self, base):  # noqa: C901 - the benchmark table: one branch per workload
        ray, np, args = self.ray, self.np, self.args
        quick = self.quick
        state = {}

        def define():
            # the same as decorating with @ray.remote
            state["noop"] = ray.remote(_noop)
            state["first"] = ray.remote(_first)
            state["first_and_pid"] = ray.remote(_first_and_pid)
            return {}

        if not self.run_step("define", define):
            for g in WORKLOAD_GROUPS[1:]:
                self.skip(g, "ray.remote() on a function failed")
            return
        noop, first = state["noop"], state["first"]

        def get_actor():
            if "actor_error" in state:
                raise RuntimeError(f"actor unavailable: {state['actor_error']}")
            if "actor" not in state:
                try:
                    Actor = ray.remote(_Actor)  # == @ray.remote on the class
                    a = Actor.remote()
                    assert ray.get(a.m.remote()) is None
                except Exception as e:
                    state["actor_error"] = f"{type(e).__name__}: {e}"
                    raise
                state["actor"] = a
            return state["actor"]

        # ---- warm-up: one task and one actor call --------------------------
        def warm():
            t0 = _now()
            assert ray.get(noop.remote()) is None
            t1 = _now()
            det = {"first_task_s": t1 - t0}
            try:  # an actor failure shows up in the actor rows, not here
                get_actor()
                det["actor_create_and_first_call_s"] = _now() - t1
            except Exception as e:
                det["actor_error"] = f"{type(e).__name__}: {e}"
            return {"first_task_ms": (t1 - t0) * 1e3}, det

        warm_ok = self.run_step("warmup", warm)
        self.note_pids()

        # ---- idle cluster memory ----------------------------------------
        def memory():
            ps = self.psutil
            if ps is None:
                raise RuntimeError("psutil is not installed")
            time.sleep(args.settle)  # let prestarted workers etc. come up and go idle
            me = ps.Process()
            d_rss, d_pss, d_uss = self._mem(me)
            b_rss, b_pss, b_uss = base
            procs = []
            for p in me.children(recursive=True):
                try:
                    rss, pss, uss = self._mem(p)
                    if rss is None:
                        continue
                    procs.append(
                        {
                            "pid": p.pid,
                            "name": p.name(),
                            "cmd": " ".join(p.cmdline())[:160],
                            "rss": rss,
                            "pss": pss,
                            "uss": uss,
                        }
                    )
                except Exception:
                    continue
            have_pss = d_pss is not None and b_pss is not None and all(p["pss"] is not None for p in procs)
            have_uss = d_uss is not None and b_uss is not None and all(p["uss"] is not None for p in procs)
            basis = "pss" if have_pss else ("uss" if have_uss else "rss")
            drv = {
                "pss": (d_pss - b_pss) if have_pss else None,
                "uss": (d_uss - b_uss) if have_uss else None,
                "rss": d_rss - b_rss,
            }
            total = drv[basis] + sum(p[basis] for p in procs)
            total_rss = drv["rss"] + sum(p["rss"] for p in procs)
            # Diagnostic (not counted): processes started since init() that
            # mention the framework and were orphaned/daemonized (parent is
            # pid 1 or gone), i.e. cluster processes that escaped the tree.
            desc = {p["pid"] for p in procs} | {me.pid}
            stray = []
            for p in ps.process_iter(["pid", "ppid", "cmdline", "create_time"]):
                try:
                    if p.info["pid"] in desc or (p.info["create_time"] or 0) < self.t_init_wall - 1:
                        continue
                    if p.info["ppid"] not in (0, 1) and ps.pid_exists(p.info["ppid"]):
                        continue
                    cmd = " ".join(p.info["cmdline"] or [])
                    if self.fw in cmd:
                        stray.append(f"{p.info['pid']} {cmd[:120]}")
                except Exception:
                    continue
            details = {
                "basis": basis,
                "driver_growth_bytes": drv,
                "driver_now": {"rss": d_rss, "pss": d_pss, "uss": d_uss},
                "driver_before_init": {"rss": b_rss, "pss": b_pss, "uss": b_uss},
                "processes": sorted(procs, key=lambda p: -(p[basis] or 0)),
                "not_descendants_not_counted": stray,
                "settle_s": args.settle,
                "after_warmup": bool(warm_ok),
                "actor_alive": "actor" in state,
            }
            return (
                {"idle_mem_mib": total / MIB, "idle_mem_rss_mib": total_rss / MIB, "idle_procs": float(len(procs))},
                details,
            )

        self.run_step("memory", memory)

        # ---- tasks -------------------------------------------------------
        n_rtt_warm = 20 if quick else 50

        def task_rtt():
            for _ in range(n_rtt_warm):
                ray.get(noop.remote())
            lat = []
            for _ in range(N_RTT):
                t0 = _now()
                ray.get(noop.remote())
                lat.append(_now() - t0)
            s = _summ(lat, 1e3)
            return {"task_rtt_ms": s["median"]}, s

        def tput(make_ref):
            reps = args.repeats
            # warm-up batch (smaller in --quick)
            warm_n = 500 if quick else N_TASKS
            ray.get([make_ref() for _ in range(warm_n)])
            rates = []
            for _ in range(reps):
                t0 = _now()
                out = ray.get([make_ref() for _ in range(N_TASKS)])
                dt = _now() - t0
                assert len(out) == N_TASKS
                rates.append(N_TASKS / dt)
                del out
            return _median(rates), {"n": N_TASKS, "repeats": reps, "rates": rates, "min": min(rates), "max": max(rates)}

        def task_tput():
            r, d = tput(lambda: noop.remote())
            return {"task_tput": r}, d

        self.run_step("task_rtt", task_rtt)
        self.run_step("task_tput", task_tput)

        # ---- actors ------------------------------------------------------
        def actor_rtt():
            a = get_actor()
            for _ in range(n_rtt_warm):
                ray.get(a.m.remote())
            lat = []
            for _ in range(N_RTT):
                t0 = _now()
                ray.get(a.m.remote())
                lat.append(_now() - t0)
            s = _summ(lat, 1e3)
            return {"actor_rtt_ms": s["median"]}, s

        def actor_tput():
            a = get_actor()
            r, d = tput(lambda: a.m.remote())
            return {"actor_tput": r}, d

        self.run_step("actor_rtt", actor_rtt)
        self.run_step("actor_tput", actor_tput)
        self.note_pids()

        # ---- many actors: one worker process each ----------------------
        def actor_churn():
            # Ray's workers are whole interpreters (about 60 MiB each): 1,000 do not fit this
            # machine's memory, so its side creates fewer; the rate compares the two.
            n = args.actors if self.fw == "oxray" else min(args.actors, args.ray_actors)
            Actor = ray.remote(_Actor)
            t0 = _now()
            actors = [Actor.remote() for _ in range(n)]
            ray.get([a.m.remote() for a in actors])
            took = _now() - t0
            for a in actors:
                ray.kill(a)
            out = {"actor_churn_per_s": n / took}
            if n == 1000:
                out["actors_1000_s"] = took
            return out, {"actors": n, "seconds": took}

        self.run_step("actor_churn", actor_churn)

        # ---- 256 MiB objects ----------------------------------------------
        if np is None:
            for g in ("first_read", "putget", "pass_ref", "pass_value"):
                self.skip(g, "numpy not importable")
            return
        arr = np.arange(ARRAY_BYTES // 8, dtype=np.int64)  # touches every page
        arr[0] = 42
        big_reps = args.big_repeats

        def first_read():
            # A worker's first task on an ndarray ref, after the pool is warm (the
            # tasks and actor calls above ran) but before any worker saw an array:
            # sequential calls until each worker has run twice or 40 calls.
            first_and_pid = state["first_and_pid"]
            ref = ray.put(arr)
            firsts, later, order = {}, [], []
            for _ in range(40):
                t0 = _now()
                v, pid = ray.get(first_and_pid.remote(ref))
                dt = _now() - t0
                assert v == 42
                order.append((pid, dt))
                if pid in firsts:
                    later.append(dt)
                else:
                    firsts[pid] = dt
                if len(firsts) >= 2 and len(later) >= 10:
                    break
            del ref
            gc.collect()
            return (
                {"first_read_ms": _median(list(firsts.values())) * 1e3, "later_read_ms": _median(later) * 1e3},
                {"first_call_per_worker_s": firsts, "workers": len(firsts), "calls": order},
            )

        def putget():
            # memcpy baseline in this very process: one np.copy (allocation +
            # page faults of the destination included, as a user would see it).
            # It is interleaved with the put/get samples so both see the same
            # machine state (fresh-page faults are noisy on VMs, see README).
            c = np.copy(arr)  # warm-up
            del c
            ref = ray.put(arr)  # warm-up put/get
            out = ray.get(ref)
            assert out.shape == arr.shape and out[0] == 42 and out[-1] == arr[-1]
            del out, ref
            gc.collect()
            mc, puts, gets, both = [], [], [], []
            for _ in range(big_reps):
                t0 = _now()
                c = np.copy(arr)
                mc.append(_now() - t0)
                del c
                t0 = _now()
                ref = ray.put(arr)
                t1 = _now()
                out = ray.get(ref)
                t2 = _now()
                assert out.shape == arr.shape and out[0] == 42 and out[-1] == arr[-1]
                puts.append(t1 - t0)
                gets.append(t2 - t1)
                both.append(t2 - t0)
                del out, ref
                gc.collect()
            # pure copy bandwidth into an already-faulted buffer (info only)
            dst = np.empty_like(arr)
            np.copyto(dst, arr)
            mc_pref = []
            for _ in range(big_reps):
                t0 = _now()
                np.copyto(dst, arr)
                mc_pref.append(_now() - t0)
            del dst
            m_both = _median(both)
            m_mc = _median(mc)
            return (
                {
                    "put_ms": _median(puts) * 1e3,
                    "get_ms": _median(gets) * 1e3,
                    "putget_gbps": ARRAY_BYTES / m_both / 1e9,
                    "memcpy_ms": m_mc * 1e3,
                    "putget_over_memcpy": m_both / m_mc,
                    "putget_over_memcpy_best": min(both) / min(mc),
                },
                {
                    "bytes": ARRAY_BYTES,
                    "repeats": big_reps,
                    "put_s": puts,
                    "get_s": gets,
                    "putget_s": both,
                    "np_copy_s": mc,
                    "copyto_prefaulted_s": mc_pref,
                    "copyto_prefaulted_gbps": ARRAY_BYTES / _median(mc_pref) / 1e9,
                },
            )

        def pass_ref():
            ref = ray.put(arr)
            assert ray.get(first.remote(ref)) == 42  # warm-up
            ts = []
            for _ in range(big_reps):
                t0 = _now()
                v = ray.get(first.remote(ref))
                ts.append(_now() - t0)
                assert v == 42
            del ref
            gc.collect()
            return {"pass_ref_ms": _median(ts) * 1e3}, {"s": ts, "note": "put() not timed"}

        def pass_value():
            assert ray.get(first.remote(arr)) == 42  # warm-up
            gc.collect()
            ts = []
            for _ in range(big_reps):
                t0 = _now()
                v = ray.get(first.remote(arr))
                ts.append(_now() - t0)
                assert v == 42
                gc.collect()
            return {"pass_value_ms": _median(ts) * 1e3}, {"s": ts}

        self.run_step("first_read", first_read)
        self.run_step("putget", putget)
        self.run_step("pass_ref", pass_ref)
        self.run_step("pass_value", pass_value)
        arr = None  # noqa: F841  (free 256 MiB before shutdown)
        state.clear()  # drop the actor handle before shutdown
        gc.collect()


# ==========================================================================
# Parent side: spawns one child per framework, collects, prints.
# ==========================================================================


def _psutil_or_none():
    try:
        import psutil

        return psutil
    except Exception:
        return None


def _kill_tree(proc, recorded, psutil):
    """Kill the child, its process group, all its live descendants and every
    recorded cluster pid (checked against its create_time)."""
    victims = []
    if psutil is not None:
        try:
            victims = psutil.Process(proc.pid).children(recursive=True)
        except Exception:
            victims = []
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except Exception:
        pass
    try:
        proc.kill()
    except Exception:
        pass
    killed = 0
    for v in victims:
        try:
            v.kill()
            killed += 1
        except Exception:
            pass
    killed += _kill_recorded(recorded, psutil, grace=0)
    return killed


def _kill_recorded(recorded, psutil, grace=10.0):
    """Wait up to `grace` s for recorded cluster processes to exit, then kill
    the survivors.  Returns how many had to be killed."""
    if psutil is None or not recorded:
        return 0
    deadline = time.time() + grace

    def alive():
        out = []
        for pid, ctime in recorded:
            try:
                p = psutil.Process(pid)
                if abs(p.create_time() - ctime) < 0.01 and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
            except Exception:
                pass
        return out

    left = alive()
    while left and time.time() < deadline:
        time.sleep(0.25)
        left = alive()
    n = 0
    for p in left:
        try:
            p.kill()
            n += 1
        except Exception:
            pass
    return n


def _child_env():
    env = dict(os.environ)
    env.pop("RAY_AUTH_MODE", None)
    # No phone-home attempts from Ray (there is no network here anyway).
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _become_subreaper():
    """Linux: orphaned descendants (e.g. workers of a killed raylet) are
    re-parented to us instead of init, so we can reap them and their CPU time
    shows up in RUSAGE_CHILDREN."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except Exception:
        return False


def _reap_orphans(timeout):
    """Reap every exited child (incl. adopted orphans); wait up to `timeout`
    for the rest to exit.  Returns pids still running."""
    deadline = time.time() + timeout
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return []
        if pid == 0:
            if time.time() > deadline:
                break
            time.sleep(0.1)
    try:
        return [int(x) for x in os.listdir("/proc") if x.isdigit() and _ppid(int(x)) == os.getpid()]
    except Exception:
        return []


def _ppid(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except Exception:
        return None


class _ProcSampler:
    """Samples /proc to measure, directly, the CPU time used by processes
    that are NOT ours (not the parent and not its descendants) while a side
    runs.  Processes that live less than one sampling interval are missed."""

    def __init__(self):
        self.me = os.getpid()
        self.hz = os.sysconf("SC_CLK_TCK")
        self.boot_ticks = None
        self.start = {}  # (pid, starttime) -> cpu ticks at first sight
        self.last = {}  # (pid, starttime) -> (cpu ticks, ours?)
        self.t0_ticks = None

    @staticmethod
    def _read(pid):
        with open(f"/proc/{pid}/stat") as f:
            raw = f.read()
        head, tail = raw.rsplit(")", 1)
        rest = tail.split()
        # fields after ")": state(0) ppid(1) ... utime(11) stime(12) ... starttime(19)
        return (int(rest[1]), int(rest[11]) + int(rest[12]), int(rest[19]), head.split("(", 1)[-1][:40])

    def sample(self):
        procs = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                procs[int(name)] = self._read(int(name))
            except Exception:
                continue
        parent = {pid: v[0] for pid, v in procs.items()}
        self.names = getattr(self, "names", {})

        def ours(pid):
            for _ in range(64):
                if pid == self.me:
                    return True
                pid = parent.get(pid)
                if pid is None or pid <= 1:
                    return False
            return False

        if self.t0_ticks is None:
            with open("/proc/uptime") as f:
                self.t0_ticks = float(f.read().split()[0]) * self.hz
        for pid, (_ppid, cpu, st, comm) in procs.items():
            key = (pid, st)
            self.names[key] = comm
            if key not in self.start:
                # started after the first sample: count all of its CPU
                self.start[key] = cpu if st < self.t0_ticks else 0
            self.last[key] = (cpu, ours(pid) or self.last.get(key, (0, False))[1])

    def foreign_cpu_s(self):
        return sum(c - self.start[k] for k, (c, o) in self.last.items() if not o and k[0] != self.me) / self.hz

    def top_foreign(self, n=8):
        rows = [
            ((c - self.start[k]) / self.hz, k[0], self.names.get(k, "?"))
            for k, (c, o) in self.last.items()
            if not o and k[0] != self.me
        ]
        rows = [r for r in sorted(rows, reverse=True)[:n] if r[0] > 0]
        return [f"{cpu:.2f}s pid {pid} {name}" for cpu, pid, name in rows]


def _cpu_times():
    """(total, idle+iowait, steal) jiffies, machine-wide."""
    with open("/proc/stat") as f:
        vals = [int(x) for x in f.readline().split()[1:]]
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)  # idle + iowait
    return sum(vals[:8]), idle, (vals[7] if len(vals) > 7 else 0)


def background_cpu(interval=1.0):
    """% of all CPUs busy (machine-wide) over `interval` s while we do nothing."""
    try:
        t0, i0, _ = _cpu_times()
        time.sleep(interval)
        t1, i1, _ = _cpu_times()
        return 100.0 * (1 - (i1 - i0) / max(1, t1 - t0))
    except Exception:
        try:
            return 100.0 * os.getloadavg()[0] / (os.cpu_count() or 1)
        except Exception:
            return None


def merge_rounds(rounds):
    """Median of each metric over the rounds that produced it."""
    ok = [r for r in rounds if "skipped" not in r]
    if not ok:
        return rounds[0]
    if len(rounds) == 1:
        return rounds[0]
    m = {}
    for r in ok:
        for k, v in r.get("metrics", {}).items():
            m.setdefault(k, []).append(v)
    merged = dict(ok[-1])
    merged["metrics"] = {k: _median(v) for k, v in m.items()}
    errs = {}
    for i, r in enumerate(rounds):
        for g, e in r.get("errors", {}).items():
            errs[g] = f"round {i + 1}: {e}" if g not in errs else errs[g]
    # keep an error only where no round produced the group's metrics
    produced = {METRIC_BY_KEY[k][4] for k in merged["metrics"] if k in METRIC_BY_KEY}
    merged["errors"] = {g: e for g, e in errs.items() if g not in produced}
    partial = {g: e for g, e in errs.items() if g in produced}
    merged["details"] = {"rounds": rounds, "errors_in_some_rounds": partial}
    merged["samples_per_metric"] = {k: len(v) for k, v in m.items()}
    merged["wall_s"] = sum(r.get("wall_s", 0) for r in rounds)
    merged["bg_cpu_pct"] = max((r.get("bg_cpu_pct") or 0) for r in rounds)
    fcs = [r.get("foreign_cpu_pct") for r in rounds if r.get("foreign_cpu_pct") is not None]
    merged["foreign_cpu_pct"] = max(fcs) if fcs else None
    merged["rounds"] = len(rounds)
    return merged


def probe_import(fw, python, timeout=180):
    code = f"import {fw} as m; print(getattr(m, '__version__', '?'))"
    try:
        r = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=timeout, env=_child_env())
    except subprocess.TimeoutExpired:
        return False, f"`import {fw}` timed out after {timeout}s"
    except OSError as e:
        return False, f"cannot run {python}: {e}"
    if r.returncode != 0:
        lines = [ln for ln in (r.stderr or "").strip().splitlines() if ln.strip()]
        return False, (lines[-1] if lines else f"exit {r.returncode}")
    return True, r.stdout.strip()


def run_side(fw, python, args):  # noqa: C901 - a benchmark driver: one branch per side and setting
    """Run one framework in a child process; always returns a result dict."""
    psutil = _psutil_or_none()
    fd, out = tempfile.mkstemp(prefix=f"core_bench_{fw}_", suffix=".json")
    os.close(fd)
    cmd = [
        python,
        os.path.abspath(__file__),
        "--child",
        fw,
        "--out",
        out,
        "--repeats",
        str(args.repeats),
        "--big-repeats",
        str(args.big_repeats),
        "--init-repeats",
        str(args.init_repeats),
        "--settle",
        str(args.settle),
        "--actors",
        str(args.actors),
        "--ray-actors",
        str(args.ray_actors),
        "--workload-timeout",
        str(args.workload_timeout),
    ]
    if args.quick:
        cmd.append("--quick")
    if args.wait_idle > 0:
        deadline, quiet = time.time() + args.wait_idle, 0
        while time.time() < deadline and quiet < 3:
            b = background_cpu()
            quiet = quiet + 1 if (b is not None and b < 10) else 0
        if quiet < 3:
            print(
                f"== {fw}: machine still busy after --wait-idle {args.wait_idle:.0f}s; running anyway",
                file=sys.stderr,
                flush=True,
            )
    bg = background_cpu()
    print(
        f"== running {fw} side (background CPU before start: {'?' if bg is None else f'{bg:.0f}%'}): {' '.join(cmd)}",
        file=sys.stderr,
        flush=True,
    )
    t0 = time.time()
    try:
        import resource

        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        st0 = _cpu_times()
    except Exception:
        ru0 = st0 = None
    # child stdout -> our stderr, so our stdout stays clean for --json
    proc = subprocess.Popen(cmd, stdout=sys.stderr, stderr=sys.stderr, env=_child_env(), start_new_session=True)
    timed_out = False
    sampler = None
    try:
        sampler = _ProcSampler()
        sampler.sample()
    except Exception:
        sampler = None
    deadline = time.time() + args.timeout
    try:
        while True:
            try:
                rc = proc.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                if time.time() > deadline:
                    raise
                if sampler is not None:
                    try:
                        sampler.sample()
                    except Exception:
                        sampler = None
    except subprocess.TimeoutExpired:
        timed_out = True
        rc = None
    except KeyboardInterrupt:
        res = _load(out)
        n = _kill_tree(proc, res.get("pids", []), psutil)
        _reap_orphans(1.0)
        print(f"== interrupted: killed the {fw} side and {n} cluster processes", file=sys.stderr, flush=True)
        for path in (out, out + ".tmp"):
            try:
                os.unlink(path)
            except OSError:
                pass
        raise
    res = _load(out)
    recorded = res.get("pids", [])
    if timed_out:
        n = _kill_tree(proc, recorded, psutil)
        res.setdefault("errors", {})["_side"] = (
            f"side timed out after {args.timeout}s; killed child and {n} cluster processes"
        )
    else:
        n = _kill_recorded(recorded, psutil, grace=10.0)
        if n:
            res.setdefault("details", {})["parent_killed_leftovers"] = n
            print(f"== {fw}: killed {n} leftover cluster processes", file=sys.stderr)
        if rc != 0 or not res.get("done"):
            res.setdefault("errors", {})["_side"] = f"child exited with code {rc} before finishing (see log above)"
    # adopted orphans (we are a subreaper): give them a moment, then kill
    still = _reap_orphans(5.0)
    for pid in still:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if still:
        _reap_orphans(2.0)
        res.setdefault("details", {})["parent_killed_orphans"] = len(still)
        print(f"== {fw}: killed {len(still)} orphaned cluster processes", file=sys.stderr)
    wall = time.time() - t0
    # CPU used by *other* processes while this side ran, measured directly by
    # sampling /proc.  For comparison, also machine-wide busy CPU time and the
    # CPU time of our reaped process tree (getrusage).
    foreign = None
    ncpu = os.cpu_count() or 1
    acct = {"wall_s": wall, "cpus": ncpu}
    if sampler is not None:
        try:
            sampler.sample()
            acct["foreign_sampled_cpu_s"] = sampler.foreign_cpu_s()
            acct["top_foreign"] = sampler.top_foreign()
            foreign = 100.0 * acct["foreign_sampled_cpu_s"] / (wall * ncpu)
        except Exception:
            pass
    if ru0 is not None and not timed_out:
        try:
            ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            st1 = _cpu_times()
            hz = os.sysconf("SC_CLK_TCK")
            acct["machine_busy_cpu_s"] = ((st1[0] - st1[1]) - (st0[0] - st0[1])) / hz
            # time the hypervisor gave our vCPUs to someone else
            acct["steal_pct"] = 100.0 * (st1[2] - st0[2]) / max(1, st1[0] - st0[0])
            acct["our_tree_cpu_s"] = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
        except Exception:
            pass
    res["cpu_accounting"] = acct
    res["foreign_cpu_pct"] = foreign
    res["framework"] = fw
    res["bg_cpu_pct"] = bg
    res["wall_s"] = time.time() - t0
    res["python_exe"] = python
    for path in (out, out + ".tmp"):
        try:
            os.unlink(path)
        except OSError:
            pass
    return res


def _load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except Exception:
        return {"metrics": {}, "errors": {}, "details": {}, "pids": []}


def cell(side, key):
    """Text for one framework's value of one metric (or its error)."""
    if side is None:
        return "-"
    if "skipped" in side:
        return "skipped"
    label, unit, better, group, fmt = METRIC_BY_KEY[key][1:]
    v = side.get("metrics", {}).get(key)
    if v is not None:
        return fmt.format(v)
    err = side.get("errors", {}).get(group) or side.get("errors", {}).get("_side")
    if err:
        if err.startswith("skipped"):
            return "skipped"
        if err.startswith("side timed out"):
            return "ERR: side timeout"
        if err.startswith("child exited"):
            return "ERR: child crashed"
        return "ERR: " + err.split(":", 1)[0].strip()[:24]
    return "not run"


def goal_status(goal, sides):
    key, kind, op, thr, text = goal
    ox = (sides.get("oxray") or {}).get("metrics", {}).get(key)
    ry = (sides.get("ray") or {}).get("metrics", {}).get(key)
    if kind == "ratio":
        if ox is None or ry is None or ry == 0:
            return None, None
        val = ox / ry
    else:
        if ox is None:
            return None, None
        val = ox
    met = {"<=": val <= thr, ">=": val >= thr, "<": val < thr}[op]
    return met, val


def print_table(sides, order, file=sys.stdout):
    cols = [fw for fw in order if fw in sides]
    both = "oxray" in cols and "ray" in cols
    goals = {g[0]: g for g in GOALS}
    header = ["metric", "unit", "better"] + cols
    if both:
        header += ["oxray/ray"]
    header += ["goal", "met"]
    rows = []
    for key, label, unit, better, _group, _fmt in METRICS:
        row = [label, unit, better] + [cell(sides[fw], key) for fw in cols]
        if both:
            a = sides["oxray"].get("metrics", {}).get(key) if "skipped" not in sides["oxray"] else None
            b = sides["ray"].get("metrics", {}).get(key) if "skipped" not in sides["ray"] else None
            row.append(f"{a / b:.3g}x" if (a is not None and b) else "-")
        g = goals.get(key)
        if g:
            met, _ = goal_status(g, sides)
            row += [g[4], "-" if met is None else ("yes" if met else "NO")]
        else:
            row += ["", ""]
        rows.append(row)
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    right = set(range(3, 3 + len(cols) + (1 if both else 0)))

    def fmt_row(r):
        return "  ".join(
            (str(c).rjust(w) if i in right else str(c).ljust(w)) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ).rstrip()

    print(fmt_row(header), file=file)
    print("  ".join("-" * w for w in widths), file=file)
    for r in rows:
        print(fmt_row(r), file=file)


def print_report(sides, order, args, file=sys.stdout):  # noqa: C901 - report formatting: one branch per table and column
    print("", file=file)
    print("oxray core benchmark" + (" (--quick)" if args.quick else ""), file=file)
    for fw in order:
        s = sides.get(fw)
        if s is None:
            continue
        if "skipped" in s:
            print(f"  {fw}: SKIPPED - {s['skipped']}", file=file)
        else:
            bg = s.get("bg_cpu_pct")
            rounds = f", median of {s['rounds']} rounds" if s.get("rounds", 1) > 1 else ""
            fc = s.get("foreign_cpu_pct")
            print(
                f"  {fw}: version {s.get('version')} python {s.get('python')} "
                f"({s.get('python_exe')}), side wall time {s.get('wall_s', 0):.0f}s{rounds}",
                file=file,
            )
            steal = s.get("cpu_accounting", {}).get("steal_pct")
            print(
                f"      other processes' CPU: {'?' if bg is None else f'{bg:.0f}%'} before start, "
                f"{'?' if fc is None else f'{fc:.0f}%'} during the run; hypervisor steal "
                f"{'?' if steal is None else f'{steal:.1f}%'}",
                file=file,
            )
    try:
        ncpu = os.cpu_count()
    except Exception:
        ncpu = "?"
    print(f"  machine: {ncpu} logical CPUs; ratio = oxray value / ray value", file=file)
    print("", file=file)
    print_table(sides, order, file=file)
    # errors in full
    errs = []
    for fw in order:
        s = sides.get(fw)
        if not s or "skipped" in s:
            continue
        for g, e in s.get("errors", {}).items():
            errs.append(f"  [{fw}] {g}: {e}")
        all_details = [s.get("details", {})] + [r.get("details", {}) for r in s.get("details", {}).get("rounds", [])]
        for d in all_details:
            left = d.get("leftover_after_shutdown")
            if left:
                errs.append(f"  [{fw}] processes still alive 10s after shutdown: {left}")
            for k in ("parent_killed_leftovers", "parent_killed_orphans"):
                if d.get(k):
                    errs.append(f"  [{fw}] the parent had to kill {d[k]} cluster processes after the side ended ({k})")
            stray = d.get("memory", {}).get("not_descendants_not_counted")
            if stray:
                errs.append(f"  [{fw}] {fw} processes not descending from the driver (not counted in memory): {stray}")
        bg = s.get("bg_cpu_pct")
        if bg is not None and bg > 20:
            errs.append(
                f"  [{fw}] WARNING: machine was busy before this side started "
                f"({bg:.0f}% CPU used by other processes); timings are unreliable"
            )
        fc = s.get("foreign_cpu_pct")
        if fc is not None and fc > 15:
            errs.append(
                f"  [{fw}] WARNING: other processes used {fc:.0f}% of the machine's CPU "
                f"while this side ran; timings are unreliable"
            )
        for g, e in s.get("details", {}).get("errors_in_some_rounds", {}).items():
            errs.append(f"  [{fw}] {g} failed in some rounds (median of the others shown): {e}")
    if errs:
        print("\nerrors / warnings:", file=file)
        for e in errs:
            print(e, file=file)
    if "oxray" in sides and "ray" in sides and "skipped" not in sides["oxray"] and "skipped" not in sides["ray"]:
        print("\ngoals:", file=file)
        for g in GOALS:
            met, val = goal_status(g, sides)
            label = METRIC_BY_KEY[g[0]][1]
            if met is None:
                print(f"  [ n/a ] {label}: {g[4]} (missing data)", file=file)
            else:
                print(f"  [{'MET' if met else 'NOT'}] {label}: {g[4]}; measured {val:.3g}", file=file)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--framework", choices=FRAMEWORKS, help="run only this side (default: every side that imports)")
    ap.add_argument("--json", action="store_true", help="print results as JSON on stdout")
    ap.add_argument("--strict", action="store_true", help="exit 1 if a side was skipped or any workload failed")
    ap.add_argument("--quick", action="store_true", help="fewer repeats")
    ap.add_argument(
        "--timeout", type=float, default=None, help="hard timeout per side in s (default 1200, --quick 600)"
    )
    ap.add_argument(
        "--workload-timeout", type=float, default=None, help="soft timeout per workload in s (default 300, --quick 150)"
    )
    ap.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="timed batches of 2,000 for the throughput workloads (default 5, --quick 2)",
    )
    ap.add_argument(
        "--big-repeats", type=int, default=None, help="repeats of the 256 MiB workloads (default 7, --quick 3)"
    )
    ap.add_argument(
        "--init-repeats",
        type=int,
        default=None,
        help="extra init()/shutdown() cycles after the workloads (default 3, --quick 1)",
    )
    ap.add_argument(
        "--rounds", type=int, default=1, help="run every side N times (alternating order), report per-metric medians"
    )
    ap.add_argument(
        "--wait-idle",
        type=float,
        default=0.0,
        help="before each side, wait up to S s until other processes use <10%% CPU",
    )
    ap.add_argument("--actors", type=int, default=1000, help="actors the oxray side creates (default 1000)")
    ap.add_argument("--ray-actors", type=int, default=100, help="actors the Ray side creates (default 100)")
    ap.add_argument(
        "--settle", type=float, default=2.0, help="s to wait after warm-up before measuring idle memory (default 2)"
    )
    ap.add_argument("--python", default=sys.executable, help="interpreter for the child processes (default: this one)")
    ap.add_argument("--oxray-python", default=None, help="interpreter for the oxray side")
    ap.add_argument("--ray-python", default=None, help="interpreter for the ray side")
    ap.add_argument(
        "--from-json",
        nargs="+",
        metavar="FILE",
        help="do not run anything: print the table from saved --json outputs "
        "(e.g. one file per side, possibly from different runs)",
    )
    # internal
    ap.add_argument("--child", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    q = a.quick
    if a.timeout is None:
        a.timeout = 600.0 if q else 1200.0
    if a.workload_timeout is None:
        a.workload_timeout = 150.0 if q else 300.0
    if a.repeats is None:
        a.repeats = 2 if q else 5
    if a.big_repeats is None:
        a.big_repeats = 3 if q else 7
    if a.init_repeats is None:
        a.init_repeats = 1 if q else 3
    a.repeats = max(1, a.repeats)
    a.rounds = max(1, a.rounds)
    a.big_repeats = max(1, a.big_repeats)
    return a


def main(argv=None):  # noqa: C901 - a benchmark driver: one branch per command-line choice
    args = parse_args(argv)
    if args.child:
        if not args.out:
            print("--child needs --out", file=sys.stderr)
            return 2
        Child(args).main()
        return 0

    if args.from_json:
        sides = {}
        for path in args.from_json:
            with open(path) as f:
                sides.update(json.load(f).get("sides", {}))
        order = [fw for fw in FRAMEWORKS if fw in sides]
        if args.framework:
            order = [args.framework]
            sides = {k: v for k, v in sides.items() if k == args.framework}
        args.quick = any(s.get("quick") for s in sides.values())
        print_report(sides, order, args)
        return 0

    _become_subreaper()

    def _interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    # SIGTERM/SIGHUP (make's timeout, kill) clean up like Ctrl-C does; SIGINT
    # may be ignored when started in the background, so restore its handler.
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        try:
            signal.signal(sig, _interrupt)
        except Exception:
            pass
    order = [args.framework] if args.framework else list(FRAMEWORKS)
    sides, runnable = {}, []
    for fw in order:
        python = getattr(args, f"{fw}_python") or args.python
        ok, info = probe_import(fw, python)
        if not ok:
            sides[fw] = {"framework": fw, "skipped": f"`import {fw}` failed with {python}: {info}"}
            print(f"== {fw}: skipped ({sides[fw]['skipped']})", file=sys.stderr, flush=True)
        else:
            runnable.append((fw, python))
    per_round = {fw: [] for fw, _ in runnable}
    for rnd in range(args.rounds):
        # alternate the order each round so drift in machine load hits both sides
        seq = runnable if rnd % 2 == 0 else runnable[::-1]
        for fw, python in seq:
            if args.rounds > 1:
                print(f"== round {rnd + 1}/{args.rounds}", file=sys.stderr, flush=True)
            per_round[fw].append(run_side(fw, python, args))
    for fw, _ in runnable:
        sides[fw] = merge_rounds(per_round[fw])

    goals = []
    for g in GOALS:
        met, val = goal_status(g, sides)
        goals.append({"metric": g[0], "goal": g[4], "value": val, "met": met})
    if args.json:
        json.dump(
            {"sides": sides, "goals": goals, "order": order, "quick": args.quick}, sys.stdout, indent=1, default=str
        )
        print()
    else:
        print_report(sides, order, args)
    ran = [fw for fw in order if "skipped" not in sides[fw]]
    if args.strict:
        bad = [fw for fw in order if "skipped" in sides[fw] or sides[fw].get("errors")]
        return 1 if bad else 0
    return 0 if ran else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as e:
        print(f"core_bench: interrupted ({e or 'Ctrl-C'})", file=sys.stderr)
        sys.exit(130)
