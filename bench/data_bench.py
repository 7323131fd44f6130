#!/usr/bin/env python3
"""Data benchmark: oxray.data vs. Ray Data 2.60, same pipelines, same files, one run.

    python bench/data_bench.py                        # pyarrow reference, oxray, Ray, side by side
    python bench/data_bench.py --rows 400000          # a quick, smaller run
    python bench/data_bench.py --framework ray        # one side only (still in a subprocess)
    python bench/data_bench.py --framework oxray --json

The data: --rows (default 4 M) rows of 16 float32 features (f0..f15) and an int64 `label`,
in 8 snappy parquet files, generated once and cached under --data-dir. The reference is
pyarrow reading the same files on one thread. Each framework runs in its own subprocesses
(one for the throughput and first-batch figures, a fresh one for the memory figure) and is
imported as ``ray`` (``import oxray as ray`` / ``import ray``); from then on only the Ray
Data API is used. See bench/README.md ("Data benchmark") for what each figure means.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from core_bench import (  # noqa: E402
    _become_subreaper,
    _child_env,
    _kill_recorded,
    _kill_tree,
    _reap_orphans,
    background_cpu,
)

FRAMEWORKS = ("oxray", "ray")
N_FILES = 8
FEATURES = [f"f{i}" for i in range(16)]
ROW_BYTES = 4 * len(FEATURES) + 8  # in memory (Arrow / numpy), per row
MIB = 1024 * 1024
API_USED = ("read_parquet",)  # module-level names of <fw>.data the children call
BATCH = 4096  # iter_batches batch size
TORCH_BATCH = 256  # iter_torch_batches batch size
MEM_FILE_ROWS = 500_000  # rows per file of the memory test's data (36 MB in memory)
# uniform [0, 1): mean 0.5, standard deviation sqrt(1/12)
FEATURE_MEAN, FEATURE_STD = 0.5, math.sqrt(1 / 12)

# (key, label, unit, better, goal for oxray or None)
METRICS = [
    ("iter_batches_rows_s", f"read_parquet -> iter_batches({BATCH}, numpy), epoch 2", "M rows/s", "higher", 10e6),
    (
        "map_torch_rows_s",
        f"map_batches(numpy UDF) -> iter_torch_batches({TORCH_BATCH}), epoch 2",
        "M rows/s",
        "higher",
        1.2e6,
    ),
    ("ttfb_cold_s", "first batch, cold: init + read_parquet + next()", "s", "lower", 0.3),
    ("ttfb_warm_s", "first batch, warm: 2nd read_parquet + next()", "s", "lower", 0.3),
    ("ttfb_cold_with_import_s", "first batch, cold, including the imports (info)", "s", "lower", None),
    ("iter_batches_epoch1_rows_s", "read_parquet -> iter_batches, epoch 1 (info)", "M rows/s", "higher", None),
    ("map_torch_epoch1_rows_s", "map_batches -> iter_torch_batches, epoch 1 (info)", "M rows/s", "higher", None),
    ("mem_peak_mib", "peak cluster memory streaming 10x the store", "MiB", "lower", "budget+200"),
    ("mem_growth_mib", "  of which growth while streaming (info)", "MiB", "lower", None),
    ("mem_idle_mib", "  cluster memory after init, before (info)", "MiB", "lower", None),
    ("mem_peak_rss_mib", "  peak, summed RSS (double counts shared; info)", "MiB", "lower", None),
    ("mem_rows_s", "  rows/s while streaming it (info)", "M rows/s", "higher", None),
    ("mem_spilled_mib", "  spilled to disk meanwhile (Ray's raylet log; info)", "MiB", "lower", None),
]


def _log(who, msg):
    print(f"[{time.strftime('%H:%M:%S')}] {who}: {msg}", file=sys.stderr, flush=True)


# ==========================================================================
# The data: generated once, cached; complete only once its manifest exists.
# ==========================================================================


def _write_parquet_file(path, rows, seed, row_group_rows):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    cols = {c: rng.random(rows, dtype=np.float32) for c in FEATURES}
    cols["label"] = rng.integers(0, 10, rows, dtype=np.int64)
    tmp = f"{path}.tmp-{os.getpid()}"
    pq.write_table(pa.table(cols), tmp, compression="snappy", row_group_size=row_group_rows)
    os.replace(tmp, path)


def ensure_data(data_dir, rows, row_group_rows):
    """The 8 files of the main data set: {"paths", "rows", "bytes", "disk_bytes"}."""
    d = os.path.join(data_dir, f"rows{rows}-files{N_FILES}-rg{row_group_rows}")
    manifest = d + ".json"  # outside the directory, which holds only the parquet files
    if os.path.exists(manifest):
        with open(manifest) as f:
            m = json.load(f)
        if all(os.path.exists(p) for p in m["paths"]) and "label_sum" in m:
            return m
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    os.makedirs(d, exist_ok=True)
    _log("data", f"generating {rows:,} rows in {N_FILES} parquet files under {d}")
    paths = []
    for i in range(N_FILES):
        n = rows // N_FILES + (1 if i < rows % N_FILES else 0)
        p = os.path.join(d, f"part-{i:02d}.parquet")
        _write_parquet_file(p, n, seed=i, row_group_rows=row_group_rows)
        paths.append(p)
    label_sum = sum(pc.sum(pq.read_table(p, columns=["label"]).column("label")).as_py() for p in paths)
    m = {
        "dir": d,
        "paths": paths,
        "rows": rows,
        "bytes": rows * ROW_BYTES,
        "disk_bytes": sum(os.path.getsize(p) for p in paths),
        "row_group_rows": row_group_rows,
        "label_sum": label_sum,  # the passes check it: every row, once
    }
    with open(manifest + ".tmp", "w") as f:
        json.dump(m, f)
    os.replace(manifest + ".tmp", manifest)
    return m


def ensure_mem_data(data_dir, stream_bytes, row_group_rows):
    """Enough files for the memory test to stream `stream_bytes` (in memory): one file of
    MEM_FILE_ROWS rows, hard-linked as many times as needed (the page cache holds it once)."""
    d = os.path.join(data_dir, f"mem-rows{MEM_FILE_ROWS}-rg{row_group_rows}")
    os.makedirs(d, exist_ok=True)
    base = os.path.join(d, "base.parquet")
    if not os.path.exists(base):
        _log("data", f"generating the memory test's file ({MEM_FILE_ROWS:,} rows) under {d}")
        _write_parquet_file(base, MEM_FILE_ROWS, seed=1000, row_group_rows=row_group_rows)
    copies = max(1, math.ceil(stream_bytes / (MEM_FILE_ROWS * ROW_BYTES)))
    links = os.path.join(d, f"x{copies}")  # a directory with exactly `copies` files
    os.makedirs(links, exist_ok=True)
    paths = []
    for k in range(copies):
        p = os.path.join(links, f"copy-{k:04d}.parquet")
        if not os.path.exists(p):
            try:
                os.link(base, p)
            except OSError:
                os.symlink(base, p)
        paths.append(p)
    return {"dir": links, "paths": paths, "rows": copies * MEM_FILE_ROWS, "bytes": copies * MEM_FILE_ROWS * ROW_BYTES}


# ==========================================================================
# Child processes.
# ==========================================================================


def normalise(batch):
    """The map_batches UDF: standardise every feature column (numpy in, numpy out)."""
    out = dict(batch)
    for c in FEATURES:
        out[c] = (batch[c] - FEATURE_MEAN) / FEATURE_STD
    return out


class Results:
    """Results of one child, written to its --out file after every step (a crash keeps the rest)."""

    def __init__(self, path, **fields):
        self.path = path
        self.doc = {"metrics": {}, "details": {}, "errors": {}, **fields}
        self.flush()

    def flush(self):
        with open(self.path + ".tmp", "w") as f:
            json.dump(self.doc, f, indent=1, default=str)
        os.replace(self.path + ".tmp", self.path)

    def step(self, name, fn):
        _log(self.doc.get("framework", "child"), f"{name} ...")
        t = time.perf_counter()
        try:
            metrics, details = fn()
            self.doc["metrics"].update(metrics)
            self.doc["details"][name] = details
            _log(self.doc.get("framework", "child"), f"{name}: {metrics} ({time.perf_counter() - t:.1f} s)")
        except BaseException as e:  # noqa: BLE001 - recorded, then SystemExit/KeyboardInterrupt re-raised
            self.doc["errors"][name] = f"{type(e).__name__}: {e}\n{traceback.format_exc()[-4000:]}"
            _log(self.doc.get("framework", "child"), f"{name} FAILED: {type(e).__name__}: {e}")
            if not isinstance(e, Exception):
                self.flush()
                raise
        self.flush()


def _set_pdeathsig():
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:
        pass

    def _term(signum, frame):
        raise SystemExit(f"signal {signum}")

    signal.signal(signal.SIGTERM, _term)


def _cluster_pids():
    import psutil

    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            out.append((p.pid, p.create_time()))
        except Exception:
            pass
    return out


def _init_kwargs(fw, **extra):
    kw = {"num_cpus": 2, **extra}
    if fw == "ray":
        kw["include_dashboard"] = False
    return kw


def _count(it, key="label"):
    n = 0
    for batch in it:
        n += len(batch[key])
    return n


def _count_and_sum(it):
    """Rows and the sum of `label` over the batches (numpy)."""
    n, total = 0, 0
    for batch in it:
        labels = batch["label"]
        n += len(labels)
        total += int(labels.sum())
    return n, total


def _first_batch(data, paths, rows):
    """read_parquet, then the first batch of iter_batches; returns (read_s, first_s, batch)."""
    t0 = time.perf_counter()
    ds = data.read_parquet(paths)
    t1 = time.perf_counter()
    it = iter(ds.iter_batches(batch_size=BATCH, batch_format="numpy"))
    batch = next(it)
    t2 = time.perf_counter()
    if set(batch) != set(FEATURES + ["label"]) or len(batch["label"]) != min(BATCH, rows):
        raise AssertionError(f"unexpected first batch: columns {sorted(batch)}, {len(batch['label'])} rows")
    if batch["f0"].dtype.name != "float32" or batch["label"].dtype.name != "int64":
        raise AssertionError(f"first batch dtypes: f0 {batch['f0'].dtype}, label {batch['label'].dtype}")
    close = getattr(it, "close", None)
    if close is not None:
        close()  # stop the execution that feeds it before the next measurement
    return t1 - t0, t2 - t1, len(batch["label"])


def child_main(args):
    """Throughput and first-batch figures, in a fresh process."""
    fw = args.child
    res = Results(args.out, framework=fw, python=sys.executable, pid=os.getpid())
    with open(args.manifest) as f:
        data_m = json.load(f)
    # the directory, as the tutorials pass it (a list of 8 paths lists them on threads in Ray 2.60)
    paths, rows = data_m["dir"], data_m["rows"]
    t_import = time.perf_counter()
    ray = importlib.import_module(fw)
    try:
        data = importlib.import_module(fw + ".data")
    except Exception as e:
        raise ImportError(f"`import {fw}.data` failed ({type(e).__name__}: {e}): {fw} has no Data API here") from e
    import_s = time.perf_counter() - t_import
    res.doc["version"] = getattr(ray, "__version__", "?")
    res.doc["metrics"]["import_s"] = import_s
    state = {}

    def cold():
        t0 = time.perf_counter()
        ray.init(**_init_kwargs(fw))
        init_s = time.perf_counter() - t0
        state["initialized"] = True
        res.doc["cluster"] = _cluster_pids()
        res.flush()
        read_s, first_s, n = _first_batch(data, paths, rows)
        total = init_s + read_s + first_s
        return (
            {"ttfb_cold_s": total, "ttfb_cold_with_import_s": import_s + total},
            {"import_s": import_s, "init_s": init_s, "read_parquet_s": read_s, "first_batch_s": first_s, "rows": n},
        )

    def warm():
        samples = [_first_batch(data, paths, rows) for _ in range(3)]
        totals = [r + f for r, f, _ in samples]
        return (
            {"ttfb_warm_s": totals[0]},
            {
                "read_parquet_s": [s[0] for s in samples],
                "first_batch_s": [s[1] for s in samples],
                "total_s": totals,
                "median_of_3_s": statistics.median(totals),
            },
        )

    def iter_batches():
        ds = data.read_parquet(paths)
        epochs = []
        for _ in range(2):
            t = time.perf_counter()
            n, label_sum = _count_and_sum(ds.iter_batches(batch_size=BATCH, batch_format="numpy"))
            epochs.append(time.perf_counter() - t)
            if (n, label_sum) != (rows, data_m["label_sum"]):
                raise AssertionError(
                    f"iter_batches gave {n} rows with label sum {label_sum}, expected {rows} and {data_m['label_sum']}"
                )
        state["iter_stats"] = _stats(ds)
        return (
            {"iter_batches_rows_s": rows / epochs[1], "iter_batches_epoch1_rows_s": rows / epochs[0]},
            {"epoch_s": epochs, "stats": state["iter_stats"]},
        )

    def map_torch():
        import torch

        ds = data.read_parquet(paths).map_batches(normalise, batch_format="numpy")
        epochs = []
        for _ in range(2):
            t = time.perf_counter()
            n = 0
            for batch in ds.iter_torch_batches(batch_size=TORCH_BATCH):
                n += len(batch["label"])
            epochs.append(time.perf_counter() - t)
            if n != rows:
                raise AssertionError(f"iter_torch_batches gave {n} rows, expected {rows}")
        if not isinstance(batch["f0"], torch.Tensor) or batch["f0"].dtype != torch.float32:
            raise AssertionError(f"f0 is {type(batch['f0'])} {getattr(batch['f0'], 'dtype', '')}, not float32 tensor")
        if not isinstance(batch["label"], torch.Tensor):
            raise AssertionError(f"label is {type(batch['label'])}, not a tensor")
        return (
            {"map_torch_rows_s": rows / epochs[1], "map_torch_epoch1_rows_s": rows / epochs[0]},
            {"epoch_s": epochs, "stats": _stats(ds)},
        )

    try:
        res.step("cold", cold)
        if state.get("initialized"):  # the rest needs only a cluster
            res.step("warm", warm)
            res.step("iter_batches", iter_batches)
            res.step("map_torch", map_torch)
    finally:
        t = time.perf_counter()
        ray.shutdown()
        res.doc["metrics"]["shutdown_s"] = time.perf_counter() - t
        res.flush()


def _stats(ds):
    try:
        return str(ds.stats())[-6000:]
    except Exception as e:
        return f"stats() failed: {type(e).__name__}: {e}"


class MemorySampler(threading.Thread):
    """Every `interval` s, sums the memory of this process and all its descendants.

    PSS (proportional set size) splits each shared page among the processes that map it, so the
    object store's shared memory and shared libraries count once in the sum; USS and RSS are
    kept too. Basis: PSS where /proc/<pid>/smaps_rollup is readable, else USS, else RSS."""

    def __init__(self, interval=0.1):
        super().__init__(daemon=True)
        import psutil

        self.psutil = psutil
        self.me = psutil.Process()
        self.interval = interval
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.bases = set()
        self.peak = None  # (pss_sum, sample)
        self.peak_rss = 0
        self.samples = 0
        self.shm_peak = 0

    def sample(self):
        procs = [self.me]
        try:
            procs += self.me.children(recursive=True)
        except self.psutil.Error:
            pass
        total, rss_total, uss_total, rows, bases = 0, 0, 0, [], set()
        for p in procs:
            try:
                rss = p.memory_info().rss
                try:
                    full = p.memory_full_info()
                    pss, uss = getattr(full, "pss", None), full.uss
                except (self.psutil.AccessDenied, AttributeError):
                    pss, uss = None, None
                value = pss if pss is not None else (uss if uss is not None else rss)
                bases.add("pss" if pss is not None else ("uss" if uss is not None else "rss"))
                total += value
                rss_total += rss
                uss_total += uss or 0
                rows.append({"pid": p.pid, "cmd": _cmd(p), "pss": pss, "uss": uss, "rss": rss})
            except self.psutil.Error:
                continue  # exited between listing and reading
        try:
            import shutil

            shm = shutil.disk_usage("/dev/shm").used
        except OSError:
            shm = 0
        return total, rss_total, uss_total, rows, "+".join(sorted(bases)), shm

    def current(self):
        return self.sample()[0]

    def run(self):
        while not self.stop_event.is_set():
            total, rss_total, uss_total, rows, basis, shm = self.sample()
            with self.lock:
                self.samples += 1
                self.bases.update(basis.split("+"))
                self.peak_rss = max(self.peak_rss, rss_total)
                self.shm_peak = max(self.shm_peak, shm)
                if self.peak is None or total > self.peak[0]:
                    self.peak = (total, {"pss_or_fallback": total, "uss": uss_total, "rss": rss_total, "procs": rows})
            self.stop_event.wait(self.interval)

    def stop(self):
        self.stop_event.set()
        self.join(timeout=10)


def _cmd(p):
    try:
        cmd = " ".join(p.cmdline())[:120]
        return cmd or p.name()
    except Exception:
        return "?"


def child_memory(args):
    """Peak memory of the whole cluster while streaming 10x the object store, in a fresh process."""
    import shutil

    fw = args.child
    res = Results(args.out, framework=fw, python=sys.executable, pid=os.getpid())
    with open(args.manifest) as f:
        m = json.load(f)
    paths, rows = m["dir"], m["rows"]
    ray = importlib.import_module(fw)
    data = importlib.import_module(fw + ".data")
    store = args.store_mb * MIB
    res.doc["store_bytes"] = store
    res.doc["stream_bytes"] = m["bytes"]
    res.doc["version"] = getattr(ray, "__version__", "?")
    shm_before = shutil.disk_usage("/dev/shm").used
    ray.init(**_init_kwargs(fw, object_store_memory=store))
    res.doc["cluster"] = _cluster_pids()
    res.flush()

    def stream():
        sampler = MemorySampler()
        time.sleep(args.settle)  # let the cluster's processes finish starting
        idle = sampler.current()
        sampler.start()
        try:
            ds = data.read_parquet(paths)
            t = time.perf_counter()
            n = _count(ds.iter_batches(batch_size=BATCH, batch_format="numpy"))
            wall = time.perf_counter() - t
        finally:
            sampler.stop()
        if n != rows:
            raise AssertionError(f"streamed {n} rows, expected {rows}")
        peak, peak_sample = sampler.peak
        details = {
            "basis": "+".join(sorted(sampler.bases)),
            "samples": sampler.samples,
            "store_bytes": store,
            "stream_bytes": m["bytes"],
            "files": len(m["paths"]),
            "wall_s": wall,
            "idle_bytes": idle,
            "peak_bytes": peak,
            "peak_rss_sum_bytes": sampler.peak_rss,
            "dev_shm_used_before_init_bytes": shm_before,
            "dev_shm_used_peak_bytes": sampler.shm_peak,
            "peak_sample": peak_sample,
            "stats": _stats(ds),
        }
        metrics = {}
        if fw == "ray":
            details["ray_spill"] = _ray_spill_summary(ray)
            if "spilled_mib" in details["ray_spill"]:
                metrics["mem_spilled_mib"] = details["ray_spill"]["spilled_mib"]
        return (
            {
                "mem_peak_mib": peak / MIB,
                "mem_idle_mib": idle / MIB,
                "mem_growth_mib": (peak - idle) / MIB,
                "mem_peak_rss_mib": sampler.peak_rss / MIB,
                "mem_rows_s": rows / wall,
                "mem_store_mib": store / MIB,
                "mem_stream_mib": m["bytes"] / MIB,
                **metrics,
            },
            details,
        )

    try:
        res.step("memory", stream)
    finally:
        ray.shutdown()
        res.flush()


def _ray_spill_summary(ray):
    """Ray only: what its raylet logged as spilled to disk (its cumulative "Spilled N MiB" line)."""
    import glob
    import re

    try:
        session = ray._private.worker._global_node.get_session_dir_path()
        spilled_mib, line = 0.0, None
        for path in glob.glob(os.path.join(session, "logs", "raylet*.out")):
            with open(path, errors="replace") as f:
                for ln in f:
                    found = re.search(r"Spilled (\d+) MiB", ln)
                    if found and float(found.group(1)) >= spilled_mib:
                        spilled_mib, line = float(found.group(1)), ln.strip()[-200:]
        return {"spilled_mib": spilled_mib, "line": line, "session": session}
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}


def child_reference(args):
    """pyarrow on one thread over the same files: read_table, and iter_batches -> numpy."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    res = Results(args.out, framework="pyarrow", version=pa.__version__)
    with open(args.manifest) as f:
        m = json.load(f)
    paths, rows = m["paths"], m["rows"]

    def read_table():
        times = []
        for _ in range(3):
            t = time.perf_counter()
            n = sum(pq.read_table(p, use_threads=False).num_rows for p in paths)
            times.append(time.perf_counter() - t)
            assert n == rows, (n, rows)
        return {"ref_read_table_rows_s": rows / min(times[1:])}, {"pass_s": times}

    def iter_numpy():
        times = []
        for _ in range(3):
            t = time.perf_counter()
            n = 0
            for p in paths:
                for b in pq.ParquetFile(p).iter_batches(batch_size=BATCH, use_threads=False):
                    batch = {name: b.column(i).to_numpy() for i, name in enumerate(b.schema.names)}
                    n += len(batch["label"])
            times.append(time.perf_counter() - t)
            assert n == rows, (n, rows)
        return {"ref_iter_numpy_rows_s": rows / min(times[1:])}, {"pass_s": times}

    res.step("read_table", read_table)
    res.step("iter_numpy", iter_numpy)


