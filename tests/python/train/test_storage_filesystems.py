"""Train storage given the ways Ray users give it: a pyarrow filesystem
(`RunConfig(storage_filesystem=)`), an s3:// URI with pyarrow's options in its
query, PathLike paths, `Result.from_path(path, storage_filesystem=)`, and
`Result.filesystem` as a pyarrow filesystem. The S3 endpoint reaches the workers
only through those options: the AWS endpoint variable is unset."""

import os
import pathlib
import tempfile

import pytest

pafs = pytest.importorskip("pyarrow.fs")

from oxray import train  # noqa: E402
from oxray.train import DataParallelTrainer, Result, RunConfig, ScalingConfig  # noqa: E402


def checkpoint_twice():
    for step in range(2):
        with tempfile.TemporaryDirectory() as d:
            pathlib.Path(d, "step").write_text(str(step))
            train.report({"step": step}, checkpoint=train.Checkpoint.from_directory(d))
    latest = train.get_checkpoint()
    with latest.as_directory() as d:
        return pathlib.Path(d, "step").read_text()


def fit(run_config):
    return DataParallelTrainer(
        checkpoint_twice, scaling_config=ScalingConfig(num_workers=2), run_config=run_config
    ).fit()


def test_s3_filesystem_and_query_options_reach_the_workers(cluster, moto_s3, monkeypatch):
    host = moto_s3.endpoint.removeprefix("http://")
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    fs = pafs.S3FileSystem(
        endpoint_override=host, scheme="http", region="us-east-1", access_key="testing", secret_key="testing"
    )
    result = fit(RunConfig(storage_path="oxray-test/fs-runs", storage_filesystem=fs, name="viafs"))
    assert result.return_value == "1"
    assert result.path == "s3://oxray-test/fs-runs/viafs"
    assert isinstance(result.filesystem, pafs.S3FileSystem)
    keys = [o["Key"] for o in moto_s3.list_objects_v2(Bucket="oxray-test", Prefix="fs-runs/")["Contents"]]
    assert any(k.startswith("fs-runs/viafs/checkpoint_") and k.endswith("/step") for k in keys), keys

    query = f"s3://oxray-test/query-runs?endpoint_override={host}&scheme=http&region=us-east-1"
    second = fit(RunConfig(storage_path=query, name="viaquery"))
    assert second.path == "s3://oxray-test/query-runs/viaquery"
    assert host not in repr(second) and "?" not in second.checkpoint.path

    restored = Result.from_path("oxray-test/query-runs/viaquery", storage_filesystem=fs)
    assert restored.metrics == {"step": 1}
    with restored.checkpoint.as_directory() as d:
        assert pathlib.Path(d, "step").read_text() == "1"


def test_unsupported_s3_query_options_are_refused(cluster, moto_s3):
    with pytest.raises(ValueError, match="allow_bucket_creation"):
        fit(RunConfig(storage_path="s3://oxray-test/x?allow_bucket_creation=true", name="refused"))
    with pytest.raises(NotImplementedError, match="role_arn"):
        RunConfig(storage_path="oxray-test/x", storage_filesystem=pafs.S3FileSystem(role_arn="arn:aws:iam::1:role/r"))


def test_local_paths_as_pathlike_and_on_a_local_filesystem(cluster, tmp_path):
    result = fit(RunConfig(storage_path=tmp_path / "runs", storage_filesystem=pafs.LocalFileSystem(), name="local"))
    assert result.path == os.path.join(str(tmp_path), "runs", "local")
    assert isinstance(result.filesystem, pafs.LocalFileSystem)
    again = Result.from_path(tmp_path / "runs" / "local")
    assert again.metrics == {"step": 1} and again.checkpoint == result.checkpoint
    on_fs = Result.from_path(str(tmp_path / "runs" / "local"), storage_filesystem=pafs.LocalFileSystem())
    assert on_fs.checkpoint == result.checkpoint


def test_other_filesystems_are_refused(tmp_path):
    subtree = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())
    with pytest.raises(NotImplementedError, match="SubTreeFileSystem"):
        RunConfig(storage_path="runs", storage_filesystem=subtree)
