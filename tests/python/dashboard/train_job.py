"""A small data-parallel MNIST training, submitted as a job by the dashboard's
browser tests: two workers, real MNIST (a 4,000-image slice), a report and a
checkpoint per epoch. It can pause after the first epoch until a file appears
(OXRAY_TEST_GATE), and on its first attempt rank 1 can write its pid and wait
to be killed (OXRAY_TEST_KILL_ME)."""

import os
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision import datasets, transforms

import oxray as ray
from oxray.train import Checkpoint, CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from oxray.train.torch import TorchTrainer, prepare_data_loader, prepare_model


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 5, padding=2)
        self.fc = nn.Linear(8 * 14 * 14, 10)

    def forward(self, x):
        return self.fc(F.max_pool2d(F.relu(self.conv(x)), 2).flatten(1))


def train_loop(config):
    data = datasets.MNIST(config["data_dir"], train=True, download=False, transform=transforms.ToTensor())
    subset = torch.utils.data.Subset(data, range(4000))
    loader = prepare_data_loader(torch.utils.data.DataLoader(subset, batch_size=100, shuffle=True))
    model = prepare_model(Net())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ctx = ray.train.get_context()
    start = 0
    if ray.train.get_checkpoint():
        with ray.train.get_checkpoint().as_directory() as d:
            start = torch.load(os.path.join(d, "state.pt"))["epoch"] + 1
    kill_me = config.get("kill_me")
    # Only the first attempt's rank 1 waits to be killed: the file is there for the next.
    if kill_me and not os.path.exists(kill_me) and ctx.get_world_rank() == 1:
        with open(kill_me, "w") as f:
            f.write(str(os.getpid()))
        time.sleep(600)
    for epoch in range(start, config["epochs"]):
        correct = total = 0
        loss_sum = 0.0
        for x, y in loader:
            out = model(x)
            loss = F.cross_entropy(out, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss_sum += loss.item() * len(y)
            correct += (out.argmax(1) == y).sum().item()
            total += len(y)
        with tempfile.TemporaryDirectory() as d:
            torch.save({"epoch": epoch}, os.path.join(d, "state.pt"))
            metrics = {"epoch": epoch, "loss": loss_sum / total, "accuracy": correct / total}
            ray.train.report(metrics, checkpoint=Checkpoint.from_directory(d))
        gate = config.get("gate")
        if gate and epoch == 0:
            while not os.path.exists(gate):
                time.sleep(0.05)


if __name__ == "__main__":
    ray.init()
    trainer = TorchTrainer(
        train_loop,
        train_loop_config={
            "data_dir": os.environ["OXRAY_MNIST_DIR"],
            "epochs": 3,
            "gate": os.environ.get("OXRAY_TEST_GATE"),
            "kill_me": os.environ.get("OXRAY_TEST_KILL_ME"),
        },
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(
            name=os.environ["OXRAY_TEST_RUN_NAME"],
            storage_path=os.environ["OXRAY_TEST_STORAGE"],
            checkpoint_config=CheckpointConfig(num_to_keep=2),
            failure_config=FailureConfig(max_failures=1),
        ),
    )
    result = trainer.fit()
    print("final accuracy", result.metrics["accuracy"])
