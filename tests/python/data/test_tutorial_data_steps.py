"""Every code path of the tutorials' Data steps, on small generated images.

Seed 004 (ResNet on MNIST): ``from_pandas`` of a frame whose ``image`` column holds
28x28 nested lists, ``write_parquet``, ``read_parquet``, then ``ds.map`` with a function
that turns each row's image into a PIL image and through torchvision's
``Compose([ToTensor(), Normalize(...)])``: the row's ``image`` becomes a ``torch.Tensor``.
A 2-worker ``TorchTrainer(datasets={"train": ...})`` (1 CPU each, on 2 CPUs) iterates
``get_dataset_shard("train").iter_torch_batches(batch_size=..., dtypes={...}, device=...)``
and rank 0 reports a checkpoint.

Seed 001, step 3 (ViT on CIFAR-10): ``read_parquet`` of ``train`` and ``test`` folders
whose ``image`` column is a 32x32x3 uint8 tensor column (as Ray writes them), ``schema()``,
``ds.map`` with ``ToTensor`` + ``Normalize`` on the numpy image, ``TorchTrainer`` with
``datasets={"train": ..., "valid": ...}``, ``iter_torch_batches(batch_size=...)`` without
dtypes, a torchvision ``VisionTransformer`` under ``prepare_model``, and every rank
reporting a checkpoint of ``model.module.state_dict()``.
"""

import json
import os
import tempfile

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from data_testutil import AGAINST_RAY, ray

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
from PIL import Image  # noqa: E402  (torchvision brings pillow)
from torchvision.transforms import Compose, Normalize, ToTensor  # noqa: E402

if AGAINST_RAY:
    import ray.train.torch  # noqa: E402, F401

pytestmark = pytest.mark.timeout(600)

MNIST_ROWS = 96
CIFAR_ROWS = 64


