#!/usr/bin/env python3
"""All-to-all benchmark: `sort` and `groupby(...).sum()` on oxray.data and Ray Data 2.60, and the
cost of writable `map_batches` batches, side by side in one run.

    python bench/data_shuffle_bench.py                     # 4 M rows x 17 columns, both frameworks
    python bench/data_shuffle_bench.py --rows 400000       # a quick run
    python bench/data_shuffle_bench.py --framework oxray

The data: --rows rows of 16 float32 columns (f0..f15) and an int64 `key` (`--groups` distinct
values for groupby), in 8 parquet files cached under --data-dir. Each case runs in a fresh
subprocess per framework (imported as ``ray``), on a 2-CPU cluster whose object store is
--store-mb, or a quarter of the dataset's bytes with --spill (the dataset is 4x the store, so
the shuffle must spill). Figures: rows/s over the whole pipeline (read, shuffle, consume with
iter_batches), and the peak memory (PSS) of every process of the run. See bench/README.md.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data_bench import MemorySampler  # noqa: E402

FRAMEWORKS = ("oxray", "ray")
FEATURES = [f"f{i}" for i in range(16)]
N_FILES = 8
MIB = 1024 * 1024
CASES = ("sort", "groupby_sum", "map_batches_copy", "map_batches_zero_copy")
MAP_BATCH = 4096


def ensure_data(data_dir: str, rows: int, groups: int) -> dict:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory = os.path.join(data_dir, f"shuffle-{rows}-{groups}")
    manifest = os.path.join(directory, "manifest.json")
    if os.path.exists(manifest):
        with open(manifest) as f:
            return json.load(f)
    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(0)
    per = -(-rows // N_FILES)
    total = 0
    for i in range(N_FILES):
        n = min(per, rows - i * per)
        cols = {f: rng.random(n, dtype=np.float32) for f in FEATURES}
        cols["key"] = rng.integers(0, groups, n, dtype=np.int64)
        table = pa.table(cols)
        total += table.nbytes
        pq.write_table(table, os.path.join(directory, f"part-{i}.parquet"), row_group_size=131_072)
    info = {"dir": directory, "rows": rows, "bytes": total, "groups": groups}
    with open(manifest, "w") as f:
        json.dump(info, f)
    return info


def double_in_place(batch):
    batch["f0"] *= 2
    return batch


def double_copy(batch):
    return {"f0": batch["f0"] * 2, "key": batch["key"]}


def child(args) -> dict:
    with open(args.manifest) as f:
        m = json.load(f)
    ray = importlib.import_module(args.child)
    importlib.import_module(args.child + ".data")
    kwargs = {"num_cpus": 2, "object_store_memory": args.store_bytes}
    if args.child == "ray":
        kwargs["include_dashboard"] = False
    ray.init(**kwargs)
    case = args.case[0]
    try:
        sampler = MemorySampler()
        time.sleep(1.0)
        sampler.start()
        t0 = time.perf_counter()
        ds = ray.data.read_parquet(m["dir"])
        rows = 0
        if case == "sort":
            last = None
            for batch in ds.sort("key").iter_batches(batch_size=65_536, batch_format="numpy"):
                keys = batch["key"]
                if len(keys) and ((last is not None and keys[0] < last) or (keys[1:] < keys[:-1]).any()):
                    raise AssertionError("sort: keys out of order")
                last = keys[-1] if len(keys) else last
                rows += len(keys)
            expected = m["rows"]
        elif case == "groupby_sum":
            for batch in ds.groupby("key").sum("f0").iter_batches(batch_size=65_536, batch_format="numpy"):
                rows += len(batch["key"])
            expected = m["groups"]
        else:
            # Writable batches (zero_copy_batch=False, the UDF mutates in place) against read-only views
            # (zero_copy_batch=True, the UDF makes new arrays); both with a batch size, as Ray copies
            # only then.
            fn = double_in_place if case == "map_batches_copy" else double_copy
            zero_copy = case == "map_batches_zero_copy"
            mapped = ds.map_batches(fn, zero_copy_batch=zero_copy, batch_size=MAP_BATCH)
            for batch in mapped.iter_batches(batch_size=65_536, batch_format="numpy"):
                rows += len(batch["f0"])
            expected = m["rows"]
        wall = time.perf_counter() - t0
        sampler.stop()
        if rows != expected:
            raise AssertionError(f"{case}: {rows} rows out, expected {expected}")
        peak, _ = sampler.peak
        return {"rows_s": m["rows"] / wall, "wall_s": wall, "peak_mib": peak / MIB, "store_mib": args.store_bytes / MIB}
    finally:
        ray.shutdown()


def run(args) -> dict:
    info = ensure_data(args.data_dir, args.rows, args.groups)
    store = max(80 * MIB, info["bytes"] // 4) if args.spill else args.store_mb * MIB  # Ray needs >= 75 MiB
    manifest = os.path.join(info["dir"], "manifest.json")
    out: dict = {"rows": info["rows"], "dataset_mib": info["bytes"] / MIB, "store_mib": store / MIB, "cases": {}}
    for case in args.cases:
        for fw in args.frameworks:
            cmd = [sys.executable, __file__, "--child", fw, "--case", case, "--manifest", manifest]
            cmd += ["--store-bytes", str(store)]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
                line = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
                result = json.loads(line) if line.startswith("{") else {"error": proc.stderr[-800:]}
            except subprocess.TimeoutExpired:
                result = {"error": f"timed out after {args.timeout}s"}
            out["cases"].setdefault(case, {})[fw] = result
            print(f"{case:24s} {fw:6s} {json.dumps(result)[:300]}", file=sys.stderr, flush=True)
    return out


def report(out: dict) -> None:
    print(f"\n{out['rows']:,} rows, {out['dataset_mib']:.0f} MiB in memory, object store {out['store_mib']:.0f} MiB")
    print(f"{'case':24s} {'oxray rows/s':>14s} {'Ray rows/s':>12s} {'ratio':>7s} {'oxray peak':>11s} {'Ray peak':>9s}")
    for case, sides in out["cases"].items():
        ox, ry = sides.get("oxray", {}), sides.get("ray", {})

        def cell(side, key, fmt):
            return format(side[key], fmt) if key in side else ("error" if "error" in side else "-")

        ratio = f"{ox['rows_s'] / ry['rows_s']:.2f}x" if "rows_s" in ox and "rows_s" in ry else "-"
        print(
            f"{case:24s} {cell(ox, 'rows_s', ',.0f'):>14s} {cell(ry, 'rows_s', ',.0f'):>12s} {ratio:>7s} "
            f"{cell(ox, 'peak_mib', '.0f'):>10s}M {cell(ry, 'peak_mib', '.0f'):>8s}M"
        )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--framework", choices=(*FRAMEWORKS, "both"), default="both")
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--groups", type=int, default=1000, help="distinct keys for groupby (default 1000)")
    ap.add_argument("--store-mb", type=int, default=1024, help="object store, MiB (default 1024)")
    ap.add_argument("--spill", action="store_true", help="object store a quarter of the dataset")
    ap.add_argument("--case", action="append", choices=CASES, help="cases to run (default all)")
    ap.add_argument("--data-dir", default=os.path.join(os.path.expanduser("~"), ".cache", "oxray-bench"))
    ap.add_argument("--timeout", type=float, default=1200.0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    ap.add_argument("--manifest", help=argparse.SUPPRESS)
    ap.add_argument("--store-bytes", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args)), flush=True)
        return
    args.frameworks = FRAMEWORKS if args.framework == "both" else (args.framework,)
    args.cases = args.case or CASES
    out = run(args)
    print(json.dumps(out, indent=1)) if args.json else report(out)


if __name__ == "__main__":
    main()
