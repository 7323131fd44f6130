#!/usr/bin/env python3
"""Train benchmark: oxray vs. Ray Train (v2) vs. plain torchrun, same machine, one run.

    python bench/train_bench.py                 # all three, side by side
    python bench/train_bench.py --skip-demo     # without the MNIST wall times

Figures (2 workers, gloo, CPU):
- fit -> first step: from `trainer.fit()` (cluster already up) to the first
  optimizer step on rank 0; for torchrun, from launching `torchrun`.
- report, 100 MB checkpoint: rank 0 writes a 100 MB file, syncs it to disk, and
  reports it as a checkpoint (rank 1 reports metrics only); mean of 3. torchrun: rank 0 copies
  the directory into storage, then a barrier.
- report, metrics only: mean of 5 reports without a checkpoint. torchrun: a barrier.
- MNIST demo wall time: examples/mnist_demo.py (2 epochs, including init and the
  test-set evaluation) under oxray and Ray, and bench/mnist_torchrun.py for torchrun.
Each side runs in its own subprocess. See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CHECKPOINT_MB = 100


def loop(config):
    """The timed training loop, for oxray and Ray (imports come from config)."""
    import importlib

    import torch

    ray = importlib.import_module(config["framework"])
    train = importlib.import_module(config["framework"] + ".train")
    torch_mod = importlib.import_module(config["framework"] + ".train.torch")
    rank = train.get_context().get_world_rank()
    model = torch_mod.prepare_model(torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss = model(torch.randn(16, 32)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    first_step = time.time()
    timings = {"ckpt": [], "plain": []}
    for _ in range(3):
        with tempfile.TemporaryDirectory() as d:
            if rank == 0:
                with open(os.path.join(d, "weights.bin"), "wb") as f:
                    f.write(os.urandom(CHECKPOINT_MB * 1024 * 1024))
            os.sync()  # flush the source's dirty pages first: writeback throttling is noise here
            t = time.perf_counter()
            train.report({"loss": loss.item()}, checkpoint=train.Checkpoint.from_directory(d) if rank == 0 else None)
            timings["ckpt"].append(time.perf_counter() - t)
    for _ in range(5):
        t = time.perf_counter()
        train.report({"loss": loss.item()})
        timings["plain"].append(time.perf_counter() - t)
    if rank == 0:
        with open(config["out"], "w") as f:
            json.dump({"first_step": first_step, **timings}, f)
    del ray


def run_framework(framework: str) -> dict:
    import importlib

    ray = importlib.import_module(framework)
    train = importlib.import_module(framework + ".train")
    torch_mod = importlib.import_module(framework + ".train.torch")
    ray.init(num_cpus=2)
    storage = tempfile.mkdtemp(prefix=f"train-bench-{framework}-")
    out = os.path.join(storage, "timings.json")
    try:
        trainer = torch_mod.TorchTrainer(
            loop,
            train_loop_config={"framework": framework, "out": out},
            scaling_config=train.ScalingConfig(num_workers=2),
            run_config=train.RunConfig(storage_path=storage, name="bench"),
        )
        started = time.time()
        trainer.fit()
        with open(out) as f:
            t = json.load(f)
    finally:
        ray.shutdown()
        shutil.rmtree(storage, ignore_errors=True)
    return {
        "fit_to_first_step_s": t["first_step"] - started,
        "report_ckpt_s": sum(t["ckpt"]) / len(t["ckpt"]),
        "report_plain_s": sum(t["plain"]) / len(t["plain"]),
    }


TORCHRUN_SCRIPT = r"""
import json, os, shutil, sys, tempfile, time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loss = model(torch.randn(16, 32)).pow(2).mean(); opt.zero_grad(); loss.backward(); opt.step()
first_step = time.time()
storage, out = sys.argv[1], sys.argv[2]
ckpt, plain = [], []
for i in range(3):
    with tempfile.TemporaryDirectory() as d:
        if rank == 0:
            with open(os.path.join(d, "weights.bin"), "wb") as f:
                f.write(os.urandom(CHECKPOINT_MB * 1024 * 1024))
        os.sync()
        t = time.perf_counter()
        if rank == 0:
            shutil.copytree(d, os.path.join(storage, f"checkpoint_{i}"))
        dist.barrier()
        ckpt.append(time.perf_counter() - t)
for _ in range(5):
    t = time.perf_counter(); dist.barrier(); plain.append(time.perf_counter() - t)
if rank == 0:
    json.dump({"first_step": first_step, "ckpt": ckpt, "plain": plain}, open(out, "w"))
