"""Ray's parquet options: `read_parquet(include_row_hash, filter, batch_size, file_extensions,
shuffle, partitioning, partition_filter)`, files whose schemas differ, `override_num_blocks`
above the number of row groups, and `write_parquet`'s pyarrow options, save modes, filename
templates and validation messages."""

import hashlib
import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pds
import pyarrow.parquet as pq
import pytest
from data_testutil import AGAINST_RAY, ray

if AGAINST_RAY:
    from ray.data.datasource.filename_provider import FilenameProvider
    from ray.data.datasource.partitioning import Partitioning, PathPartitionFilter
else:
    from oxray.data.datasource.filename_provider import FilenameProvider
    from oxray.data.datasource.partitioning import Partitioning, PathPartitionFilter


def _splitmix_hashes(path: str, count: int) -> list:
    """Ray's row hash, computed independently with Python integers."""
    mask = (1 << 64) - 1
    seed = int.from_bytes(hashlib.md5(path.encode()).digest()[:8], "little")
    out = []
    for row in range(count):
        z = (seed + row) & mask
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        out.append(z ^ (z >> 31))
    return out


def test_row_hash_is_rays_value_and_replaces_a_file_column(data_cluster, tmp_path):
    path = str(tmp_path / "a.parquet")
    pq.write_table(pa.table({"val": [1, 2, 3], "row_hash": [100, 200, 300]}), path)
    ds = ray.data.read_parquet(path, include_row_hash=True)
    assert ds.schema().types[ds.schema().names.index("row_hash")] == pa.uint64()
    assert [r["row_hash"] for r in ds.take_all()] == _splitmix_hashes(path, 3)
    projected = ray.data.read_parquet(path, columns=["val"], include_row_hash=True, include_paths=True)
    assert projected.schema().names == ["val", "path", "row_hash"]
    assert [r["row_hash"] for r in projected.take_all()] == _splitmix_hashes(path, 3)


def test_row_hash_counts_rows_from_the_start_of_the_file_across_fragments(data_cluster, tmp_path):
    path = str(tmp_path / "groups.parquet")
    pq.write_table(pa.table({"x": list(range(40))}), path, row_group_size=10)
    ds = ray.data.read_parquet(path, include_row_hash=True, override_num_blocks=4)
    rows = sorted(ds.take_all(), key=lambda r: r["x"])
    assert [r["row_hash"] for r in rows] == _splitmix_hashes(path, 40)


def test_filter_reads_only_matching_rows_and_counts_them(data_cluster, tmp_path):
    df = pd.DataFrame({"one": [1, 1, 1, 3, 3, 3], "two": ["a", "a", "b", "b", "c", "c"]})
    pq.write_to_dataset(pa.Table.from_pandas(df), root_path=str(tmp_path), partition_cols=["one"])
    for blocks in (1, 2):
        ds = ray.data.read_parquet(str(tmp_path), override_num_blocks=blocks, filter=pds.field("two") == "a")
        assert sorted([r["one"], r["two"]] for r in ds.take_all()) == [["1", "a"], ["1", "a"]]
        assert ds.count() == 2
    # A filter on a partition column, and a limit after the filter.
    by_partition = ray.data.read_parquet(str(tmp_path), filter=pds.field("one") == "3")
    assert sorted(r["two"] for r in by_partition.take_all()) == ["b", "c", "c"]
    assert len(by_partition.limit(1).take_all()) == 1
    with pytest.raises(TypeError, match="filter"):
        ray.data.read_parquet(str(tmp_path), filter="two == 'a'")


def test_file_extensions_and_batch_size(data_cluster, tmp_path):
    pq.write_table(pa.table({"food": ["spam", "ham", "eggs"]}), tmp_path / "table.parquet")
    (tmp_path / "notes").write_text("not parquet")
    assert ray.data.read_parquet(tmp_path, file_extensions=["parquet"]).count() == 3
    small = ray.data.read_parquet(tmp_path / "table.parquet", batch_size=1)
    assert sorted(r["food"] for r in small.take_all()) == ["eggs", "ham", "spam"]
    with pytest.raises(ValueError, match="batch_size"):
        ray.data.read_parquet(tmp_path, batch_size=0)


