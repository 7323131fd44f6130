"""Data feeding Train, the way step 3 of Ray's tutorials writes it:
``from_pandas(df).write_parquet(dir)``, ``read_parquet(dir).map(...)``, then a
2-worker ``TorchTrainer(datasets=...)`` whose loop iterates
``ray.train.get_dataset_shard("train").iter_torch_batches(...)``.

Each rank writes the ids it saw per epoch to a file; the test checks that the
split dataset's shares are disjoint, equal and cover the dataset every epoch,
and that an unsplit dataset reaches every rank whole.
"""

import json
import os

import numpy as np
import pandas as pd
import pytest
from data_testutil import AGAINST_RAY, ray

torch = pytest.importorskip("torch")

if AGAINST_RAY:
    import ray.train.torch  # noqa: E402, F401  (Ray wants its submodules imported; oxray has them on `ray`)

pytestmark = pytest.mark.timeout(600)

ROWS = 200
EPOCHS = 2


def make_frame(n=ROWS):
    ids = np.arange(n, dtype=np.int64)
    rng = np.random.default_rng(0)
    return pd.DataFrame({"id": ids, "feature": rng.random(n, dtype=np.float32), "label": ids % 10})


def transform(row):
    row["feature"] = row["feature"] * 2.0
    return row


def ingest_loop(config):
    """Iterate each dataset shard for EPOCHS epochs; record the ids seen per rank and epoch."""
    rank = ray.train.get_context().get_world_rank()
    train_shard = ray.train.get_dataset_shard("train")
    valid_shard = ray.train.get_dataset_shard("valid") if config.get("valid") else None
    for epoch in range(config["epochs"]):
        seen = []
        for batch in train_shard.iter_torch_batches(batch_size=16, dtypes=torch.float32):
            assert batch["feature"].dtype == torch.float32 and batch["label"].dtype == torch.float32
            seen.extend(int(v) for v in batch["id"].tolist())
        record = {"train": seen}
        if valid_shard is not None:
            record["valid"] = [int(v) for b in valid_shard.iter_batches(batch_size=32) for v in b["id"]]
        with open(os.path.join(config["log_dir"], f"rank{rank}-epoch{epoch}.json"), "w") as f:
            json.dump(record, f)
        ray.train.report({"epoch": epoch, "rows": len(seen)})


def read_logs(log_dir, epochs=EPOCHS, ranks=2):
    return {
        (rank, epoch): json.load(open(os.path.join(log_dir, f"rank{rank}-epoch{epoch}.json")))
        for rank in range(ranks)
        for epoch in range(epochs)
    }


def fit(tmp_path, datasets, resources_per_worker=None, dataset_config=None, valid=False):
    log_dir = tmp_path / "logs"
    log_dir.mkdir(exist_ok=True)
    kwargs = {} if dataset_config is None else {"dataset_config": dataset_config}
    trainer = ray.train.torch.TorchTrainer(
        ingest_loop,
        train_loop_config={"epochs": EPOCHS, "log_dir": str(log_dir), "valid": valid},
        datasets=datasets,
        scaling_config=ray.train.ScalingConfig(num_workers=2, resources_per_worker=resources_per_worker),
        run_config=ray.train.RunConfig(storage_path=str(tmp_path / "results"), name="ingest"),
        **kwargs,
    )
    result = trainer.fit()
    assert result.error is None
    return read_logs(str(log_dir))


def assert_disjoint_equal_shares(logs, total=ROWS):
    for epoch in range(EPOCHS):
        share0, share1 = logs[(0, epoch)]["train"], logs[(1, epoch)]["train"]
        assert len(share0) == len(share1) == total // 2, (epoch, len(share0), len(share1))
        assert not set(share0) & set(share1), f"epoch {epoch}: ranks saw the same rows"
        assert sorted(share0 + share1) == list(range(total)), f"epoch {epoch}: the shares do not cover the dataset"


@pytest.fixture
def tutorial_parquet(data_cluster, tmp_path):
    directory = str(tmp_path / "train-parquet")
    ray.data.from_pandas(make_frame()).write_parquet(directory)
    return directory


# Half a CPU per worker leaves the data pipeline a CPU, so this test does not depend on the
# no-starvation item; test_workers_holding_every_cpu_still_get_their_data covers that.
HALF_CPU = {"CPU": 0.5}


def test_tutorial_ingest_ranks_get_disjoint_shares_every_epoch(data_cluster, tmp_path, tutorial_parquet):
    train_ds = ray.data.read_parquet(tutorial_parquet).map(transform)
    valid_ds = ray.data.from_pandas(make_frame(50))
    logs = fit(
        tmp_path,
        {"train": train_ds, "valid": valid_ds},
        resources_per_worker=HALF_CPU,
        dataset_config=ray.train.DataConfig(datasets_to_split=["train"]),
        valid=True,
    )
    assert_disjoint_equal_shares(logs)
    for key, record in logs.items():
        assert sorted(record["valid"]) == list(range(50)), f"{key}: the unsplit dataset did not arrive whole"


def test_dataset_given_as_a_callable(data_cluster, tmp_path, tutorial_parquet):
    logs = fit(tmp_path, {"train": lambda: ray.data.read_parquet(tutorial_parquet)}, resources_per_worker=HALF_CPU)
    assert_disjoint_equal_shares(logs)


def test_shuffled_dataset_has_a_new_order_each_epoch(data_cluster, tmp_path, tutorial_parquet):
    train_ds = ray.data.read_parquet(tutorial_parquet).random_shuffle()
    logs = fit(tmp_path, {"train": train_ds}, resources_per_worker=HALF_CPU)
    assert_disjoint_equal_shares(logs)
    epoch_orders = [logs[(0, e)]["train"] + logs[(1, e)]["train"] for e in range(EPOCHS)]
    assert epoch_orders[0] != epoch_orders[1]


@pytest.mark.skipif(AGAINST_RAY, reason="Ray 2.60 hangs here: the train workers hold every CPU the pipeline needs")
def test_workers_holding_every_cpu_still_get_their_data(data_cluster, tmp_path, tutorial_parquet):
    """The seed-004 shape: 2 workers at 1 CPU each on a 2-CPU cluster, data read and mapped by Data."""
    assert ray.cluster_resources()["CPU"] == 2
    train_ds = ray.data.read_parquet(tutorial_parquet).map(transform)
    logs = fit(tmp_path, {"train": train_ds})
    assert_disjoint_equal_shares(logs)


@pytest.mark.skipif(AGAINST_RAY, reason="checks oxray's error messages")
def test_data_config_rejects_unknown_names_and_bad_values(data_cluster):
    with pytest.raises(ValueError, match="nope"):
        ray.train.torch.TorchTrainer(
            lambda: None,
            datasets={"train": ray.data.range(10)},
            dataset_config=ray.train.DataConfig(datasets_to_split=["nope"]),
            scaling_config=ray.train.ScalingConfig(num_workers=1),
        ).fit()
    with pytest.raises(TypeError, match="DataConfig"):
        ray.train.torch.TorchTrainer(lambda: None, datasets={"train": ray.data.range(10)}, dataset_config={"x": 1})
    with pytest.raises(TypeError, match="datasets_to_split"):
        ray.train.DataConfig(datasets_to_split=3)
