"""Ray Data API that users (and Ray's own tests) reach for: `from_blocks`, the `*_refs` sources,
`override_num_blocks` giving exactly that many blocks, re-iterable `iter_batches`,
`DataIterator.to_torch`/`materialize`, `DefaultCollateFn` and the other collate-function
classes, `flat_map(fn_constructor_args=)`, and the actor- and task-pool options."""

import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from data_testutil import AGAINST_RAY, ray

torch = pytest.importorskip("torch")


def test_from_blocks_keeps_one_block_each(data_cluster):
    ds = ray.data.from_blocks([pa.table({"x": [1, 2]}), pd.DataFrame({"x": [3]})])
    assert ds.num_blocks() == 2
    assert sorted(r["x"] for r in ds.take_all()) == [1, 2, 3]


def test_ref_sources_read_objects_from_the_store(data_cluster):
    arrow = ray.data.from_arrow_refs([ray.put(pa.table({"a": [1, 2]})), ray.put(pa.table({"a": [3]}))])
    assert sorted(r["a"] for r in arrow.take_all()) == [1, 2, 3]
    frames = ray.data.from_pandas_refs([ray.put(pd.DataFrame({"b": ["x", "y"]}))])
    assert sorted(r["b"] for r in frames.take_all()) == ["x", "y"]
    arrays = ray.data.from_numpy_refs([ray.put(np.ones((2, 3))), ray.put(np.zeros((1, 3)))])
    assert arrays.count() == 3 and arrays.take_batch(3)["data"].shape == (3, 3)


def test_from_arrow_with_override_num_blocks_gives_that_many_blocks(data_cluster):
    ds = ray.data.from_arrow(pa.table({"x": list(range(12))}), override_num_blocks=5)
    assert ds.num_blocks() == 5
    assert sorted(r["x"] for r in ds.take_all()) == list(range(12))


def test_iter_batches_can_be_iterated_again(data_cluster):
    batches = ray.data.range(10).iter_batches(batch_size=4)
    first = [b["id"].tolist() for b in batches]
    second = [b["id"].tolist() for b in batches]
    assert sorted(sum(first, [])) == list(range(10)) and sorted(sum(second, [])) == list(range(10))
    rows = ray.data.range(3).iter_rows()
    assert len(list(rows)) == 3 and len(list(rows)) == 3


def test_iterator_to_torch_gives_features_and_labels(data_cluster):
    ds = ray.data.from_items([{"a": float(i), "b": float(2 * i), "y": i % 2} for i in range(8)])
    it = ds.iterator().to_torch(label_column="y", batch_size=4)
    seen = 0
    for features, label in it:
        assert features.shape == (4, 2) and label.shape == (4, 1)
        np.testing.assert_array_equal(features[:, 1].numpy(), 2 * features[:, 0].numpy())
        seen += 4
    assert seen == 8
    multi = ds.iterator().to_torch(label_column="y", feature_columns={"x": ["a"], "z": ["b"]}, batch_size=8)
    features, label = next(iter(multi))
    assert set(features) == {"x", "z"} and features["x"].shape == (8, 1)


def test_iterator_materialize(data_cluster):
    done = ray.data.range(6).iterator().materialize()
    assert sorted(r["id"] for r in done.take_all()) == list(range(6))


def test_default_collate_fn_and_a_numpy_collate_fn(data_cluster):
    from oxray.data.collate_fn import DefaultCollateFn, NumpyBatchCollateFn

    if AGAINST_RAY:
        from ray.data.collate_fn import DefaultCollateFn, NumpyBatchCollateFn  # noqa: F811

    ds = ray.data.range(8)
    batches = list(ds.iter_torch_batches(batch_size=4, collate_fn=DefaultCollateFn()))
    assert all(isinstance(b["id"], torch.Tensor) for b in batches)

    class Doubled(NumpyBatchCollateFn):
        def __call__(self, batch):
            return torch.as_tensor(batch["id"] * 2)

    got = sorted(v for b in ds.iter_torch_batches(batch_size=4, collate_fn=Doubled()) for v in b.tolist())
    assert got == [2 * i for i in range(8)]


def test_flat_map_with_constructor_args_on_an_actor_pool(data_cluster):
    class Repeat:
        def __init__(self, times):
            self.times = times

        def __call__(self, row):
            return [row] * self.times

    ds = ray.data.range(4).flat_map(Repeat, fn_constructor_args=(3,), concurrency=1)
    assert sorted(r["id"] for r in ds.take_all()) == sorted(list(range(4)) * 3)


