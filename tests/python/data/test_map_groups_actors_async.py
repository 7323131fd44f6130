"""map_groups as Ray runs it (a shuffle, then a map step whose blocks split into groups: any
compute, pool or remote option), Ray's defaults for callable classes, async UDFs,
`ray_remote_args_fn`, `actor_task_retry_on_errors`, and a stratified train/test split."""

import asyncio

import pandas as pd
import pytest
from data_testutil import ray

FRAME = pd.DataFrame({"A": ["a", "a", "b", "c", "c", "c"], "B": [1, 1, 3, 2, 2, 2], "C": [4, 6, 5, 1, 2, 3]})


def test_map_groups_gets_a_dataframe_per_group_by_default(data_cluster):
    grouped = ray.data.from_pandas(FRAME).repartition(3).groupby("A")

    def share_of_group(group):
        assert isinstance(group, pd.DataFrame)
        return group.assign(C=group["C"] / group["C"].sum())

    out = grouped.map_groups(share_of_group).sort(["A", "C"]).to_pandas()
    assert out["A"].tolist() == ["a", "a", "b", "c", "c", "c"]
    assert out["C"].tolist() == pytest.approx([0.4, 0.6, 1.0, 1 / 6, 2 / 6, 3 / 6])


def test_map_groups_on_an_actor_pool_with_every_cpu_after_the_shuffle(data_cluster):
    """Two pool actors take both CPUs of the cluster: they must wait for the shuffle's tasks."""

    class Scale:
        def __init__(self, factor):
            self.factor = factor

        def __call__(self, group, offset):
            group["B"] = group["B"] * self.factor + offset
            return group

    ds = ray.data.from_pandas(FRAME).groupby("A")
    out = ds.map_groups(Scale, fn_constructor_args=(10,), fn_args=(1,), concurrency=2).take_all()
    assert sorted((r["A"], r["B"]) for r in out) == sorted(zip(FRAME["A"], FRAME["B"] * 10 + 1, strict=True))


def test_a_callable_class_without_concurrency_gets_an_autoscaling_pool(data_cluster):
    class AddOne:
        def __call__(self, batch):
            batch["id"] = batch["id"] + 1
            return batch

    assert sorted(r["id"] for r in ray.data.range(20).map_batches(AddOne).take_all()) == list(range(1, 21))
    with pytest.raises(ValueError, match="actor pool, not as tasks"):
        ray.data.range(2).map_batches(AddOne, compute="tasks")


def test_map_groups_generator_and_remote_args_fn(data_cluster):
    def twice(group):
        yield group.assign(B=group["B"] * 2)
        yield group.assign(B=group["B"] * 3)

    out = ray.data.from_pandas(FRAME).groupby("A").map_groups(twice).take_all()
    assert sorted(r["B"] for r in out) == sorted([b * k for b in FRAME["B"] for k in (2, 3)])

    def read_env(group):
        import os

        return group.assign(B=int(os.environ["OXRAY_TEST_REMOTE_ARGS_FN"]))

    ds = ray.data.from_pandas(FRAME).groupby("A")
    ds = ds.map_groups(
        read_env, ray_remote_args_fn=lambda: {"runtime_env": {"env_vars": {"OXRAY_TEST_REMOTE_ARGS_FN": "69"}}}
    )
    assert {r["B"] for r in ds.take_all()} == {69}


def test_async_udfs(data_cluster):
    class AsyncBatches:
        async def __call__(self, batch):
            await asyncio.sleep(0)
            return {"x": batch["id"] * 2}

    class AsyncRows:
        async def __call__(self, row):
            yield {"id": row["id"]}
            await asyncio.sleep(0)
            yield {"id": -row["id"]}

    assert sorted(r["x"] for r in ray.data.range(6).map_batches(AsyncBatches, concurrency=1).take_all()) == [
        0,
        2,
        4,
        6,
        8,
        10,
    ]
    assert sorted(r["id"] for r in ray.data.range(3).flat_map(AsyncRows, concurrency=1).take_all()) == [
        -2,
        -1,
        0,
        0,
        1,
        2,
    ]

    async def plus_one(row):
        return {"id": row["id"] + 1}

    assert sorted(r["id"] for r in ray.data.range(3).map(plus_one).take_all()) == [1, 2, 3]


