"""read_json and read_csv take pyarrow's reader options as Ray does; JSON Lines of lists or
mixed types read as Ray reads them; the tensor-layout settings of DataContext are enforced."""

import gzip
import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq
import pytest
from data_testutil import AGAINST_RAY, ray

pytestmark = pytest.mark.timeout(120)

FRAME = pd.DataFrame({"one": [1, 2, 3], "two": ["a", "b", "c"]})


@pytest.fixture
def json_lines(tmp_path):
    path = tmp_path / "rows.json"
    FRAME.to_json(path, orient="records", lines=True)
    return str(path)


def write_lines(path, records):
    with open(path, "w") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")
    return str(path)


@pytest.mark.parametrize("block_size", [2**30, 1, -1])
def test_read_json_read_options_any_block_size_reads_the_file(data_cluster, json_lines, block_size):
    """A block smaller than a record is grown until the record fits (block_size=1)."""
    ds = ray.data.read_json(json_lines, read_options=pajson.ReadOptions(use_threads=False, block_size=block_size))
    assert FRAME.equals(ds.to_pandas())
    assert ds.schema().names == ["one", "two"]


def test_read_json_zero_block_size_fails_in_both_readers(data_cluster, json_lines):
    with pytest.raises(json.JSONDecodeError, match="Extra data"):
        ray.data.read_json(json_lines, read_options=pajson.ReadOptions(block_size=0)).materialize()


def test_read_json_parse_options_explicit_schema_selects_columns(data_cluster, json_lines):
    parse_options = pajson.ParseOptions(
        explicit_schema=pa.schema([("two", pa.string())]), unexpected_field_behavior="ignore"
    )
    ds = ray.data.read_json(json_lines, parse_options=parse_options)
    assert ds.take_all() == [{"two": "a"}, {"two": "b"}, {"two": "c"}]
    with pytest.raises(TypeError, match="pyarrow._json.ParseOptions"):
        ray.data.read_json(json_lines, parse_options={"explicit_schema": None})


def test_read_json_lines_of_lists_and_mixed_types(data_cluster, tmp_path):
    lists = write_lines(tmp_path / "lists.jsonl", [["ray", "rocks", "hello"], ["oh", "no"]])
    assert ray.data.read_json(lists, lines=True).take_all() == [
        {"0": "ray", "1": "rocks", "2": "hello"},
        {"0": "oh", "1": "no", "2": None},
    ]
    mixed = [{"a": 1, "b": {"c": 2}}, {"a": 1, "b": {"c": {"hello": "world"}}}]
    assert ray.data.read_json(write_lines(tmp_path / "mixed.jsonl", mixed), lines=True).take_all() == mixed


def test_read_json_lines_refuses_pyarrow_options(data_cluster, json_lines):
    with pytest.raises(ValueError, match="`arrow_json_args` is not supported when `lines=True`"):
        ray.data.read_json(json_lines, lines=True, read_options=pajson.ReadOptions())


def test_read_json_open_stream_compression(data_cluster, tmp_path):
    """`compression` applies to every file, whatever its name; empty files add no rows."""
    named = tmp_path / "a.json.gz"
    with gzip.open(named, "wt") as f:
        f.write('{"x": 1}\n')
    with gzip.open(tmp_path / "empty.json.gz", "wt"):
        pass
    unnamed = tmp_path / "b.json"
    unnamed.write_bytes(gzip.compress(b'{"x": 2}\n'))
    ds = ray.data.read_json(str(tmp_path), arrow_open_stream_args={"compression": "gzip"})
    assert sorted(r["x"] for r in ds.take_all()) == [1, 2]
    with pytest.raises(ValueError, match="buffer_size"):
        ray.data.read_json(str(tmp_path), arrow_open_stream_args={"buffer_size": 1024})
    with pytest.raises(ValueError, match="'lzo'"):
        ray.data.read_json(str(tmp_path), arrow_open_stream_args={"compression": "lzo"})