# ==========================================================================
# Parent: runs the children, one at a time, and prints the table.
# ==========================================================================


def probe_data_import(fw, python, timeout=300):
    code = (
        f"import {fw}, {fw}.data\n"
        f"missing = [n for n in {API_USED!r} if not hasattr({fw}.data, n)]\n"
        f"assert not missing, f'{fw}.data has no {{missing}} (no Data API in this build: {{{fw}.data}})'\n"
        f"print(getattr({fw}, '__version__', '?'))"
    )
    try:
        r = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=timeout, env=_child_env())
    except subprocess.TimeoutExpired:
        return False, f"`import {fw}.data` timed out after {timeout} s"
    if r.returncode != 0:
        lines = [ln for ln in (r.stderr or "").strip().splitlines() if ln.strip()]
        return False, f"`import {fw}.data` failed with {python}: " + (lines[-1] if lines else f"exit {r.returncode}")
    return True, r.stdout.strip()


def run_child(kind, who, python, args, manifest, timeout):
    """Runs one child (new session, log file), kills what it leaves behind; returns its results."""
    import psutil

    fd, out = tempfile.mkstemp(prefix=f"data_bench_{who}_{kind}_", suffix=".json")
    os.close(fd)
    log_path = out[:-5] + ".log"
    cmd = [python, os.path.abspath(__file__), "--child", who, "--child-kind", kind]
    cmd += ["--out", out, "--manifest", manifest, "--store-mb", str(args.store_mb), "--settle", str(args.settle)]
    if args.wait_idle > 0:
        deadline, quiet = time.time() + args.wait_idle, 0
        while time.time() < deadline and quiet < 3:
            busy = background_cpu()
            quiet = quiet + 1 if busy is not None and busy < 10 else 0
        if quiet < 3:
            _log(who, f"the machine did not go idle within {args.wait_idle:.0f} s; running anyway")
    _log(who, f"{kind} child starting (log: {log_path}), load average {os.getloadavg()[0]:.2f}")
    loadavg = os.getloadavg()[0]
    t0 = time.time()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=log, env=_child_env(), start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = None
        except BaseException:
            _kill_tree(proc, _recorded(out), psutil)
            raise
    doc = {"metrics": {}, "errors": {}, "details": {}}
    try:
        with open(out) as f:
            doc = json.load(f)
    except Exception:
        pass
    if rc is None:
        killed = _kill_tree(proc, _recorded(out), psutil)
        doc["errors"]["timeout"] = f"{kind} child ran past {timeout} s; killed it and {killed} processes"
    else:
        killed = _kill_recorded(_recorded(out), psutil, grace=10)
        if killed:
            doc["leaked_processes_killed"] = killed
        if rc != 0:
            with open(log_path) as f:
                tail = f.read()[-3000:]
            doc["errors"].setdefault("exit", f"{kind} child exited with {rc}; log tail:\n{tail}")
    _reap_orphans(2)
    doc["wall_s"] = time.time() - t0
    doc["loadavg_1min_at_start"] = loadavg
    doc["log"] = log_path
    try:
        os.unlink(out)
    except OSError:
        pass
    return doc


