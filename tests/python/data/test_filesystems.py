"""`filesystem=`: reads through a user's pyarrow or fsspec filesystem (a `SubTreeFileSystem`, an
fsspec `DirFileSystem`), in the read tasks' worker processes as well as the driver, and every
format Ray reads that way; filesystems the engine reads itself (local) still go to the engine."""

import gzip
import json

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from data_testutil import ray


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "bucket"
    (root / "pq" / "year=2024").mkdir(parents=True)
    (root / "pq" / "year=2025").mkdir(parents=True)
    pq.write_table(pa.table({"x": [1, 2, 3]}), str(root / "pq" / "year=2024" / "a.parquet"))
    pq.write_table(pa.table({"x": [4, 5]}), str(root / "pq" / "year=2025" / "b.parquet"))
    (root / "pq" / "_SUCCESS").write_text("")  # hidden: skipped, as the engine skips it
    (root / "csv").mkdir()
    (root / "csv" / "a.csv").write_text("a,b\n1,x\n2,y\n")
    (root / "json").mkdir()
    (root / "json" / "a.jsonl").write_text("".join(json.dumps({"k": i}) + "\n" for i in range(3)))
    with gzip.open(root / "json" / "b.jsonl.gz", "wt") as f:
        f.write(json.dumps({"k": 3}) + "\n")
    (root / "text.txt").write_text("one\r\ntwo\n\nthree\n")
    np.save(root / "arr.npy", np.arange(6).reshape(3, 2))
    (root / "blob.bin").write_bytes(b"\x00\x01")
    return root


def filesystems(root):
    return {
        "fsspec": fsspec.filesystem("dir", path=str(root), fs=fsspec.filesystem("file")),
        "pyarrow": pafs.SubTreeFileSystem(str(root), pafs.LocalFileSystem()),
    }


@pytest.mark.parametrize("kind", ["fsspec", "pyarrow"])
def test_every_format_reads_through_the_filesystem(data_cluster, tree, kind):
    fs = filesystems(tree)[kind]
    ds = ray.data.read_parquet("pq", filesystem=fs)
    # Hive partition values are strings, as in Ray.
    assert sorted((r["x"], r["year"]) for r in ds.take_all()) == [
        (1, "2024"),
        (2, "2024"),
        (3, "2024"),
        (4, "2025"),
        (5, "2025"),
    ]
    assert ray.data.read_parquet("pq", filesystem=fs, columns=["x"]).sum("x") == 15  # tasks: the fs travels
    assert sorted(ray.data.read_csv("csv/a.csv", filesystem=fs).to_pandas()["a"]) == [1, 2]
    assert sorted(r["k"] for r in ray.data.read_json("json", filesystem=fs).take_all()) == [0, 1, 2, 3]
    assert [r["text"] for r in ray.data.read_text("text.txt", filesystem=fs).take_all()] == ["one", "two", "", "three"]
    (row,) = ray.data.read_numpy("arr.npy", filesystem=fs).take(1)
    assert list(row["data"]) == [0, 1]
    (blob,) = ray.data.read_binary_files("blob.bin", filesystem=fs, include_paths=True).take_all()
    assert blob["bytes"] == b"\x00\x01" and blob["path"].endswith("blob.bin")


def test_a_missing_path_and_a_wrong_filesystem_name_themselves(data_cluster, tree):
    fs = filesystems(tree)["fsspec"]
    with pytest.raises(FileNotFoundError, match="nope"):
        ray.data.read_parquet("nope", filesystem=fs)
    with pytest.raises(TypeError, match="expected a pyarrow.fs.FileSystem or an fsspec.AbstractFileSystem"):
        ray.data.read_csv("csv", filesystem=object())


def test_writing_through_another_filesystem_is_refused_by_name(data_cluster, tree):
    fs = filesystems(tree)["pyarrow"]
    with pytest.raises(NotImplementedError, match="write_parquet\\(filesystem=SubTreeFileSystem\\)"):
        ray.data.range(3).write_parquet("out", filesystem=fs)


def test_a_local_filesystem_is_still_read_by_the_engine(data_cluster, tree, monkeypatch):
    from oxray.data._internal import file_io

    def not_through_python(*args, **kwargs):
        raise AssertionError("a LocalFileSystem read went through pyarrow")

    monkeypatch.setattr(file_io, "expand", not_through_python)
    ds = ray.data.read_parquet(str(tree / "pq"), filesystem=pafs.LocalFileSystem())
    assert ds.count() == 5
