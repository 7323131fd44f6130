"""``ray.data`` on S3, against a real S3 API server (moto) on localhost:
``write_parquet("s3://...")`` then ``read_parquet("s3://...")`` gives back the
input, and files pyarrow put in the bucket read back as pyarrow reads them.

The endpoint and credentials come the way Train storage takes them, from
``AWS_ENDPOINT_URL``/``AWS_ACCESS_KEY_ID``/... in the environment; the cluster
starts after they are set, so its workers inherit them.
"""

import importlib
import io
import json
import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from data_testutil import AGAINST_RAY, frame_by, ray, start_cluster

pytestmark = pytest.mark.timeout(300)

BUCKET = "oxray-data"


@pytest.fixture
def s3_bucket(moto_s3):
    """The shared moto server (tests/python/conftest.py) with this module's bucket."""
    moto_s3.create_bucket(Bucket=BUCKET)
    return moto_s3


@pytest.fixture
def s3_cluster(s3_bucket):
    """A cluster started after the S3 settings are in the environment."""
    start_cluster()
    try:
        yield s3_bucket
    finally:
        if ray.is_initialized():
            ray.shutdown()


def keys_under(client, prefix):
    listing = client.list_objects_v2(Bucket=BUCKET, Prefix=prefix)
    return sorted(o["Key"] for o in listing.get("Contents", []))


def make_frame(n=200):
    ids = np.arange(n, dtype=np.int64)
    return pd.DataFrame({"id": ids, "x": ids * 0.25, "label": [f"l{i % 7}" for i in ids]})


def pyarrow_s3(endpoint):
    """The reference reader/writer: pyarrow's own S3 filesystem on the same server."""
    from pyarrow import fs

    return fs.S3FileSystem(
        access_key="testing",
        secret_key="testing",
        region="us-east-1",
        endpoint_override=endpoint,
        scheme="http",
    )


def test_write_parquet_to_s3_then_read_back(s3_cluster):
    client = s3_cluster
    df = make_frame()
    ray.data.from_pandas(df).repartition(3).write_parquet(f"s3://{BUCKET}/tables/train")
    # pyarrow (under Ray) also leaves a "tables/train/" directory marker; every object is a parquet file.
    files = [k for k in keys_under(client, "tables/train/") if not k.endswith("/")]
    assert files and all(k.endswith(".parquet") for k in files), files
    # pyarrow reads what was written ...
    reference = pq.read_table(f"{BUCKET}/tables/train", filesystem=pyarrow_s3(client.endpoint)).to_pandas()
    assert frame_by(reference) == frame_by(df)
    # ... and so does ray.data.
    ds = ray.data.read_parquet(f"s3://{BUCKET}/tables/train")
    assert ds.count() == len(df)
    assert frame_by(ds.to_pandas()) == frame_by(df)


def test_read_parquet_from_s3_files_put_by_another_tool(s3_cluster):
    client = s3_cluster
    df = make_frame()
    for i, part in enumerate(np.array_split(np.arange(len(df)), 4)):
        buf = io.BytesIO()
        pq.write_table(pa.Table.from_pandas(df.iloc[part], preserve_index=False), buf)
        client.put_object(Bucket=BUCKET, Key=f"raw/part-{i}.parquet", Body=buf.getvalue())
    ds = ray.data.read_parquet(f"s3://{BUCKET}/raw", columns=["id", "x"])
    assert ds.columns() == ["id", "x"]
    assert frame_by(ds.to_pandas()) == frame_by(df[["id", "x"]])
    single = ray.data.read_parquet(f"s3://{BUCKET}/raw/part-0.parquet")
    assert single.count() == 50


def test_read_and_write_parquet_with_filesystem_argument(s3_cluster):
    client = s3_cluster
    fs = pyarrow_s3(client.endpoint)
    df = make_frame(40)
    ray.data.from_pandas(df).write_parquet(f"{BUCKET}/viafs", filesystem=fs)
    assert keys_under(client, "viafs/")
    back = ray.data.read_parquet(f"{BUCKET}/viafs", filesystem=fs).to_pandas()
    assert frame_by(back) == frame_by(df)


def test_read_parquet_from_a_missing_bucket_names_it(s3_cluster):
    with pytest.raises(Exception, match="no-such-bucket"):
        ray.data.read_parquet("s3://no-such-bucket/tables").take_all()


def s3_ingest_loop(config):
    rank = ray.train.get_context().get_world_rank()
    ids = []
    for batch in ray.train.get_dataset_shard("train").iter_torch_batches(batch_size=32):
        ids.extend(int(v) for v in batch["id"].tolist())
    with open(os.path.join(config["log_dir"], f"rank{rank}.json"), "w") as f:
        json.dump(ids, f)
    ray.train.report({"rows": len(ids)})


def test_train_run_reading_from_s3(s3_cluster, tmp_path):
    torch = pytest.importorskip("torch")  # noqa: F841
    if AGAINST_RAY:
        # Ray wants its submodules imported; oxray has them on `ray`.
        importlib.import_module("ray.train.torch")
    df = make_frame()
    ray.data.from_pandas(df).write_parquet(f"s3://{BUCKET}/train-data")
    logs = tmp_path / "logs"
    logs.mkdir()
    result = ray.train.torch.TorchTrainer(
        s3_ingest_loop,
        train_loop_config={"log_dir": str(logs)},
        datasets={"train": ray.data.read_parquet(f"s3://{BUCKET}/train-data", columns=["id", "x"])},
        # Half a CPU per worker leaves the pipeline a CPU (the starvation case is tested elsewhere).
        scaling_config=ray.train.ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
        run_config=ray.train.RunConfig(storage_path=str(tmp_path / "results"), name="s3ingest"),
    ).fit()
    assert result.error is None
    share0, share1 = (json.load(open(logs / f"rank{r}.json")) for r in range(2))
    assert len(share0) == len(share1) == len(df) // 2
    assert not set(share0) & set(share1) and sorted(share0 + share1) == list(range(len(df)))
