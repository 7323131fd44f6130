"""Ray 2.60's Train + Tune guide example (doc/source/train/doc_code/train_tune_interop.py), unchanged but
for `import oxray as ray` and worker counts that fit this 2-CPU machine (2 for the direct call, [1, 2] for
the sweep, where Ray's guide has 4 and [2, 4])."""

import random
import tempfile
import uuid

import oxray as ray
import oxray.train
import oxray.train.torch
import oxray.tune
from oxray.tune.integration.ray_train import TuneReportCallback


def train_fn_per_worker(train_loop_config: dict):
    lr = train_loop_config["lr"]  # noqa: F841  (the guide unpacks it for its training code)
    print(ray.train.get_context().get_world_size(), ray.train.get_context().get_world_rank(), train_loop_config)
    with tempfile.TemporaryDirectory() as temp_checkpoint_dir:
        ray.train.report(
            {"loss": random.random()},
            checkpoint=ray.train.Checkpoint.from_directory(temp_checkpoint_dir),
        )


def train_driver_fn(config: dict):
    num_workers = config["num_workers"]
    trainer = ray.train.torch.TorchTrainer(
        train_fn_per_worker,
        train_loop_config=config["train_loop_config"],
        scaling_config=ray.train.ScalingConfig(num_workers=num_workers),
        run_config=ray.train.RunConfig(
            name=f"train-trial_id={ray.tune.get_context().get_trial_id()}",
            callbacks=[TuneReportCallback()],
        ),
    )
    trainer.fit()


train_driver_fn({"num_workers": 2, "train_loop_config": {"lr": 1e-3}})

tuner = ray.tune.Tuner(
    train_driver_fn,
    param_space={
        "num_workers": ray.tune.choice([1, 2]),
        "train_loop_config": {
            "lr": ray.tune.grid_search([1e-3, 3e-4]),
            "batch_size": ray.tune.grid_search([32, 64]),
        },
    },
    run_config=ray.tune.RunConfig(name=f"tune_train_example-{uuid.uuid4().hex[:6]}"),
    tune_config=ray.tune.TuneConfig(max_concurrent_trials=2),
)
results = tuner.fit()

print(results.get_best_result(metric="loss", mode="min"))
