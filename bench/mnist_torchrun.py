"""The MNIST demo's training as a plain torchrun script (the baseline in
train_bench.py): same model, data, batch size, optimizer and epochs.

    torchrun --standalone --nproc_per_node 2 bench/mnist_torchrun.py --data-dir data
"""

import argparse
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from mnist_demo import Net, evaluate, mnist  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", default="data")
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    data = mnist(args.data_dir, True)
    sampler = torch.utils.data.DistributedSampler(data, shuffle=True)
    loader = torch.utils.data.DataLoader(data, batch_size=64, sampler=sampler)
    model = torch.nn.parallel.DistributedDataParallel(Net())
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    storage = tempfile.mkdtemp(prefix="mnist-torchrun-") if rank == 0 else None
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        started = time.time()
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if rank == 0:
            torch.save(
                {"model": model.module.state_dict(), "epoch": epoch}, os.path.join(storage, f"checkpoint_{epoch}.pt")
            )
            print(f"epoch {epoch}: {time.time() - started:.1f} s")
        dist.barrier()
    if rank == 0:
        test_loader = torch.utils.data.DataLoader(mnist(args.data_dir, False), batch_size=1000)
        print(f"test accuracy: {evaluate(model.module, test_loader):.2%}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