dist.destroy_process_group()
"""


def run_torchrun() -> dict:
    storage = tempfile.mkdtemp(prefix="train-bench-torchrun-")
    script = os.path.join(storage, "loop.py")
    with open(script, "w") as f:
        f.write(f"CHECKPOINT_MB = {CHECKPOINT_MB}\n" + TORCHRUN_SCRIPT)
    out = os.path.join(storage, "timings.json")
    started = time.time()
    subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", script, storage, out],
        check=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    with open(out) as f:
        t = json.load(f)
    shutil.rmtree(storage, ignore_errors=True)
    return {
        "fit_to_first_step_s": t["first_step"] - started,
        "report_ckpt_s": sum(t["ckpt"]) / len(t["ckpt"]),
        "report_plain_s": sum(t["plain"]) / len(t["plain"]),
    }


def demo_wall_time(framework: str, data_dir: str) -> dict:
    storage = tempfile.mkdtemp(prefix=f"train-bench-demo-{framework}-")
    if framework == "torchrun":
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            os.path.join(HERE, "mnist_torchrun.py"),
            "--data-dir",
            data_dir,
        ]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
    else:
        with open(os.path.join(ROOT, "examples", "mnist_demo.py")) as f:
            source = f.read()
        if framework == "ray":
            source = source.replace("import oxray as ray", "import ray").replace("from oxray.", "from ray.")
        script = os.path.join(storage, "demo.py")
        with open(script, "w") as f:
            f.write(source)
        cmd = [sys.executable, script, "--data-dir", data_dir, "--storage-path", storage]
        env = dict(os.environ)
    started = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.time() - started
    shutil.rmtree(storage, ignore_errors=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{framework} demo failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    accuracy = re.search(r"test accuracy: ([\d.]+)%", proc.stdout)
    return {"demo_wall_s": wall, "demo_accuracy": float(accuracy.group(1)) / 100 if accuracy else None}


def side(framework: str, skip_demo: bool, data_dir: str) -> dict:
    cmd = [sys.executable, __file__, "--side", framework, "--data-dir", data_dir] + (
        ["--skip-demo"] if skip_demo else []
    )
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        return {"error": (proc.stderr or proc.stdout)[-3000:]}
    return json.loads(lines[-1][len("RESULT ") :])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--side", choices=["oxray", "ray", "torchrun"])
    parser.add_argument("--skip-demo", action="store_true")
    parser.add_argument("--data-dir", default=os.path.join(ROOT, "data"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    data_dir = os.path.abspath(args.data_dir)
    if args.side:
        result = run_torchrun() if args.side == "torchrun" else run_framework(args.side)
        if not args.skip_demo:
            result.update(demo_wall_time(args.side, data_dir))
        print("RESULT " + json.dumps(result))
        return
    results = {fw: side(fw, args.skip_demo, data_dir) for fw in ("oxray", "ray", "torchrun")}
    if args.json:
        print(json.dumps(results, indent=2))
        return
    rows = [
        ("fit() -> first training step", "fit_to_first_step_s", "s"),
        (f"report() with a {CHECKPOINT_MB} MB checkpoint", "report_ckpt_s", "s"),
        ("report() metrics only", "report_plain_s", "s"),
        ("MNIST demo wall time (2 epochs)", "demo_wall_s", "s"),
        ("MNIST demo test accuracy", "demo_accuracy", ""),
    ]
    for fw, r in results.items():
        if "error" in r:
            print(f"{fw}: FAILED\n{r['error']}\n")
    print(f"| {'':40} | {'oxray':>9} | {'Ray 2.60':>9} | {'torchrun':>9} | {'Ray/oxray':>9} | {'oxray/torchrun':>14} |")
    print(f"| {'-' * 40} | {'-' * 8}: | {'-' * 8}: | {'-' * 8}: | {'-' * 8}: | {'-' * 13}: |")

    def fmt(v):
        return "n/a" if v is None else f"{v:.3f}"

    for label, key, _unit in rows:
        ox, ray_v, tr = (results[fw].get(key) for fw in ("oxray", "ray", "torchrun"))
        ratio = f"{ray_v / ox:.2f}x" if ox and ray_v and key != "demo_accuracy" else ""
        vs_tr = f"{ox / tr:.2f}x" if ox and tr and key != "demo_accuracy" else ""
        print(f"| {label:40} | {fmt(ox):>9} | {fmt(ray_v):>9} | {fmt(tr):>9} | {ratio:>9} | {vs_tr:>14} |")


if __name__ == "__main__":
    main()
