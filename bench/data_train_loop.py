#!/usr/bin/env python3
"""The tutorial loop, ingest compared: the same small ResNet trained on the same image-like data,
fed by a torch DataLoader, by Ray Data 2.60, and by oxray.data.

    python bench/data_train_loop.py                      # dataloader, oxray, ray, side by side
    python bench/data_train_loop.py --rows 4000          # quick
    python bench/data_train_loop.py --ingest ray --json

The data: --rows CIFAR-shaped images (3x32x32 uint8, stored as 3,072 raw bytes in a `binary`
column `image`) with an int64 `label`, in 8 snappy parquet files, generated once under --data-dir.
Every side decodes the bytes into normalised float32 (the tutorials' `transform`), trains the same
model with the same batch size, optimizer and torch threads, and reports rows/s of the last epoch.
Each side runs in its own subprocess. See bench/README.md ("Data: the tutorial loop").
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from core_bench import _become_subreaper, _child_env, _kill_tree, _reap_orphans  # noqa: E402

INGESTS = ("dataloader", "oxray", "ray")
N_FILES = 8
SHAPE = (3, 32, 32)
IMAGE_BYTES = 3 * 32 * 32
MEAN, STD = 127.5, 64.0


def _log(who, msg):
    print(f"[{time.strftime('%H:%M:%S')}] {who}: {msg}", file=sys.stderr, flush=True)


def ensure_data(data_dir, rows):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = os.path.join(data_dir, f"images{rows}-files{N_FILES}")
    done = d + ".json"
    if os.path.exists(done):
        return d
    os.makedirs(d, exist_ok=True)
    _log("data", f"generating {rows:,} images in {N_FILES} parquet files under {d}")
    for i in range(N_FILES):
        n = rows // N_FILES + (1 if i < rows % N_FILES else 0)
        rng = np.random.default_rng(i)
        pixels = rng.integers(0, 256, (n, IMAGE_BYTES), dtype=np.uint8)
        images = pa.array([row.tobytes() for row in pixels], type=pa.binary())
        labels = pa.array(rng.integers(0, 10, n, dtype=np.int64))
        path = os.path.join(d, f"part-{i:02d}.parquet")
        pq.write_table(pa.table({"image": images, "label": labels}), path + ".tmp", compression="snappy")
        os.replace(path + ".tmp", path)
    with open(done, "w") as f:
        json.dump({"rows": rows}, f)
    return d


def decode(batch):
    """The tutorial's transform, for a numpy batch: raw bytes -> normalised float32 NCHW."""
    import numpy as np

    raw = np.frombuffer(b"".join(bytes(b) for b in batch["image"]), dtype=np.uint8)
    images = ((raw.reshape(-1, *SHAPE).astype(np.float32) - MEAN) / STD).astype(np.float32)
    return {"image": images, "label": np.asarray(batch["label"], dtype=np.int64)}


def make_model():
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.skip = (
                nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                if stride != 1 or cin != cout
                else nn.Identity()
            )

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(self.bn2(self.conv2(y)) + self.skip(x))

    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, 1, 1, bias=False),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        Block(16, 16, 1),
        Block(16, 32, 2),
        Block(32, 64, 2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    )


class _ImageDataset:
    """Map-style dataset for the DataLoader: the files loaded once, one image decoded per item."""

    def __init__(self, paths):
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.concat_tables([pq.read_table(p) for p in paths])
        self.images = table.column("image").to_pylist()
        self.labels = table.column("label").to_numpy()

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        import numpy as np
        import torch

        raw = np.frombuffer(self.images[i], dtype=np.uint8).reshape(SHAPE)
        return torch.from_numpy((raw.astype(np.float32) - MEAN) / STD), int(self.labels[i])


