"""Ray Train's PyTorch tutorial, written as Ray's docs write it, run with
`import oxray as ray`: a VisionTransformer on FakeData (CIFAR-shaped), with
prepare_model / prepare_data_loader, a checkpoint per epoch, then the
result's checkpoint loaded to predict."""

import os
import tempfile

import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")

import oxray as ray  # noqa: E402


def train_func():
    from torch.nn import CrossEntropyLoss
    from torch.optim import Adam
    from torch.utils.data import DataLoader
    from torchvision.datasets import FakeData
    from torchvision.models import VisionTransformer
    from torchvision.transforms import Compose, Normalize, ToTensor

    # Model, Loss, Optimizer
    model = VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64, num_classes=10
    )
    # [1] Prepare model.
    model = ray.train.torch.prepare_model(model)
    criterion = CrossEntropyLoss()
    optimizer = Adam(model.parameters(), lr=0.001)

    # Data
    transform = Compose([ToTensor(), Normalize((0.5,), (0.5,))])
    train_data = FakeData(size=128, image_size=(3, 32, 32), num_classes=10, transform=transform)
    train_loader = DataLoader(train_data, batch_size=16, shuffle=True)
    # [2] Prepare dataloader.
    train_loader = ray.train.torch.prepare_data_loader(train_loader)

    # Training
    for epoch in range(2):
        if ray.train.get_context().get_world_size() > 1:
            train_loader.sampler.set_epoch(epoch)

        for images, labels in train_loader:
            # This is done by `prepare_data_loader`!
            # images, labels = images.to("cuda"), labels.to("cuda")
            outputs = model(images)
            loss = criterion(outputs, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

        # [3] Report metrics and checkpoint.
        metrics = {"loss": loss.item(), "epoch": epoch}
        with tempfile.TemporaryDirectory() as temp_checkpoint_dir:
            torch.save(model.module.state_dict(), os.path.join(temp_checkpoint_dir, "model.pt"))
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(temp_checkpoint_dir))
        if ray.train.get_context().get_world_rank() == 0:
            print(metrics)


def test_vision_transformer_tutorial(tmp_path):
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2)
    try:
        # [4] Configure scaling and resource requirements.
        scaling_config = ray.train.ScalingConfig(num_workers=2, use_gpu=False)

        # [5] Launch distributed training job.
        trainer = ray.train.torch.TorchTrainer(
            train_func,
            scaling_config=scaling_config,
            # [5a] If running in a multi-node cluster, this is where you
            # should configure the run's persistent storage that is accessible
            # across all worker nodes.
            run_config=ray.train.RunConfig(storage_path=str(tmp_path), name="vit"),
        )
        result = trainer.fit()

        # [6] Load the trained model.
        with result.checkpoint.as_directory() as checkpoint_dir:
            model_state_dict = torch.load(os.path.join(checkpoint_dir, "model.pt"))
            from torchvision.models import VisionTransformer

            model = VisionTransformer(
                image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64, num_classes=10
            )
            model.load_state_dict(model_state_dict)
    finally:
        ray.shutdown()

    assert result.metrics["epoch"] == 1 and result.metrics["loss"] > 0
    assert result.error is None
    assert result.path == str(tmp_path / "vit")
    assert list(result.metrics_dataframe["epoch"]) == [0, 1]
    model.eval()
    with torch.no_grad():
        predictions = model(torch.randn(4, 3, 32, 32)).argmax(1)
    assert predictions.shape == (4,) and all(0 <= int(p) < 10 for p in predictions)
