"""A short TorchTrainer run for a cluster: two workers train a linear model with
DistributedDataParallel (gloo, CPU), and the run says on how many nodes and
which hosts they trained. Submit it with:

    oxray job submit --address http://127.0.0.1:8265 --working-dir deploy/examples/jobs -- python train_torch.py
"""

import os
import socket

import torch
import torch.distributed as dist

import oxray as ray
from oxray import train
from oxray.train.torch import TorchTrainer


def train_func(config):
    model = train.torch.prepare_model(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(train.get_context().get_world_rank())
    x = torch.randn(256, 4, generator=generator)
    y = x.sum(dim=1, keepdim=True)
    where = (socket.gethostname(), ray.get_runtime_context().get_node_id())
    everywhere = [None] * dist.get_world_size()
    dist.all_gather_object(everywhere, where)
    hosts = sorted({host for host, _ in everywhere})
    nodes = len({node for _, node in everywhere})
    for epoch in range(config["epochs"]):
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        train.report({"epoch": epoch, "loss": loss.item()})
    if train.get_context().get_world_rank() == 0:
        print(f"training nodes: {nodes}")
        print(f"training hosts: {', '.join(hosts)}")
        print(f"final loss: {loss.item():.4f} after {config['epochs']} epochs")


# Storage every node sees: the sample cluster mounts a shared volume here (else the default, one host's disk).
SHARED = "/mnt/cluster_storage"

if __name__ == "__main__":
    ray.init()
    trainer = TorchTrainer(
        train_func,
        train_loop_config={"epochs": 5},
        scaling_config=train.ScalingConfig(num_workers=2, use_gpu=False),
        run_config=train.RunConfig(storage_path=SHARED if os.path.isdir(SHARED) else None),
    )
    result = trainer.fit()
    print(f"training finished: {result.error or 'no error'}")