def train(batches_per_epoch, model, epochs, batch_size, rows):
    """Runs the loop over `batches_per_epoch()` (a fresh iterable of (x, y) per epoch)."""
    import torch

    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    out = {"epoch_s": [], "wait_s": [], "rows": []}
    first_step = None
    t_start = time.perf_counter()
    for _ in range(epochs):
        t0 = time.perf_counter()
        wait, n = 0.0, 0
        it = iter(batches_per_epoch())
        while True:
            tw = time.perf_counter()
            try:
                x, y = next(it)
            except StopIteration:
                break
            wait += time.perf_counter() - tw
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            n += len(y)
            if first_step is None:
                first_step = time.perf_counter() - t_start
        out["epoch_s"].append(time.perf_counter() - t0)
        out["wait_s"].append(wait)
        out["rows"].append(n)
        if n != rows:
            raise AssertionError(f"epoch gave {n} rows, expected {rows}")
    out["first_step_s"] = first_step
    out["loss"] = float(loss)
    return out


def run_side(ingest, args):
    import torch

    torch.set_num_threads(args.torch_threads)
    d = args.data_path
    paths = sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".parquet"))
    model = make_model()
    result = {"ingest": ingest}
    if ingest == "dataloader":
        from torch.utils.data import DataLoader

        t = time.perf_counter()
        dataset = _ImageDataset(paths)
        result["load_s"] = time.perf_counter() - t
        loader = DataLoader(
            dataset,
            batch_size=args.batch_size,
            shuffle=True,
            num_workers=args.loader_workers,
            persistent_workers=args.loader_workers > 0,
        )
        result.update(train(lambda: loader, model, args.epochs, args.batch_size, args.rows))
        return result
    ray = importlib.import_module(ingest)
    data = importlib.import_module(ingest + ".data")
    kw = {"num_cpus": 2, **({"include_dashboard": False} if ingest == "ray" else {})}
    t = time.perf_counter()
    ray.init(**kw)
    result["init_s"] = time.perf_counter() - t
    try:
        ds = data.read_parquet(d).map_batches(decode, batch_format="numpy")
        if args.trainer:
            result.update(run_in_trainer(ingest, ds, args))
        else:

            def epoch():
                for batch in ds.iter_torch_batches(batch_size=args.batch_size):
                    yield batch["image"], batch["label"]

            result.update(train(epoch, model, args.epochs, args.batch_size, args.rows))
    finally:
        ray.shutdown()
    return result


def trainer_loop(config):
    """The loop inside a 1-worker TorchTrainer, fed by get_dataset_shard("train")."""
    import torch

    torch.set_num_threads(config["torch_threads"])
    train_mod = importlib.import_module(config["framework"] + ".train")
    shard = train_mod.get_dataset_shard("train")

    def epoch():
        for batch in shard.iter_torch_batches(batch_size=config["batch_size"]):
            yield batch["image"], batch["label"]

    out = train(epoch, make_model(), config["epochs"], config["batch_size"], config["rows"])
    with open(config["out"], "w") as f:
        json.dump(out, f)


def run_in_trainer(fw, ds, args):
    import shutil

    train_mod = importlib.import_module(fw + ".train")
    torch_mod = importlib.import_module(fw + ".train.torch")
    storage = tempfile.mkdtemp(prefix=f"data-train-loop-{fw}-")
    out = os.path.join(storage, "result.json")
    config = {"framework": fw, "out": out, "rows": args.rows, "epochs": args.epochs}
    config.update(batch_size=args.batch_size, torch_threads=args.torch_threads)
    try:
        t = time.perf_counter()
        torch_mod.TorchTrainer(
            trainer_loop,
            train_loop_config=config,
            datasets={"train": ds},
            scaling_config=train_mod.ScalingConfig(num_workers=1),
            run_config=train_mod.RunConfig(storage_path=storage, name="loop"),
        ).fit()
        fit_s = time.perf_counter() - t
        with open(out) as f:
            return {**json.load(f), "fit_s": fit_s}
    finally:
        shutil.rmtree(storage, ignore_errors=True)