def merge_rounds(sides):
    """One side from its rounds: each metric is the median over the rounds that produced it."""
    if len(sides) == 1:
        return sides[0]
    merged = dict(sides[-1])
    values = {}
    for side in sides:
        for key, v in side.get("metrics", {}).items():
            values.setdefault(key, []).append(v)
    merged["metrics"] = {key: statistics.median(v) for key, v in values.items()}
    merged["rounds"] = [{"metrics": s.get("metrics"), "errors": s.get("errors")} for s in sides]
    merged["wall_s"] = sum(s.get("wall_s", 0) for s in sides)
    return merged


def _recorded(out):
    try:
        with open(out) as f:
            return [tuple(x) for x in json.load(f).get("cluster", [])]
    except Exception:
        return []


def _fmt(key, v):
    if v is None:
        return "-"
    unit = next((m[2] for m in METRICS if m[0] == key), "")
    if unit == "M rows/s":
        return f"{v / 1e6:.3f}"
    if unit == "s":
        return f"{v:.3f}"
    return f"{v:.0f}"


def goal_met(key, goal, sides, store_mib):
    v = sides.get("oxray", {}).get("metrics", {}).get(key)
    if goal is None or v is None:
        return ""
    if goal == "budget+200":
        return f"<= {store_mib + 200:.0f}: " + ("met" if v <= store_mib + 200 else "NOT met")
    better = next(m[3] for m in METRICS if m[0] == key)
    ok = v >= goal if better == "higher" else v <= goal
    shown = f"{goal / 1e6:g} M rows/s" if better == "higher" else f"{goal:g} s"
    return f"{'>=' if better == 'higher' else '<='} {shown}: " + ("met" if ok else "NOT met")


