"""`Dataset.filter` as Ray's: exactly one of `fn` / `expr`, its errors, string expressions
(dotted column names, Ray's function forms, the deprecation warning, an unknown column failing
when the dataset runs), predicate expressions on Arrow and pandas blocks; and
`read_binary_files`: its schema and count known without reading, and each file's bytes
decompressed with the codec named in `arrow_open_stream_args` or by its suffix (snappy too)."""

import gzip
import importlib.util
import io
import os
import warnings

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from data_testutil import AGAINST_RAY, ray

if AGAINST_RAY:
    from ray.data.expressions import col
else:
    from oxray.data.expressions import col

IRIS = {
    "sepal.length": [4.8, 5.1, 5.7, 6.3, 7.0],
    "sepal.width": [3.0, 3.3, 3.5, 3.2, 2.8],
}


def _iris_parquet(tmp_path) -> str:
    path = str(tmp_path / "iris.parquet")
    pq.write_table(pa.table(IRIS), path)
    return path


def _string_filter(ds, text: str):
    """`ds.filter(expr=text)` without the deprecation warning string expressions give."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return ds.filter(expr=text)


def test_filter_takes_exactly_one_of_fn_and_expr(data_cluster):
    ds = ray.data.range(4)
    with pytest.raises(ValueError, match="Exactly one of 'fn' or 'expr' must be provided"):
        ds.filter(fn=lambda r: True, expr="id > 1")
    with pytest.raises(ValueError, match="Exactly one of 'fn' or 'expr' must be provided"):
        ds.filter()
    with pytest.raises(ValueError, match="fn must be a UserDefinedFunction, but got str instead"):
        ds.filter(fn="id > 1")
    with pytest.raises(ValueError, match="when 'expr' is used, 'fn_args/fn_kwargs'"):
        ds.filter(expr=col("id") > 1, fn_args=[1])


def test_string_expressions_warn_that_they_are_deprecated(data_cluster):
    ds = ray.data.range(4)
    with pytest.warns(DeprecationWarning, match="String expressions are deprecated"):
        filtered = ds.filter(expr="id >= 2")
    assert sorted(r["id"] for r in filtered.take_all()) == [2, 3]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        assert ds.filter(expr=col("id") >= 2).count() == 2  # a predicate expression does not warn


def test_string_expression_reads_dotted_names_as_one_column(data_cluster, tmp_path):
    ds = ray.data.read_parquet(_iris_parquet(tmp_path))
    by_expr = _string_filter(ds, "sepal.length > 5.0").to_pandas()
    by_fn = ds.filter(lambda r: r["sepal.length"] > 5.0).to_pandas()
    assert sorted(by_expr["sepal.length"]) == sorted(by_fn["sepal.length"]) == [5.1, 5.7, 6.3, 7.0]
    both = _string_filter(ds, "sepal.length > 5.0 and sepal.width >= 3.3").to_pandas()
    assert sorted(both["sepal.length"]) == [5.1, 5.7]
    nested = ray.data.from_items([{"a.b.c": i} for i in range(5)])
    assert sorted(r["a.b.c"] for r in _string_filter(nested, "a.b.c in [1, 3]").take_all()) == [1, 3]


def test_string_expression_with_bad_syntax_names_it(data_cluster):
    ds = ray.data.range(3)
    with pytest.raises(ValueError, match="Invalid syntax in the expression: fake_news super fake"):
        _string_filter(ds, "fake_news super fake")


def test_unknown_column_fails_when_the_dataset_runs(data_cluster, tmp_path):
    # As Ray: building the filter succeeds even where the schema is known (parquet's footer).
    filtered = _string_filter(ray.data.read_parquet(_iris_parquet(tmp_path)), "sepal_length_123 > 1")
    with pytest.raises((ray.exceptions.RayTaskError, RuntimeError, ValueError), match="sepal_length_123"):
        filtered.to_pandas()


@pytest.mark.skipif(AGAINST_RAY, reason="Ray 2.60's string parser lacks some of these functions")
def test_string_expression_functions(data_cluster):
    rows = [{"v": None, "f": 1.0}, {"v": 1, "f": float("nan")}, {"v": 2, "f": 2.0}, {"v": None, "f": 3.0}]
    ds = ray.data.from_items([dict(r, i=i) for i, r in enumerate(rows)])

    def kept(text):
        return sorted(r["i"] for r in _string_filter(ds, text).take_all())

    assert kept("is_null(v)") == [0, 3]
    assert kept("is_not_null(v)") == kept("is_valid(v)") == [1, 2]
    assert kept("is_nan(f)") == [1]
    assert kept("is_in(i, [0, 2])") == [0, 2]
    assert kept("v.is_null()") == [0, 3]  # the method form still works
    with pytest.raises(ValueError, match="is_in\\(\\) expects exactly 2 arguments"):
        _string_filter(ds, "is_in(i)")
    with pytest.raises(ValueError, match="len\\(i\\)"):
        _string_filter(ds, "len(i) > 1")


@pytest.mark.parametrize("blocks", ["arrow", "pandas"])
def test_predicate_expressions_on_arrow_and_pandas_blocks(data_cluster, blocks):
    rows = [
        {"score": 45, "grade": "F", "active": True, "name": "a"},
        {"score": 55, "grade": "D", "active": True, "name": None},
        {"score": 75, "grade": "B", "active": False, "name": "c"},
        {"score": 85, "grade": "A", "active": True, "name": "d"},
    ]
    ds = ray.data.from_items(rows) if blocks == "arrow" else ray.data.from_pandas([pd.DataFrame(rows)])

    def scores(expr):
        return sorted(r["score"] for r in ds.filter(expr=expr).take_all())

    assert scores((col("score") >= 50) & (col("grade") != "F") & col("active")) == [55, 85]
    assert scores((col("grade") == "A") | (col("score") < 50)) == [45, 85]
    assert scores(~(col("grade") == "B")) == [45, 55, 85]
    assert scores(col("grade").is_in(["A", "B"])) == [75, 85]
    assert scores(col("grade").not_in(["A", "B"])) == [45, 55]
    assert scores(col("name").is_null()) == [55]
    assert scores(col("name").is_not_null() & (col("name") != "c")) == [45, 85]


def _write(path: str, data: bytes) -> str:
    with open(path, "wb") as f:
        f.write(data)
    return path


def test_binary_read_knows_its_schema_and_count_without_reading(data_cluster, tmp_path):
    paths = [_write(str(tmp_path / f"f{i}.bin"), bytes([i]) * (i + 1)) for i in range(4)]
    ds = ray.data.read_binary_files(paths)
    assert ds.count() == 4
    assert ds.schema().names == ["bytes"]
    assert "bytes" in str(ds)
    assert sorted(r["bytes"] for r in ds.take_all()) == [bytes([i]) * (i + 1) for i in range(4)]
    with_paths = ray.data.read_binary_files(paths, include_paths=True)
    assert with_paths.schema().names == ["bytes", "path"]
    assert sorted(os.path.basename(r["path"]) for r in with_paths.take_all()) == [f"f{i}.bin" for i in range(4)]


def test_binary_read_decompresses_by_suffix_or_named_codec(data_cluster, tmp_path):
    payload = b"hello, world"
    by_suffix = tmp_path / "suffix"
    by_suffix.mkdir()
    _write(str(by_suffix / "file.gz"), gzip.compress(payload))
    assert [r["bytes"] for r in ray.data.read_binary_files(str(by_suffix)).take_all()] == [payload]
    named = tmp_path / "named"
    named.mkdir()
    _write(str(named / "file"), gzip.compress(payload))
    ds = ray.data.read_binary_files(str(named), arrow_open_stream_args={"compression": "gzip"})
    assert [r["bytes"] for r in ds.take_all()] == [payload]
    with pytest.raises(ValueError, match="buffer_size"):
        ray.data.read_binary_files(str(named), arrow_open_stream_args={"buffer_size": 10})


def test_binary_read_decompresses_snappy(data_cluster, tmp_path):
    snappy = pytest.importorskip("snappy")
    payload = b"hello, world"
    compressed = io.BytesIO()
    snappy.stream_compress(io.BytesIO(payload), compressed)
    inferred = tmp_path / "inferred"
    inferred.mkdir()
    _write(str(inferred / "file.snappy"), compressed.getvalue())
    assert [r["bytes"] for r in ray.data.read_binary_files(str(inferred)).take_all()] == [payload]
    named = tmp_path / "named"
    named.mkdir()
    _write(str(named / "file"), compressed.getvalue())
    ds = ray.data.read_binary_files(str(named), arrow_open_stream_args={"compression": "snappy"})
    assert [r["bytes"] for r in ds.take_all()] == [payload]


@pytest.mark.skipif(AGAINST_RAY, reason="checks oxray's error message")
@pytest.mark.skipif(importlib.util.find_spec("snappy") is not None, reason="python-snappy is installed")
def test_snappy_without_python_snappy_names_the_package(data_cluster, tmp_path):
    path = _write(str(tmp_path / "file.snappy"), b"\xff\x06\x00\x00sNaPpY")
    with pytest.raises(ImportError, match="python-snappy"):
        ray.data.read_binary_files(path).take_all()
