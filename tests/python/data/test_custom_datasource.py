"""A user's own `Datasource` and `Datasink`, written against Ray Data's API: read tasks with
their metadata, run as tasks (`read_datasource`), and a sink whose `write` runs per block with
`on_write_start`/`on_write_complete`/`on_write_failed` on the driver (`write_datasink`)."""

import os

import pandas as pd
import pyarrow as pa
import pytest
from data_testutil import AGAINST_RAY, ray

if AGAINST_RAY:
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasink, Datasource, ReadTask
else:
    from oxray.data.block import BlockMetadata
    from oxray.data.datasource import Datasink, Datasource, ReadTask


class SquaresDatasource(Datasource):
    def __init__(self, n):
        self.n = n

    def estimate_inmemory_data_size(self):
        return self.n * 16

    def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
        bounds = [(i * self.n // parallelism, (i + 1) * self.n // parallelism) for i in range(parallelism)]

        def make(lo, hi):
            def read():
                yield pd.DataFrame({"x": range(lo, hi), "pid": os.getpid()})
                yield pa.table({"x": [v * v for v in range(lo, hi)], "pid": [os.getpid()] * (hi - lo)})

            return read

        return [
            ReadTask(
                make(lo, hi), BlockMetadata(num_rows=2 * (hi - lo), size_bytes=None, input_files=None, exec_stats=None)
            )
            for lo, hi in bounds
        ]


def test_read_datasource_runs_the_users_read_tasks_as_tasks(data_cluster):
    ds = ray.data.read_datasource(SquaresDatasource(10), override_num_blocks=3)
    rows = ds.take_all()
    assert sorted(r["x"] for r in rows) == sorted(list(range(10)) + [v * v for v in range(10)])
    assert os.getpid() not in {r["pid"] for r in rows}, "the reads ran in the driver"
    assert ds.count() == 20
    assert ds.map(lambda r: {"y": r["x"] + 1}).count() == 20


class CollectingSink(Datasink):
    def __init__(self, directory, fail_on=None):
        self.directory, self.fail_on = directory, fail_on
        self.events = []

    def on_write_start(self, schema=None):
        self.events.append("start")

    def write(self, blocks, ctx):
        rows = 0
        for block in blocks:
            df = block.to_pandas() if hasattr(block, "to_pandas") else block
            if self.fail_on is not None and self.fail_on in df["id"].tolist():
                raise RuntimeError(f"cannot write row {self.fail_on}")
            with open(os.path.join(self.directory, f"{os.getpid()}-{df['id'].min()}.csv"), "w") as f:
                df.to_csv(f, index=False)
            rows += len(df)
        return rows

    def on_write_complete(self, write_result):
        self.events.append(("complete", write_result.num_rows, sorted(write_result.write_returns)))

    def on_write_failed(self, error):
        self.events.append(("failed", type(error).__name__))


def test_write_datasink_calls_write_per_block_and_completes(data_cluster, tmp_path):
    sink = CollectingSink(str(tmp_path))
    ray.data.range(12, override_num_blocks=3).write_datasink(sink)
    assert sink.events[0] == "start"
    kind, rows, returns = sink.events[-1]
    assert kind == "complete" and rows == 12 and sum(returns) == 12
    written = pd.concat(pd.read_csv(tmp_path / f) for f in os.listdir(tmp_path))
    assert sorted(written["id"]) == list(range(12))


def test_a_failing_datasink_write_calls_on_write_failed(data_cluster, tmp_path):
    sink = CollectingSink(str(tmp_path), fail_on=5)
    with pytest.raises(Exception, match="cannot write row 5"):
        ray.data.range(12, override_num_blocks=3).write_datasink(sink)
    assert sink.events[-1][0] == "failed"


class LegacySource(Datasource):
    """Ray's older API: prepare_read(parallelism, **read_args)."""

    def prepare_read(self, parallelism, n):
        return [
            ReadTask(lambda i=i: [pd.DataFrame({"x": range(i * n, (i + 1) * n)})], BlockMetadata(n, None, None, None))
            for i in range(parallelism)
        ]


def test_read_datasource_hands_read_args_to_prepare_read(data_cluster):
    ds = ray.data.read_datasource(LegacySource(), override_num_blocks=4, n=3)
    assert sorted(r["x"] for r in ds.take_all()) == list(range(12))


@pytest.mark.skipif(AGAINST_RAY, reason="Ray ignores read arguments a datasource cannot take")
def test_read_args_without_prepare_read_are_refused_by_name(data_cluster):
    with pytest.raises(ValueError, match="flavour"):
        ray.data.read_datasource(SquaresDatasource(4), flavour="x")


def test_a_read_task_row_limit_cuts_its_blocks():
    blocks = [
        pd.DataFrame({"id": range(30)}),
        pa.table({"id": list(range(30, 60))}),
        pd.DataFrame({"id": range(60, 90)}),
    ]
    meta = BlockMetadata(num_rows=90, size_bytes=None, input_files=None, exec_stats=None)
    out = list(ReadTask(lambda: blocks, meta, per_task_row_limit=70)())
    assert [len(b) for b in out] == [30, 30, 10]
    assert list(out[2]["id"]) == list(range(60, 70))
    assert list(ReadTask(lambda: blocks, meta)()) == blocks
    with pytest.raises(ValueError, match="per_task_row_limit=-1"):
        ReadTask(lambda: blocks, meta, per_task_row_limit=-1)