def test_file_shuffle_seeds_per_execution(preserve_order, tmp_path):
    paths = []
    for i in range(8):
        paths.append(str(tmp_path / f"f{i}.parquet"))
        pq.write_table(pa.table({"c": list(range(10 * i, 10 * i + 10))}), paths[-1])
    FileShuffleConfig = ray.data.FileShuffleConfig

    def firsts(ds):
        return [ds.to_pandas()["c"].tolist()[::10] for _ in range(4)]

    fixed = FileShuffleConfig(seed=42, reseed_after_execution=False)
    a, b = firsts(ray.data.read_parquet(paths, shuffle=fixed)), firsts(ray.data.read_parquet(paths, shuffle=fixed))
    assert a == b and all(order == a[0] for order in a)
    assert sorted(a[0]) == [10 * i for i in range(8)]
    reseeded = FileShuffleConfig(seed=42)
    a, b = (
        firsts(ray.data.read_parquet(paths, shuffle=reseeded)),
        firsts(ray.data.read_parquet(paths, shuffle=reseeded)),
    )
    assert a == b and len({tuple(order) for order in a}) == 4
    assert ray.data.read_parquet(paths, shuffle="files").count() == 80
    for bad in (True, "file"):
        with pytest.raises(ValueError, match="Invalid value for 'shuffle'"):
            ray.data.read_parquet(paths, shuffle=bad)


def test_files_with_different_schemas_are_unified(data_cluster, tmp_path):
    pq.write_table(pa.table({"data": pa.nulls(3)}), tmp_path / "1.parquet")
    pq.write_table(pa.table({"data": ["spam", "ham"], "extra": [1, 2]}), tmp_path / "2.parquet")
    ds = ray.data.read_parquet(tmp_path)
    assert ds.schema().names == ["data", "extra"]
    rows = sorted(ds.take_all(), key=lambda r: r["data"] or "")
    assert [r["data"] for r in rows] == [None, None, None, "ham", "spam"]
    assert [r["extra"] for r in rows] == [None, None, None, 2, 1]

    ragged = tmp_path / "ragged"

    def with_tensor(row):
        side = (row["id"] + 1) * 10
        row["data"] = np.full((side, side), row["id"], dtype=np.int8)
        return row

    ray.data.range(3).map(with_tensor).repartition(3).write_parquet(str(ragged))
    rows = sorted(ray.data.read_parquet(str(ragged), override_num_blocks=1).take_all(), key=lambda r: r["id"])
    assert [r["data"].shape for r in rows] == [(10, 10), (20, 20), (30, 30)]