def test_actor_and_task_pool_options(data_cluster):
    class AddOne:
        def __call__(self, batch):
            return {"id": batch["id"] + 1}

    ds = ray.data.range(6).map_batches(AddOne, concurrency=1, max_concurrency=2, max_task_retries=1)
    assert sorted(r["id"] for r in ds.take_all()) == list(range(1, 7))
    ds = ray.data.range(6).map_batches(lambda b: b, max_retries=2)
    assert ds.count() == 6


@pytest.mark.skipif(AGAINST_RAY, reason="checks oxray's error messages")
def test_pool_options_on_the_wrong_kind_of_udf_are_refused(data_cluster):
    with pytest.raises(ValueError, match="max_concurrency"):
        ray.data.range(2).map_batches(lambda b: b, max_concurrency=2)
    with pytest.raises(ValueError, match="duplicate column names"):
        ray.data.range(2).select_columns(["id", "id"])


def test_zip_joins_columns_row_by_row_and_renames_taken_names(data_cluster, preserve_order):
    left = ray.data.range(10, override_num_blocks=3)
    right = ray.data.range(10, override_num_blocks=4).map(lambda r: {"id": r["id"] * 10, "x": 1})
    rows = left.zip(right).take_all()
    assert rows == [{"id": i, "id_1": 10 * i, "x": 1} for i in range(10)]
    with pytest.raises(ValueError, match="different number of rows: 10, 3"):
        left.zip(ray.data.range(3))


def test_sort_with_boundaries_makes_one_block_per_range(data_cluster):
    ds = ray.data.range(100, override_num_blocks=5).random_shuffle(seed=1).sort("id", boundaries=[10, 50])
    done = ds.materialize()
    assert done.num_blocks() == 3
    assert [r["id"] for r in done.take_all()] == list(range(100))


@pytest.mark.skipif(AGAINST_RAY, reason="checks oxray's refusal of the shuffle strategies it does not run")
def test_data_context_settings_ray_tests_flip(data_cluster):
    ctx = ray.data.DataContext.get_current()
    before = ctx.target_max_block_size
    try:
        ctx.target_max_block_size = None  # Ray's "no limit"
        assert ray.data.range(5).count() == 5
    finally:
        ctx.target_max_block_size = before
    from oxray.data.context import ShuffleStrategy

    ctx.shuffle_strategy = ShuffleStrategy.SORT_SHUFFLE_PULL_BASED
    with pytest.raises(ValueError, match="shuffle_strategy='sort_shuffle_pushed'.*sort_shuffle_push_based"):
        ctx.shuffle_strategy = "sort_shuffle_pushed"


def test_filter_and_with_column_take_expressions(data_cluster):
    if AGAINST_RAY:
        from ray.data.expressions import col
    else:
        from oxray.data.expressions import col
    ds = ray.data.from_items([{"a": i, "b": None if i % 4 == 0 else f"s{i}"} for i in range(12)])
    assert sorted(r["a"] for r in ds.filter(expr=(col("a") > 6) & (col("a") != 9)).take_all()) == [7, 8, 10, 11]
    assert sorted(r["a"] for r in ds.filter(expr="a % 3 == 0 and a > 0").take_all()) == [3, 6, 9]
    assert sorted(r["a"] for r in ds.filter(expr=col("b").is_null()).take_all()) == [0, 4, 8]
    assert sorted(r["a"] for r in ds.filter(expr=col("a").is_in([1, 5])).take_all()) == [1, 5]
    rows = sorted(ds.with_column("c", col("a") * 2 + 1).take_all(), key=lambda r: r["a"])
    assert [r["c"] for r in rows] == [2 * i + 1 for i in range(12)]


@pytest.mark.skipif(AGAINST_RAY, reason="checks oxray's error messages")
def test_expressions_name_what_they_cannot_do(data_cluster):
    ds = ray.data.range(3)
    with pytest.raises(ValueError, match="nope"):
        ds.filter(expr="nope > 1").take_all()  # as in Ray, an unknown column fails when it runs
    with pytest.raises(ValueError, match="not supported"):
        ds.filter(expr="len(id) > 1")
    with pytest.raises(ValueError, match="either fn or expr"):
        ds.filter(lambda r: True, expr="id > 1")


