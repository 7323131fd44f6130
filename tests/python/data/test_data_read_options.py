"""Readers' shared options are enforced or refused, never ignored (oxray's own rules)."""

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from data_testutil import AGAINST_RAY, ray

pytestmark = [pytest.mark.timeout(120), pytest.mark.skipif(AGAINST_RAY, reason="oxray's option checks")]


@pytest.fixture
def parquet_file(tmp_path):
    table = pa.table({"id": np.arange(8000), "x": np.ones(8000, dtype=np.float32)})
    path = tmp_path / "t.parquet"
    pq.write_table(table, path, row_group_size=1000)  # 8 row groups
    return str(path)


def test_override_num_blocks_cuts_parquet_into_that_many_blocks(data_cluster, parquet_file):
    ds = ray.data.read_parquet(parquet_file, override_num_blocks=4).materialize()
    assert ds.num_blocks() == 4
    assert sorted(r["id"] for r in ds.take_all()) == list(range(8000))
    assert ray.data.read_parquet(parquet_file, parallelism=2).materialize().num_blocks() == 2


def test_concurrency_limits_parquet_reads_and_options_not_enforced_are_refused(data_cluster, parquet_file):
    ds = ray.data.read_parquet(parquet_file, concurrency=1).map_batches(lambda b: b)
    assert ds.count() == 8000
    for option in ({"num_cpus": 2}, {"num_gpus": 1}, {"memory": 1 << 20}, {"meta_provider": object()}):
        with pytest.raises(ValueError, match=next(iter(option))):
            ray.data.read_parquet(parquet_file, **option)


def test_file_readers_take_concurrency_num_cpus_and_override_num_blocks(data_cluster, tmp_path):
    for i in range(3):
        pd.DataFrame({"a": [i, i + 10]}).to_csv(tmp_path / f"{i}.csv", index=False)
    ds = ray.data.read_csv(str(tmp_path), concurrency=1, num_cpus=1)
    assert sorted(r["a"] for r in ds.take_all()) == [0, 1, 2, 10, 11, 12]
    # At most that many read tasks, each reading whole files.
    two = ray.data.read_csv(str(tmp_path), override_num_blocks=2).materialize()
    assert two.num_blocks() == 2 and sorted(r["a"] for r in two.take_all()) == [0, 1, 2, 10, 11, 12]
    with pytest.raises(ValueError, match="concurrency=0"):
        ray.data.read_csv(str(tmp_path), concurrency=0)


def test_range_and_from_items_take_parallelism_as_the_block_count(data_cluster):
    assert ray.data.range(100, parallelism=3).materialize().num_blocks() == 3
    assert ray.data.from_items(list(range(10)), parallelism=5).num_blocks() == 5


class _Pid:
    def __call__(self, batch):
        import os

        return {"pid": np.full(len(batch["id"]), os.getpid())}


def test_actor_pools_start_small_and_grow_to_max_size_when_busy(data_cluster):
    ds = ray.data.range(8, override_num_blocks=8)
    grown = ds.map_batches(_Pid, compute=ray.data.ActorPoolStrategy(min_size=1, max_size=2)).take_all()
    assert len({r["pid"] for r in grown}) == 2, "a second actor once the first has its calls in flight"
    fixed = ds.map_batches(_Pid, compute=ray.data.ActorPoolStrategy(size=1)).take_all()
    assert len({r["pid"] for r in fixed}) == 1
    with pytest.raises(ValueError, match="initial_size"):
        ray.data.ActorPoolStrategy(min_size=2, max_size=3, initial_size=5)