def test_override_num_blocks_splits_a_single_row_group(data_cluster, tmp_path):
    path = str(tmp_path / "one_group.parquet")
    pd.DataFrame({"v": range(1001)}).to_parquet(path)
    for blocks in (2, 3):
        sizes = (
            ray.data.read_parquet(path, override_num_blocks=blocks)
            .map_batches(lambda b: pd.DataFrame({"n": [len(b)]}), batch_size=None, batch_format="pandas")
            .to_pandas()["n"]
            .tolist()
        )
        assert sorted(sizes) == sorted([1001 // blocks + (1 if i < 1001 % blocks else 0) for i in range(blocks)])


def test_include_paths_survives_a_projection(data_cluster, tmp_path):
    path = str(tmp_path / "p.parquet")
    pq.write_table(pa.table({"animals": ["cat", "dog"], "id": [1, 2]}), path)
    ds = ray.data.read_parquet(path, columns=["id"], include_paths=True)
    assert ds.schema().names == ["id", "path"]
    assert {r["path"] for r in ds.take_all()} == {path}


def test_explicit_partitioning_and_partition_filter(data_cluster, tmp_path):
    df = pd.DataFrame({"one": [1, 1, 3], "two": ["a", "b", "c"]})
    pq.write_to_dataset(pa.Table.from_pandas(df), root_path=str(tmp_path), partition_cols=["one"])
    typed = ray.data.read_parquet(str(tmp_path), partitioning=Partitioning("hive", field_types={"one": int}))
    assert typed.schema().types[typed.schema().names.index("one")] == pa.int64()
    assert sorted((r["one"], r["two"]) for r in typed.take_all()) == [(1, "a"), (1, "b"), (3, "c")]
    assert "one" not in ray.data.read_parquet(str(tmp_path), partitioning=None).schema().names
    only_three = PathPartitionFilter.of(lambda values: values.get("one") == "3")
    assert [r["two"] for r in ray.data.read_parquet(str(tmp_path), partition_filter=only_three).take_all()] == ["c"]


def test_write_parquet_pyarrow_options(data_cluster, tmp_path):
    ray.data.range(1000).repartition(1).write_parquet(str(tmp_path / "a"), row_group_size=500)
    (name,) = os.listdir(tmp_path / "a")
    assert pq.ParquetFile(tmp_path / "a" / name).num_row_groups == 2
    ray.data.range(1000).repartition(1).write_parquet(
        str(tmp_path / "b"), arrow_parquet_args_fn=lambda: {"row_group_size": 100}, row_group_size=500
    )
    (name,) = os.listdir(tmp_path / "b")
    assert pq.ParquetFile(tmp_path / "b" / name).num_row_groups == 10
    schema = pa.schema({"id": pa.float32()})
    ray.data.range(1).write_parquet(str(tmp_path / "c"), schema=schema)
    assert pq.read_table(tmp_path / "c").schema == schema
    with pytest.raises(ValueError, match="no_such_option"):
        ray.data.range(1).write_parquet(str(tmp_path / "d"), no_such_option=1)


def test_write_save_modes_and_empty_dataset(data_cluster, tmp_path):
    table = pa.table({"one": [1]})
    ds = ray.data.from_arrow(table)
    existing = tmp_path / "existing"
    existing.mkdir()
    ds.write_parquet(str(existing), mode="ignore")
    assert os.listdir(existing) == []
    with pytest.raises(ValueError, match="already exists"):
        ds.write_parquet(str(existing), mode="error")
    existing.rmdir()
    ds.write_parquet(str(existing), mode="error")
    assert pq.read_table(existing).equals(table)
    empty = tmp_path / "empty"
    ray.data.from_blocks([pd.DataFrame({})]).write_parquet(str(empty))
    assert not empty.exists()


def test_write_rows_per_file_validation(data_cluster, tmp_path):
    for bad in (-1, 0):
        with pytest.raises(ValueError, match="max_rows_per_file must be a positive integer"):
            ray.data.range(10).write_parquet(str(tmp_path), max_rows_per_file=bad)
    with pytest.raises(ValueError, match=r"min_rows_per_file \(20\) cannot be greater than max_rows_per_file \(10\)"):
        ray.data.range(10).write_parquet(str(tmp_path), min_rows_per_file=20, max_rows_per_file=10)


class _Template(FilenameProvider):
    def __init__(self, template):
        self.template = template

    def get_filename_for_task(self, write_uuid, task_index):
        return self.template.format(write_uuid=write_uuid, i="{i}")


@pytest.mark.parametrize(
    "template,pattern",
    [
        ("f_{write_uuid}", r"f_[0-9a-f]{32}-0\.parquet"),
        ("f_{write_uuid}.parquet", r"f_[0-9a-f]{32}-0\.parquet"),
        ("f_{write_uuid}-{i}", r"f_[0-9a-f]{32}-0\.parquet"),
    ],
)
def test_filename_provider_templates(data_cluster, tmp_path, template, pattern):
    import re

    ray.data.range(10).repartition(1).write_parquet(str(tmp_path), filename_provider=_Template(template))
    (name,) = os.listdir(tmp_path)
    assert re.fullmatch(pattern, name), name
    assert ray.data.read_parquet(str(tmp_path)).count() == 10


def test_filename_without_the_write_id_is_refused_when_appending(data_cluster, tmp_path):
    with pytest.raises(ValueError, match="Write UUID.*missing from filename template"):
        ray.data.range(10).repartition(1).write_parquet(str(tmp_path), filename_provider=_Template("fixed"))
    ray.data.range(10).repartition(1).write_parquet(
        str(tmp_path), filename_provider=_Template("fixed"), mode="overwrite"
    )
    assert os.listdir(tmp_path) == ["fixed-0.parquet"]