def test_write_modes_append_overwrite_ignore_error(data_cluster, tmp_path):
    path = str(tmp_path / "out")
    ray.data.range(3).write_parquet(path)
    ray.data.range(3).write_parquet(path, mode="append")
    assert ray.data.read_parquet(path).count() == 6
    ray.data.range(2).write_parquet(path, mode="overwrite")
    assert ray.data.read_parquet(path).count() == 2
    ray.data.range(5).write_parquet(path, mode="ignore")
    assert ray.data.read_parquet(path).count() == 2
    with pytest.raises(ValueError, match="already exists"):
        ray.data.range(5).write_parquet(path, mode="error")
    assert ray.data.read_parquet(path).count() == 2


def test_read_parquet_include_paths(data_cluster, tmp_path):
    path = str(tmp_path / "files")
    ray.data.range(4, override_num_blocks=2).write_parquet(path)
    rows = ray.data.read_parquet(path, include_paths=True).take_all()
    files = {os.path.join(path, f) for f in os.listdir(path)}
    assert {r["path"] for r in rows} == files


def test_write_with_a_filename_provider(data_cluster, tmp_path):
    if AGAINST_RAY:
        from ray.data.datasource.filename_provider import FilenameProvider
    else:
        from oxray.data.datasource.filename_provider import FilenameProvider

    class Named(FilenameProvider):
        def get_filename_for_task(self, write_uuid, task_index):
            return f"part-{task_index:03}.parquet"

    path = str(tmp_path / "named")
    # Names without the write's id could collide with another write's: Ray allows them only when
    # the write replaces the directory; `-{i}` numbers each task's parquet files.
    ray.data.range(9, override_num_blocks=3).write_parquet(path, filename_provider=Named(), mode="overwrite")
    assert sorted(os.listdir(path)) == ["part-000-0.parquet", "part-001-0.parquet", "part-002-0.parquet"]
    assert sorted(r["id"] for r in ray.data.read_parquet(path).take_all()) == list(range(9))


def test_streaming_train_test_split_is_disjoint_and_repeatable(data_cluster):
    import hashlib

    ds = ray.data.range(200, override_num_blocks=4)
    train, test = ds.streaming_train_test_split(0.25, seed=3)
    a, b = sorted(r["id"] for r in train.take_all()), sorted(r["id"] for r in test.take_all())
    assert sorted(a + b) == list(range(200)) and not set(a) & set(b)
    assert sorted(r["id"] for r in train.take_all()) == a, "a seeded split is the same every run"
    train, test = ds.streaming_train_test_split(0.25, split_type="hash", hash_column="id")
    limit = 0.75 * (1 << 64)
    expected = [
        i for i in range(200) if int.from_bytes(hashlib.blake2b(str(i).encode(), digest_size=8).digest(), "big") < limit
    ]
    assert sorted(r["id"] for r in train.take_all()) == expected
    with pytest.raises(ValueError, match="hash_column is required"):
        ds.streaming_train_test_split(0.5, split_type="hash")


def test_file_reads_take_override_num_blocks(data_cluster, tmp_path):
    for i in range(5):
        (tmp_path / f"{i}.json").write_text(f'{{"a": {i}}}\n')
    ds = ray.data.read_json(str(tmp_path), override_num_blocks=2)
    done = ds.materialize()
    assert done.num_blocks() == 2
    assert sorted(r["a"] for r in done.take_all()) == list(range(5))


def test_concurrency_and_pool_checks_as_rays(data_cluster):
    class Udf:
        def __call__(self, row):
            return row

    for bad in [(2, 1), -1, "spam", (1, 2, 3, 4)]:
        with pytest.raises(ValueError):
            ray.data.range(1).map(Udf, concurrency=bad)
    for bad in ["spam", (1, 2), (1, 2, 3)]:
        with pytest.raises(ValueError):
            ray.data.range(1).map(lambda x: x, concurrency=bad)
    with pytest.raises(ValueError):
        ray.data.ActorPoolStrategy(max_tasks_in_flight_per_actor=0)
    with pytest.raises(ValueError):
        ray.data.range(0).random_sample(0.2)
    assert ray.data.range(10).map(Udf, concurrency=(1, 2, 2)).count() == 10  # (min, max, initial)


@pytest.mark.skipif(AGAINST_RAY, reason="oxray refuses what its writers would never call")
def test_a_filename_provider_that_only_names_rows_is_refused(data_cluster, tmp_path):
    from oxray.data.datasource.filename_provider import FilenameProvider

    class PerRow(FilenameProvider):
        def get_filename_for_row(self, row, write_uuid, task_index, block_index, row_index):
            return f"{row['id']}.csv"

    with pytest.raises(ValueError, match="get_filename_for_row"):
        ray.data.range(3).write_csv(str(tmp_path / "rows"), filename_provider=PerRow())