@pytest.fixture
def retry_context(data_cluster):
    ctx = ray.data.DataContext.get_current()
    yield ctx
    ctx.actor_task_retry_on_errors = False


def test_actor_task_retry_on_errors(retry_context):
    class FailsTwice:
        def __init__(self):
            self.failures = 0

        def __call__(self, batch):
            if self.failures < 2:
                self.failures += 1
                raise ValueError("flaky")
            return batch

    retry_context.actor_task_retry_on_errors = [ValueError]
    assert ray.data.range(4).map_batches(FailsTwice, concurrency=1).count() == 4

    retry_context.actor_task_retry_on_errors = [KeyError]  # not the error raised: no retry
    with pytest.raises(Exception, match="flaky"):
        ray.data.range(4).map_batches(FailsTwice, concurrency=1).materialize()

    class AlwaysFails:
        def __call__(self, batch):
            raise ValueError("always")

    retry_context.actor_task_retry_on_errors = True  # retried a bounded number of times, then raised
    with pytest.raises(Exception, match="always"):
        ray.data.range(4).map_batches(AlwaysFails, concurrency=1).materialize()
    with pytest.raises(ValueError, match="actor_task_retry_on_errors='yes'"):
        retry_context.actor_task_retry_on_errors = "yes"


def test_stratified_split_keeps_each_class_share(data_cluster):
    rows = [{"id": i, "label": label} for i, label in enumerate("AAAAAABBC")]
    train, test = ray.data.from_items(rows).train_test_split(test_size=0.5, stratify="label")
    test_labels = sorted(r["label"] for r in test.take_all())
    assert test_labels == ["A", "A", "A", "B"]  # int(6 * .5), int(2 * .5), int(1 * .5)
    assert sorted(r["id"] for r in train.take_all() + test.take_all()) == list(range(9))
    with pytest.raises(ValueError, match="Cannot specify both 'shuffle=True' and 'stratify'"):
        ray.data.from_items(rows).train_test_split(test_size=0.5, shuffle=True, stratify="label")


def test_filter_class_with_constructor_args_and_split_validation(data_cluster):
    class Above:
        def __init__(self, floor):
            self.floor = floor

        def __call__(self, row):
            return row["id"] > self.floor

    ds = ray.data.range(10)
    assert ds.filter(Above, fn_constructor_args=(6,), concurrency=1).count() == 3
    with pytest.raises(ValueError, match="at least of length 1"):
        ds.split_at_indices([])
    with pytest.raises(ValueError, match="`shuffle` must be False"):
        ds.repartition(target_num_rows_per_block=2, shuffle=True)
    with pytest.raises(ValueError, match="Only one of `num_blocks`"):
        ds.repartition(2, 2)


def test_expression_udfs_and_grouped_with_column(data_cluster):
    import pyarrow as pa
    import pyarrow.compute as pc

    from oxray.data.datatype import DataType
    from oxray.data.expressions import col, udf

    ds = ray.data.from_items([{"g": g, "v": v} for g, v in [(1, 1), (1, 2), (2, 3), (2, 4)]])

    @udf(return_dtype=DataType.int32())
    def group_min(values):
        return pa.array([pc.min(values).as_py()] * len(values))

    rows = ds.groupby("g").with_column("m", group_min(col("v"))).sort(["g", "v"]).take_all()
    assert [r["m"] for r in rows] == [1, 1, 3, 3]  # the udf saw one group at a time
    assert [r["w"] for r in ds.groupby("g").with_column("w", col("v") * 2).sort("v").take_all()] == [2, 4, 6, 8]

    @udf(return_dtype=DataType.int64())
    class AddOffset:
        def __init__(self, offset):
            self.offset = offset

        def __call__(self, x):
            return pc.add(x, self.offset)

    out = ds.with_column("p", AddOffset(5)(col("v")) * 2)
    assert sorted(r["p"] for r in out.take_all()) == [12, 14, 16, 18]
    assert ds.with_column("m", group_min(col("v"))).schema().types[-1] == pa.int32()

    @udf(return_dtype=DataType.int64())
    def too_short(values):
        return pa.array([1])

    with pytest.raises(Exception, match="returned 1 values for a block of 4 rows"):
        ds.repartition(1).with_column("x", too_short(col("v"))).materialize()


