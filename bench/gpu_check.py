#!/usr/bin/env python3
"""`make gpu-check`: the GPU paths, on a machine with an NVIDIA GPU (not part of `make test`;
CI has no GPU). Each check runs on its own and is reported as PASS, FAIL (with why) or SKIP:

1. the GPUs as `nvidia-smi` and torch see them (CUDA and NCCL versions);
2. the embedded cluster's resources: `GPU` and `accelerator_type:<model>`, and the node's label;
3. a `num_gpus=1` task: `get_gpu_ids()` and `CUDA_VISIBLE_DEVICES` agree, and torch sees one device;
4. a task asking `accelerator_type=<model>` runs there;
5. `TorchTrainer(use_gpu=True)`: NCCL, `get_device()`, an all-reduce of a CUDA tensor;
6. `prepare_model(parallel_strategy="fsdp")`: a training step of an FSDP-wrapped model on the GPUs;
7. the dashboard's GPU metrics (`ray_node_gpus_utilization`, `ray_node_gram_used` at `/metrics`).

Prints a table (and `--json` a JSON line); exits 0 when every check passed, 1 when one failed,
3 when the machine has no NVIDIA GPU. Record the table in bench/README.md (GPUs)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

RESULTS: list = []


def check(name: str):
    def wrap(fn):
        def run(*args):
            started = time.monotonic()
            try:
                detail = fn(*args)
                RESULTS.append((name, "PASS", detail or "", time.monotonic() - started))
            except _Skip as e:
                RESULTS.append((name, "SKIP", str(e), time.monotonic() - started))
            except Exception as e:  # noqa: BLE001 - every check runs; a failure is reported with its cause
                where = traceback.extract_tb(e.__traceback__)[-1]
                detail = f"{type(e).__name__}: {e} (at {os.path.basename(where.filename)}:{where.lineno})"
                RESULTS.append((name, "FAIL", detail, time.monotonic() - started))

        return run

    return wrap


class _Skip(Exception):
    pass


def nvidia_smi() -> list:
    if shutil.which("nvidia-smi") is None:
        return []
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,name,memory.total", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


@check("GPUs seen by nvidia-smi and torch")
def gpus_seen(gpus: list) -> str:
    import torch

    if not torch.cuda.is_available():
        raise AssertionError(f"nvidia-smi lists {gpus} but torch.cuda.is_available() is False")
    nccl = ".".join(map(str, torch.cuda.nccl.version())) if hasattr(torch.cuda, "nccl") else "?"
    return (
        f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}; torch {torch.__version__}, "
        f"CUDA {torch.version.cuda}, NCCL {nccl}"
    )


@check("cluster resources: GPU and accelerator_type")
def cluster_resources(ray, count: int) -> str:
    resources = ray.cluster_resources()
    if resources.get("GPU") != count:
        raise AssertionError(f"cluster_resources()['GPU'] is {resources.get('GPU')}, expected {count}")
    types = [k for k in resources if k.startswith("accelerator_type:")]
    if not types:
        raise AssertionError(f"no accelerator_type:<model> resource in {sorted(resources)}")
    labels = ray.nodes()[0].get("Labels", {})
    label = labels.get("ray.io/accelerator-type")
    if label != types[0].split(":", 1)[1]:
        raise AssertionError(f"node label ray.io/accelerator-type is {label!r}, resource {types[0]!r}")
    return f"GPU={resources['GPU']:g}, {types[0]}, label {label}"


@check("a num_gpus=1 task: get_gpu_ids and CUDA_VISIBLE_DEVICES")
def gpu_task(ray) -> str:
    @ray.remote(num_gpus=1)
    def where():
        import torch

        return ray.get_gpu_ids(), os.environ.get("CUDA_VISIBLE_DEVICES"), torch.cuda.device_count()

    ids, visible, devices = ray.get(where.remote(), timeout=300)
    if len(ids) != 1 or visible != ",".join(str(i) for i in ids) or devices != 1:
        raise AssertionError(f"get_gpu_ids()={ids}, CUDA_VISIBLE_DEVICES={visible!r}, torch sees {devices}")
    return f"get_gpu_ids()={ids}, CUDA_VISIBLE_DEVICES={visible}"


@check("a task asking accelerator_type=<model>")
def accelerator_task(ray) -> str:
    types = [k.split(":", 1)[1] for k in ray.cluster_resources() if k.startswith("accelerator_type:")]
    if not types:
        raise _Skip("no accelerator_type resource (see the cluster resources check)")

    @ray.remote(num_gpus=1, accelerator_type=types[0])
    def name():
        import torch

        return torch.cuda.get_device_name(0)

    return f"ran on {ray.get(name.remote(), timeout=300)}"


def _report_with_checkpoint(metrics: dict) -> None:
    """`train.report` with a checkpoint: Ray Train v2's `Result.metrics` are those of the latest
    checkpointed report (a report without one never shows there)."""
    import oxray.train as train

    with tempfile.TemporaryDirectory() as directory:
        with open(os.path.join(directory, "metrics.json"), "w") as f:
            json.dump(metrics, f)
        train.report(metrics, checkpoint=train.Checkpoint.from_directory(directory))


def _nccl_loop(config):
    import torch
    import torch.distributed as dist

    from oxray.train.torch import get_device

    device = get_device()
    value = torch.ones(4, device=device)
    dist.all_reduce(value)
    _report_with_checkpoint(
        {
            "backend": dist.get_backend(),
            "device": str(device),
            "sum": float(value[0].item()),
            "world": dist.get_world_size(),
        }
    )


@check("TorchTrainer(use_gpu=True) over NCCL")
def nccl(count: int, storage: str) -> str:
    from oxray.train import RunConfig, ScalingConfig
    from oxray.train.torch import TorchTrainer

    workers = min(count, 2)
    result = TorchTrainer(
        _nccl_loop,
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=True),
        run_config=RunConfig(storage_path=storage, name="gpu-check-nccl"),
    ).fit()
    m = result.metrics
    if m["backend"] != "nccl" or not m["device"].startswith("cuda") or m["sum"] != workers:
        raise AssertionError(f"rank 0 reported {m}")
    return f"{workers} worker(s): backend {m['backend']}, device {m['device']}, all_reduce sum {m['sum']:g}"


def _fsdp_loop(config):
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import FullyShardedDataParallel

    from oxray.train.torch import get_device, prepare_model

    torch.manual_seed(0)
    model = prepare_model(
        torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1)),
        parallel_strategy="fsdp",
    )
    wrapped_by = "prepare_model"
    if dist.get_world_size() == 1 and not isinstance(model, FullyShardedDataParallel):
        # prepare_model wraps from two workers on, as Ray's does: FSDP itself over the run's
        # NCCL group, on one GPU.
        model, wrapped_by = FullyShardedDataParallel(model, device_id=get_device()), "FSDP directly"
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 64, device=get_device())
    losses = []
    for _ in range(5):
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.item()))
    _report_with_checkpoint(
        {
            "fsdp": isinstance(model, FullyShardedDataParallel),
            "wrapped_by": wrapped_by,
            "world": dist.get_world_size(),
            "first": losses[0],
            "last": losses[-1],
        }
    )


@check("prepare_model(parallel_strategy='fsdp') trains on the GPUs")
def fsdp(count: int, storage: str) -> str:
    from oxray.train import RunConfig, ScalingConfig
    from oxray.train.torch import TorchTrainer

    result = TorchTrainer(
        _fsdp_loop,
        scaling_config=ScalingConfig(num_workers=min(count, 2), use_gpu=True),
        run_config=RunConfig(storage_path=storage, name="gpu-check-fsdp"),
    ).fit()
    m = result.metrics
    if not m["fsdp"] or not m["last"] < m["first"]:
        raise AssertionError(f"rank 0 reported {m}: expected an FSDP model whose loss goes down")
    return f"{m['world']} worker(s), wrapped by {m['wrapped_by']}; loss {m['first']:.4f} -> {m['last']:.4f}"


@check("dashboard GPU metrics at /metrics")
def gpu_metrics() -> str:
    import urllib.request

    from oxray._private.head_http import endpoint

    url, headers = endpoint(None, "the GPU metrics check")
    deadline = time.monotonic() + 60
    text = ""
    while time.monotonic() < deadline:
        request = urllib.request.Request(f"{url}/metrics", headers=headers)
        with urllib.request.urlopen(request, timeout=30) as reply:
            text = reply.read().decode()
        if "ray_node_gpus_utilization" in text and "ray_node_gram_used" in text:
            lines = [
                line
                for line in text.splitlines()
                if line.startswith(("ray_node_gpus_utilization", "ray_node_gram_used"))
            ]
            return "; ".join(lines[:2])
        time.sleep(1)  # nvidia-smi is sampled every few seconds
    raise AssertionError("no ray_node_gpus_utilization / ray_node_gram_used series at /metrics within 60 s")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", action="store_true", help="also print the results as one JSON line")
    args = parser.parse_args()
    gpus = nvidia_smi()
    if not gpus:
        print("gpu-check: no NVIDIA GPU here (nvidia-smi lists none); run it on a machine with one", file=sys.stderr)
        return 3
    print(f"gpu-check on {len(gpus)} GPU(s): {gpus}", flush=True)
    gpus_seen(gpus)
    import oxray as ray

    ray.init()
    storage = tempfile.mkdtemp(prefix="gpu-check-")
    try:
        cluster_resources(ray, len(gpus))
        gpu_task(ray)
        accelerator_task(ray)
        nccl(len(gpus), storage)
        fsdp(len(gpus), storage)
        gpu_metrics()
    finally:
        ray.shutdown()
        shutil.rmtree(storage, ignore_errors=True)
    print("| check | result | detail | s |\n| --- | --- | --- | ---: |")
    for name, verdict, detail, seconds in RESULTS:
        print(f"| {name} | {verdict} | {detail.replace('|', '/')} | {seconds:.1f} |")
    if args.json:
        print(json.dumps([dict(zip(("check", "result", "detail", "seconds"), r, strict=True)) for r in RESULTS]))
    return 1 if any(verdict == "FAIL" for _, verdict, _, _ in RESULTS) else 0


if __name__ == "__main__":
    sys.exit(main())