def run_child(ingest, args, data_path):
    import psutil

    cmd = [args.python, os.path.abspath(__file__), "--child", ingest, "--data-path", data_path]
    cmd += ["--rows", str(args.rows), "--epochs", str(args.epochs), "--batch-size", str(args.batch_size)]
    cmd += ["--torch-threads", str(args.torch_threads), "--loader-workers", str(args.loader_workers)]
    cmd += ["--trainer"] if args.trainer else []
    fd, log_path = tempfile.mkstemp(prefix=f"data_train_loop_{ingest}_", suffix=".log")
    os.close(fd)
    _log(ingest, f"starting (log: {log_path})")
    t0 = time.time()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, env=_child_env(), start_new_session=True)
        try:
            stdout, _ = proc.communicate(timeout=args.timeout)
        except BaseException as e:
            _kill_tree(proc, [], psutil)
            if not isinstance(e, subprocess.TimeoutExpired):
                raise
            return {"error": f"ran past {args.timeout} s, killed", "log": log_path}
    _reap_orphans(2)
    lines = [ln for ln in stdout.decode().splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        with open(log_path) as f:
            return {"error": f"exit {proc.returncode}: {f.read()[-3000:]}", "log": log_path}
    r = json.loads(lines[-1][len("RESULT ") :])
    r["wall_s"] = time.time() - t0
    r["log"] = log_path
    return r


def probe(ingest, python):
    if ingest == "dataloader":
        return True, ""
    code = f"import {ingest}.data as d; assert hasattr(d, 'read_parquet'), '{ingest}.data has no read_parquet'"
    r = subprocess.run([python, "-c", code], capture_output=True, text=True, env=_child_env(), timeout=300)
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    return r.returncode == 0, (lines[-1] if lines else "")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ingest", choices=(*INGESTS, "all"), default="all")
    ap.add_argument("--rows", type=int, default=20_000, help="images (default 20,000)")
    ap.add_argument("--epochs", type=int, default=2, help="epochs; rows/s is of the last (default 2)")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--torch-threads", type=int, default=1, help="torch.set_num_threads in the loop (default 1)")
    ap.add_argument("--loader-workers", type=int, default=1, help="DataLoader num_workers (default 1)")
    ap.add_argument(
        "--trainer",
        action="store_true",
        help="oxray/ray: run the loop in a 1-worker TorchTrainer fed by get_dataset_shard (as the tutorials do)",
    )
    ap.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(), "oxray-data-bench"))
    ap.add_argument("--timeout", type=float, default=1800.0, help="hard limit per side in s")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", choices=INGESTS, help=argparse.SUPPRESS)
    ap.add_argument("--data-path", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
        except Exception:
            pass
        try:
            print("RESULT " + json.dumps(run_side(args.child, args)), flush=True)
        except Exception:
            traceback.print_exc()
            return 1
        return 0
    _become_subreaper()
    data_path = ensure_data(os.path.abspath(args.data_dir), args.rows)
    results = {}
    for ingest in INGESTS if args.ingest == "all" else (args.ingest,):
        ok, why = probe(ingest, args.python)
        results[ingest] = run_child(ingest, args, data_path) if ok else {"skipped": why}
        if not ok:
            _log(ingest, f"SKIPPED: {why}")
    for r in results.values():
        if "epoch_s" in r:
            r["rows_s"] = r["rows"][-1] / r["epoch_s"][-1]
            r["wait_fraction"] = r["wait_s"][-1] / r["epoch_s"][-1]
    if args.json:
        json.dump(results, sys.stdout, indent=1)
        print()
        return 0
    print(
        f"tutorial loop: {args.rows:,} images 3x32x32, small ResNet, batch {args.batch_size}, "
        f"{args.epochs} epochs, torch threads {args.torch_threads}, DataLoader workers {args.loader_workers}, "
        + ("oxray/ray in a 1-worker TorchTrainer" if args.trainer else "oxray/ray in the driver")
    )
    print(
        f"| {'ingest':10} | {'rows/s, last epoch':>18} | {'waiting for data':>16} | "
        f"{'first step (s)':>14} | vs DataLoader |"
    )
    print(f"|{'-' * 12}|{'-' * 19}:|{'-' * 17}:|{'-' * 15}:|{'-' * 14}:|")
    base = results.get("dataloader", {}).get("rows_s")
    for ingest, r in results.items():
        if "rows_s" not in r:
            print(f"| {ingest:10} | {r.get('skipped') or r.get('error', '')[:200]}")
            continue
        vs = f"{r['rows_s'] / base:.2f}" if base else ""
        print(
            f"| {ingest:10} | {r['rows_s']:18.0f} | {100 * r['wait_fraction']:15.1f}% | "
            f"{r['first_step_s']:14.2f} | {vs:>13} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