def mnist_like(n=MNIST_ROWS, seed=0):
    """Digits as torchvision's MNIST holds them: uint8 28x28 images and int64 labels."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8), rng.integers(0, 10, size=n, dtype=np.int64)


# ---- seed 004 ----


def transform_images(row: dict):
    transform = Compose([ToTensor(), Normalize((0.5,), (0.5,))])
    image_arr = np.array(row["image"], dtype=np.uint8)
    row["image"] = transform(Image.fromarray(image_arr))
    return row


def build_model():
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(4 * 26 * 26, 10)
    )


def save_checkpoint_and_report_metrics(model, metrics):
    checkpoint = None
    if ray.train.get_context().get_world_rank() == 0:
        with tempfile.TemporaryDirectory() as temp_checkpoint_dir:
            torch.save(model.module.state_dict(), os.path.join(temp_checkpoint_dir, "model.pt"))
            checkpoint = ray.train.Checkpoint.from_directory(temp_checkpoint_dir)
            ray.train.report(metrics, checkpoint=checkpoint)
            return
    ray.train.report(metrics, checkpoint=checkpoint)


def mnist_loop(config):
    model = ray.train.torch.prepare_model(build_model())
    criterion = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    dataset_shard = ray.train.get_dataset_shard("train")
    world_size = ray.train.get_context().get_world_size()
    per_worker_batch_size = config["batch_size"] // world_size
    for epoch in range(config["epochs"]):
        dataloader = dataset_shard.iter_torch_batches(
            batch_size=per_worker_batch_size,
            dtypes={"image": torch.float32, "label": torch.long},
            device=ray.train.torch.get_device(),
        )
        rows, shapes = 0, set()
        for batch in dataloader:
            inputs, labels = batch["image"], batch["label"]
            assert inputs.dtype == torch.float32 and labels.dtype == torch.long
            assert float(inputs.min()) >= -1.0 and float(inputs.max()) <= 1.0, "Normalize((0.5,), (0.5,)) was lost"
            shapes.add(tuple(inputs.shape[1:]))
            rows += len(labels)
            loss = criterion(model(inputs), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        metrics = {"loss": loss.item(), "epoch": epoch, "rows": rows, "shapes": sorted(shapes)}
        save_checkpoint_and_report_metrics(model, metrics)


@pytest.fixture
def mnist_parquet(data_cluster, tmp_path):
    images, labels = mnist_like()
    df = pd.DataFrame({"image": images.tolist(), "label": labels})
    path = str(tmp_path / "raw_data")
    ray.data.from_pandas(df).write_parquet(path)
    return path, images, labels


def test_seed_004_map_puts_a_torch_tensor_in_the_row(mnist_parquet):
    path, images, labels = mnist_parquet
    ds = ray.data.read_parquet(path).map(transform_images)
    rows = sorted(ds.take_all(), key=lambda r: (int(r["label"]), float(np.asarray(r["image"]).sum())))
    assert len(rows) == MNIST_ROWS
    expected = sorted(
        ((int(lab), (img.astype(np.float32) / 255 - 0.5) / 0.5) for img, lab in zip(images, labels, strict=True)),
        key=lambda p: (p[0], float(p[1].sum())),
    )
    for row, (label, image) in zip(rows, expected, strict=True):
        assert np.asarray(row["image"]).shape == (1, 28, 28)
        assert int(row["label"]) == label
        np.testing.assert_allclose(np.asarray(row["image"])[0], image, atol=1e-6)


def test_seed_004_trains_two_workers_on_the_mapped_tensors(mnist_parquet, tmp_path):
    path, _, _ = mnist_parquet
    train_ds = ray.data.read_parquet(path).map(transform_images)
    trainer = ray.train.torch.TorchTrainer(
        train_loop_per_worker=mnist_loop,
        train_loop_config={"lr": 1e-3, "batch_size": 32, "epochs": 2},
        scaling_config=ray.train.ScalingConfig(num_workers=2, use_gpu=False, resources_per_worker={"CPU": 1}),
        run_config=ray.train.RunConfig(name="mnist_ray_train_demo", storage_path=str(tmp_path / "storage")),
        datasets={"train": train_ds},
    )
    result = trainer.fit()
    assert result.error is None
    assert result.metrics["epoch"] == 1
    # Rank 0's share of each epoch: half the rows, as 1x28x28 images.
    assert result.metrics["rows"] == MNIST_ROWS // 2
    assert [tuple(s) for s in result.metrics["shapes"]] == [(1, 28, 28)]
    with result.checkpoint.as_directory() as ckpt:
        state = torch.load(os.path.join(ckpt, "model.pt"))
    model = build_model()
    model.load_state_dict(state)
    assert model(torch.zeros(2, 1, 28, 28)).shape == (2, 10)


# ---- seed 001, step 3 ----


def transform_cifar(row: dict) -> dict:
    transform = Compose([ToTensor(), Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))])
    row["image"] = transform(row["image"])
    return row


def write_cifar_like(directory, n, seed, ray_layout: bool):
    """A parquet folder like Ray's cifar10-parquet: `image` (32x32x3 uint8 tensors), `label`.
    `ray_layout` writes the tensor column with Ray's own extension type metadata, as a
    dataset written by Ray has it; otherwise Arrow's canonical fixed-shape tensor."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, size=n, dtype=np.int64)
    flat = pa.array(images.reshape(-1))
    if ray_layout:
        storage = pa.LargeListArray.from_arrays(pa.array(np.arange(0, n * 3072 + 1, 3072, dtype=np.int64)), flat)
        field = pa.field(
            "image",
            storage.type,
            metadata={
                b"ARROW:extension:name": b"ray.data.arrow_tensor_v2",
                b"ARROW:extension:metadata": json.dumps([32, 32, 3]).encode(),
            },
        )
        table = pa.Table.from_arrays(
            [storage, pa.array(labels)], schema=pa.schema([field, pa.field("label", pa.int64())])
        )
    else:
        tensor_type = pa.fixed_shape_tensor(pa.uint8(), [32, 32, 3])
        image = pa.ExtensionArray.from_storage(tensor_type, pa.FixedSizeListArray.from_arrays(flat, 3072))
        table = pa.table({"image": image, "label": labels})
    os.makedirs(directory)
    pq.write_table(table, os.path.join(directory, "part-0.parquet"))
    return images, labels