def test_read_csv_read_and_convert_options(data_cluster, tmp_path):
    headless = tmp_path / "headless.csv"
    FRAME.to_csv(headless, index=False, header=False)
    ds = ray.data.read_csv(str(headless), read_options=pacsv.ReadOptions(column_names=["one", "two"]))
    assert FRAME.equals(ds.to_pandas())

    scientific = tmp_path / "scientific.csv"
    pd.DataFrame({"one": [1, 2, 3e1], "two": ["a", "b", "c"]}).to_csv(scientific, index=False)
    as_float = pacsv.ConvertOptions(column_types={"one": "float64", "two": "string"})
    assert ray.data.read_csv(str(scientific), convert_options=as_float).to_pandas()["one"].tolist() == [1.0, 2.0, 30.0]
    as_int = pacsv.ConvertOptions(column_types={"one": "int64", "two": "string"})
    with pytest.raises(ValueError, match="Failed to read CSV file"):
        ray.data.read_csv(str(scientific), convert_options=as_int).materialize()


def test_read_csv_parse_options_beyond_the_delimiter_are_enforced(data_cluster, tmp_path):
    path = tmp_path / "quoted.csv"
    path.write_text("a;b\n'x;y';1\n")
    quoted = ray.data.read_csv(str(path), parse_options=pacsv.ParseOptions(delimiter=";", quote_char="'"))
    assert quoted.take_all() == [{"a": "x;y", "b": 1}]


@pytest.mark.skipif(AGAINST_RAY, reason="oxray's message")
def test_read_csv_of_a_non_csv_file_names_it(data_cluster, tmp_path):
    pq.write_table(pa.Table.from_pandas(FRAME), tmp_path / "t.parquet")
    FRAME.to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(ValueError, match="Failed to read CSV file: .*t.parquet"):
        ray.data.read_csv(str(tmp_path)).materialize()
    assert len(ray.data.read_csv(str(tmp_path), file_extensions=["csv"]).take_all()) == 3


@pytest.mark.timeout(300)  # importing torch is slow on a loaded host
def test_from_torch_iterable_dataset(data_cluster):
    torch = pytest.importorskip("torch")

    class Numbers(torch.utils.data.IterableDataset):
        def __len__(self):
            return 2

        def __iter__(self):
            return iter([5, 6])

    assert ray.data.from_torch(Numbers()).take_all() == [{"item": 5}, {"item": 6}]


@pytest.mark.skipif(AGAINST_RAY, reason="oxray's tensor layout")
def test_fixed_shape_tensor_format_is_the_canonical_type(data_cluster, tmp_path):
    ctx = ray.data.DataContext.get_current()
    tensor_type = ctx.arrow_fixed_shape_tensor_format.to_type()
    np.save(tmp_path / "x.npy", np.arange(4).reshape(4, 1))
    schema = ray.data.read_numpy(str(tmp_path)).schema()
    assert schema.types == [tensor_type((1,), pa.int64())]
    v2 = type(ctx.arrow_fixed_shape_tensor_format).V2
    with pytest.raises(ValueError, match="arrow_fixed_shape_tensor_format"):
        ctx.arrow_fixed_shape_tensor_format = v2
    ctx.arrow_fixed_shape_tensor_format = "native"
    ctx.enable_tensor_extension_casting = True
    with pytest.raises(ValueError, match="enable_tensor_extension_casting"):
        ctx.enable_tensor_extension_casting = False


def test_codecs_the_engine_does_not_decode_are_read_through_pyarrow(data_cluster, tmp_path):
    if not pa.Codec.is_available("zstd") or not pa.Codec.is_available("bz2"):
        pytest.skip("pyarrow built without zstd or bz2")
    with pa.CompressedOutputStream(str(tmp_path / "rows.jsonl.zst"), "zstd") as out:
        out.write(b'{"x": 1}\n{"x": 2}\n')
    for lines in (None, True):
        assert ray.data.read_json(str(tmp_path / "rows.jsonl.zst"), lines=lines).take_all() == [{"x": 1}, {"x": 2}]
    with pa.CompressedOutputStream(str(tmp_path / "rows.csv"), "bz2") as out:
        out.write(b"a,b\n1,2\n")
    ds = ray.data.read_csv(str(tmp_path / "rows.csv"), arrow_open_stream_args={"compression": "bz2"})
    assert ds.take_all() == [{"a": 1, "b": 2}]


def test_brotli_json_is_found_by_its_suffix(data_cluster, tmp_path):
    """pyarrow does not detect `.br`; the reader maps the suffix itself, as Ray does."""
    import pyarrow as pa

    out = pa.output_stream(str(tmp_path / "rows.jsonl.br"), compression="brotli")
    out.write(b'{"x": 1}\n{"x": 2}\n')
    out.close()
    assert sorted(r["x"] for r in ray.data.read_json(str(tmp_path)).take_all()) == [1, 2]