def test_a_datasource_read_on_an_actor_pool(data_cluster):
    import pyarrow as pa

    from oxray.data.block import BlockMetadata
    from oxray.data.datasource import Datasource, ReadTask

    class WhoReads(Datasource):
        def estimate_inmemory_data_size(self):
            return None

        def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
            def read(i):
                return [pa.table({"v": [i], "actor_id": [ray.get_runtime_context().get_actor_id()]})]

            meta = BlockMetadata(num_rows=1, size_bytes=None, input_files=None, exec_stats=None)
            return [ReadTask(lambda i=i: read(i), meta) for i in range(4)]

    on_tasks = ray.data.read_datasource(WhoReads(), compute=ray.data.TaskPoolStrategy(), override_num_blocks=4)
    assert {r["actor_id"] for r in on_tasks.take_all()} == {None}
    on_actors = ray.data.read_datasource(WhoReads(), compute=ray.data.ActorPoolStrategy(size=2), override_num_blocks=4)
    rows = on_actors.take_all()
    assert sorted(r["v"] for r in rows) == [0, 1, 2, 3]
    assert None not in {r["actor_id"] for r in rows} and 1 <= len({r["actor_id"] for r in rows}) <= 2
    with pytest.raises(ValueError, match="compute='gpus'"):
        ray.data.read_datasource(WhoReads(), compute="gpus")


def test_pandas_timestamps_keep_their_nanoseconds(data_cluster):
    frame = pd.DataFrame({"t": pd.to_datetime(["2024-01-01 00:00:00.123456789"])})

    def later(row):
        row["t"] = row["t"] + pd.Timedelta(1, "ns")
        return row

    out = ray.data.from_pandas(frame).map(later).to_pandas()
    assert out["t"].astype("datetime64[ns]").tolist() == [pd.Timestamp("2024-01-01 00:00:00.123456790")]


def test_a_pool_actor_whose_process_dies_is_restarted(data_cluster, tmp_path):
    flag = str(tmp_path / "crashed_once")

    class CrashOnce:
        def __call__(self, batch):
            import os

            if not os.path.exists(flag):
                open(flag, "w").close()
                os._exit(1)  # the worker process dies mid-call
            return batch

    ds = ray.data.range(40, override_num_blocks=4)
    assert sorted(r["id"] for r in ds.map_batches(CrashOnce, concurrency=1).take_all()) == list(range(40))
    import os

    os.remove(flag)
    with pytest.raises(ray.exceptions.RayActorError):
        ds.map_batches(CrashOnce, concurrency=1, max_restarts=0).take_all()


def test_errors_raised_inside_async_and_generator_udfs_are_user_code_errors(data_cluster):
    class AsyncFails:
        async def __call__(self, batch):
            await asyncio.sleep(0)
            raise KeyError("missing-in-async")

    def generator_fails(batch):
        yield batch
        raise RuntimeError("broken-after-first-batch")

    with pytest.raises(ray.exceptions.UserCodeException, match="missing-in-async"):
        ray.data.range(4).map_batches(AsyncFails, concurrency=1).materialize()
    with pytest.raises(ray.exceptions.UserCodeException, match="broken-after-first-batch"):
        ray.data.range(4).map_batches(generator_fails).materialize()