def cifar_loop(config):
    model = torchvision.models.VisionTransformer(
        image_size=32, patch_size=8, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32, num_classes=10
    )
    model = ray.train.torch.prepare_model(model)
    loss_fn = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.AdamW(model.parameters(), lr=config["lr"], weight_decay=1e-2)
    train_dataloader = ray.train.get_dataset_shard("train").iter_torch_batches(batch_size=config["batch_size"])
    valid_dataloader = ray.train.get_dataset_shard("valid").iter_torch_batches(batch_size=config["batch_size"])
    for _epoch in range(config["epochs"]):
        model.train()
        seen = 0
        for batch in train_dataloader:
            X, y = batch["image"], batch["label"]
            assert X.dtype == torch.float32 and X.shape[1:] == (3, 32, 32) and y.dtype == torch.int64
            loss = loss_fn(model(X), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            seen += len(y)
        model.eval()
        valid_loss, num_correct, num_total, num_batches = 0, 0, 0, 0
        with torch.no_grad():
            for batch in valid_dataloader:
                X, y = batch["image"], batch["label"]
                pred = model(X)
                valid_loss += loss_fn(pred, y).item()
                num_total += y.shape[0]
                num_batches += 1
                num_correct += (pred.argmax(1) == y).sum().item()
        with tempfile.TemporaryDirectory() as temp_checkpoint_dir:
            torch.save(model.module.state_dict(), os.path.join(temp_checkpoint_dir, "model.pt"))
            ray.train.report(
                metrics={"loss": valid_loss / num_batches, "accuracy": num_correct / num_total, "seen": seen},
                checkpoint=ray.train.Checkpoint.from_directory(temp_checkpoint_dir),
            )


@pytest.mark.parametrize("ray_layout", [False, True], ids=["arrow-tensor", "ray-written-tensor"])
def test_seed_001_step_3_reads_maps_and_trains(data_cluster, tmp_path, ray_layout):
    if AGAINST_RAY and not ray_layout:
        pytest.skip("Ray reads Arrow's canonical tensor type as plain lists")
    storage = tmp_path / "cifar10-parquet"
    train_images, _ = write_cifar_like(str(storage / "train"), CIFAR_ROWS, 1, ray_layout)
    write_cifar_like(str(storage / "test"), CIFAR_ROWS // 2, 2, ray_layout)
    train_dataset = ray.data.read_parquet(f"{storage}/train")
    test_dataset = ray.data.read_parquet(f"{storage}/test")
    schema = train_dataset.schema()
    assert schema.names == ["image", "label"] and test_dataset.schema().names == ["image", "label"]

    train_dataset = train_dataset.map(transform_cifar)
    test_dataset = test_dataset.map(transform_cifar)
    first = train_dataset.take_batch(4)
    assert first["image"].shape == (4, 3, 32, 32) and first["image"].dtype == np.float32
    expected = ((train_images.astype(np.float32) / 255 - 0.5) / 0.5).transpose(0, 3, 1, 2)
    for image in first["image"]:
        assert np.abs(expected - image).max(axis=(1, 2, 3)).min() < 1e-6, "no input image maps to this output"

    trainer = ray.train.torch.TorchTrainer(
        train_loop_per_worker=cifar_loop,
        datasets={"train": train_dataset, "valid": test_dataset},
        train_loop_config={"lr": 1e-3, "epochs": 1, "batch_size": 16},
        scaling_config=ray.train.ScalingConfig(num_workers=2, use_gpu=False),
        run_config=ray.train.RunConfig(storage_path=str(tmp_path / "cluster_storage"), name="train_data_run"),
    )
    result = trainer.fit()
    assert result.error is None
    assert result.metrics["seen"] == CIFAR_ROWS // 2
    assert 0.0 <= result.metrics["accuracy"] <= 1.0
    with result.checkpoint.as_directory() as ckpt:
        assert os.path.getsize(os.path.join(ckpt, "model.pt")) > 0