def print_report(result, file=sys.stdout):
    sides, ref = result["sides"], result.get("reference", {})
    data = result["data"]
    p = lambda *a: print(*a, file=file)  # noqa: E731
    p("oxray data benchmark")
    p(
        f"  data: {data['rows']:,} rows x (16 float32 + int64 label) = {data['bytes'] / 1e6:.0f} MB in memory, "
        f"{N_FILES} snappy parquet files ({data['disk_bytes'] / 1e6:.0f} MB on disk, row groups of "
        f"{data['row_group_rows']:,} rows)"
    )
    store_mib = result["store_mb"]
    if result["mem_stream_bytes"]:
        p(
            f"  memory test: object store {store_mib} MiB, streams {result['mem_stream_bytes'] / MIB:,.0f} MiB "
            f"({result['mem_stream_bytes'] / (store_mib * MIB):.1f}x the store)"
        )
    for fw, s in sides.items():
        if "skipped" in s:
            p(f"  {fw}: SKIPPED: {s['skipped']}")
        else:
            basis = s.get("memory", {}).get("details", {}).get("memory", {}).get("basis")
            loads = [s.get("loadavg_1min_at_start"), s.get("memory", {}).get("loadavg_1min_at_start")]
            p(
                f"  {fw}: version {s.get('version') or s.get('memory', {}).get('version', '?')}, "
                f"wall time {s.get('wall_s', 0) + s.get('memory', {}).get('wall_s', 0):.0f} s, "
                f"{len(s.get('rounds', [])) or 1} round(s), "
                f"memory basis {basis or '-'}, load average at the children's start "
                + " / ".join("-" if x is None else f"{x:.2f}" for x in loads)
            )
    p(f"  started {result['started']}, load average before {result['loadavg_before']}")
    p("")
    if ref:
        rm = ref.get("metrics", {})
        p(
            "reference, pyarrow on one thread: "
            f"read_table {_fmt('iter_batches_rows_s', rm.get('ref_read_table_rows_s'))} M rows/s, "
            f"iter_batches({BATCH}) -> numpy {_fmt('iter_batches_rows_s', rm.get('ref_iter_numpy_rows_s'))} M rows/s"
        )
        p("")
    order = [fw for fw in ("ray", "oxray") if fw in sides]
    head = f"| {'metric':58} | {'unit':8} | " + " | ".join(f"{fw:>8}" for fw in order)
    head += f" | {'oxray/ray':>9} | {'better':6} | goal (oxray)"
    p(head)
    p("|" + "|".join("-" * (len(c) + 2) for c in head.strip("| ").split(" | ")) + "|")
    for key, label, unit, better, goal in METRICS:
        vals = [sides[fw].get("metrics", {}).get(key) for fw in order]
        ox = sides.get("oxray", {}).get("metrics", {}).get(key)
        ry = sides.get("ray", {}).get("metrics", {}).get(key)
        ratio = f"{ox / ry:.2f}" if ox is not None and ry else ""
        cells = " | ".join(f"{_fmt(key, v):>8}" for v in vals)
        p(f"| {label:58} | {unit:8} | {cells} | {ratio:>9} | {better:6} | {goal_met(key, goal, sides, store_mib)}")
    p("")
    for fw, s in sides.items():
        for name, err in s.get("errors", {}).items():
            p(f"{fw} {name} FAILED: {err.strip()}")
        for name, err in s.get("memory", {}).get("errors", {}).items():
            p(f"{fw} memory/{name} FAILED: {err.strip()}")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--framework", choices=(*FRAMEWORKS, "both"), default="both")
    ap.add_argument("--rows", type=int, default=4_000_000, help="rows in the 8 files (default 4,000,000)")
    ap.add_argument("--row-group-rows", type=int, default=131_072, help="rows per parquet row group")
    ap.add_argument(
        "--data-dir",
        default=os.path.join(tempfile.gettempdir(), "oxray-data-bench"),
        help="where the generated files are cached (default: $TMPDIR/oxray-data-bench)",
    )
    ap.add_argument("--store-mb", type=int, default=200, help="object store of the memory test, MiB (default 200)")
    ap.add_argument("--stream-factor", type=float, default=10.0, help="memory test streams this many x the store")
    ap.add_argument("--skip-memory", action="store_true", help="skip the memory test")
    ap.add_argument("--skip-main", action="store_true", help="skip the throughput and first-batch figures")
    ap.add_argument("--skip-reference", action="store_true", help="skip the pyarrow reference")
    ap.add_argument("--settle", type=float, default=2.0, help="s after init before reading idle memory (default 2)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="hard limit per child process in s")
    ap.add_argument("--rounds", type=int, default=1, help="run each side N times, alternating; report medians")
    ap.add_argument(
        "--wait-idle",
        type=float,
        default=0.0,
        help="before each child, wait up to S s until other processes use <10%% CPU",
    )
    ap.add_argument("--python", default=sys.executable, help="interpreter for the child processes")
    ap.add_argument("--json", action="store_true", help="print the results as JSON instead of the table")
    ap.add_argument(
        "--from-json",
        nargs="+",
        metavar="FILE",
        help="run nothing: print the table from saved --json outputs (e.g. a stored Ray run and a new oxray run)",
    )
    # internal
    ap.add_argument("--child", choices=(*FRAMEWORKS, "pyarrow"), help=argparse.SUPPRESS)
    ap.add_argument("--child-kind", choices=("main", "memory", "reference"), help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--manifest", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.rounds < 1:
        ap.error(f"--rounds must be at least 1, got {a.rounds}")
    if a.rows < N_FILES:
        ap.error(f"--rows must be at least {N_FILES}, got {a.rows}")
    if a.store_mb < 75 and a.framework in ("ray", "both"):
        ap.error(f"--store-mb {a.store_mb}: Ray needs an object store of at least 75 MiB")
    return a


def main(argv=None):  # noqa: C901 - a benchmark driver: one branch per command-line choice
    args = parse_args(argv)
    if args.child:
        _set_pdeathsig()
        {"main": child_main, "memory": child_memory, "reference": child_reference}[args.child_kind](args)
        return 0

    if args.from_json:
        merged = None
        for path in args.from_json:
            with open(path) as f:
                doc = json.load(f)
            if merged is None:
                merged = doc
            else:
                merged["sides"].update({fw: v for fw, v in doc["sides"].items() if "skipped" not in v})
                merged.setdefault("reference", doc.get("reference"))
        print_report(merged)
        return 0

    _become_subreaper()

    def _interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _interrupt)
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    loadavg = " ".join(f"{x:.2f}" for x in os.getloadavg())
    data_dir = os.path.abspath(args.data_dir)
    data = ensure_data(data_dir, args.rows, args.row_group_rows)
    mem = {"bytes": 0}
    if not args.skip_memory:
        mem = ensure_mem_data(data_dir, args.stream_factor * args.store_mb * MIB, args.row_group_rows)
    work = tempfile.mkdtemp(prefix="data_bench_")
    manifest, mem_manifest = os.path.join(work, "data.json"), os.path.join(work, "mem.json")
    with open(manifest, "w") as f:
        json.dump(data, f)
    with open(mem_manifest, "w") as f:
        json.dump(mem, f)

    result = {
        "started": started,
        "loadavg_before": loadavg,
        "data": data,
        "store_mb": args.store_mb,
        "mem_stream_bytes": mem["bytes"],
        "sides": {},
    }
    if not args.skip_reference:
        result["reference"] = run_child("reference", "pyarrow", args.python, args, manifest, args.timeout)
    order = list(FRAMEWORKS) if args.framework == "both" else [args.framework]
    runnable = []
    for fw in order:
        ok, info = probe_data_import(fw, args.python)
        if ok:
            runnable.append(fw)
        else:
            result["sides"][fw] = {"framework": fw, "skipped": info}
            _log(fw, f"SKIPPED: {info}")
    rounds = {fw: [] for fw in runnable}
    for rnd in range(args.rounds):
        for fw in runnable if rnd % 2 == 0 else runnable[::-1]:  # alternate, so drift hits both sides
            side = {"metrics": {}, "errors": {}}
            if not args.skip_main:
                side = run_child("main", fw, args.python, args, manifest, args.timeout)
            if not args.skip_memory:
                side["memory"] = run_child("memory", fw, args.python, args, mem_manifest, args.timeout)
                side["metrics"].update(side["memory"].get("metrics", {}))
            rounds[fw].append(side)
    for fw, sides in rounds.items():
        result["sides"][fw] = merge_rounds(sides)
    result["ratios_oxray_over_ray"] = {
        key: result["sides"]["oxray"]["metrics"][key] / result["sides"]["ray"]["metrics"][key]
        for key, *_ in METRICS
        if all(result["sides"].get(fw, {}).get("metrics", {}).get(key) for fw in FRAMEWORKS)
    }
    if args.json:
        json.dump(result, sys.stdout, indent=1, default=str)
        print()
    else:
        print_report(result)
    ran = [fw for fw in order if "skipped" not in result["sides"][fw]]
    return 0 if ran else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as e:
        print(f"data_bench: interrupted ({e or 'Ctrl-C'})", file=sys.stderr)
        sys.exit(130)
