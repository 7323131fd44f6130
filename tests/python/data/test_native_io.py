"""The Data engine's native interface (`oxray._native.data_*`, `Data*`) against
pyarrow as the reference: listing, parquet footers, fragment reads, the
parallel stream, the csv/json/text/bytes readers, the writers, rebatching and
IPC, locally and on a real S3 API server (moto)."""

import gc
import json
import os
import stat

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from oxray import _native as native
from oxray_testutil import wait_until


def make_table(start: int, stop: int) -> pa.Table:
    ids = np.arange(start, stop, dtype=np.int64)
    return pa.table(
        {
            "id": ids,
            "x": (ids * 0.5).astype(np.float32),
            "name": [f"row{i}" for i in ids],
        }
    )


@pytest.fixture
def dataset(tmp_path):
    """Two parquet files (rows 0..1000 in 3 row groups, rows 1000..1500 in 1)
    under nested directories, plus the litter Spark and Hadoop leave."""
    root = tmp_path / "ds"
    (root / "sub").mkdir(parents=True)
    pq.write_table(make_table(0, 1000), root / "a.parquet", row_group_size=400)
    pq.write_table(make_table(1000, 1500), root / "sub" / "b.parquet")
    (root / "_SUCCESS").write_bytes(b"")
    (root / ".a.parquet.crc").write_bytes(b"crc")
    (root / "README.txt").write_text("notes")
    return root


def files_of(root) -> list[str]:
    return [str(root / "a.parquet"), str(root / "sub" / "b.parquet")]


# --- listing ---


def test_expand_paths_walks_directories_globs_and_keeps_named_files(dataset):
    files = files_of(dataset)
    found = native.data_expand_paths([str(dataset)], ["parquet"])
    assert found == [(f, os.path.getsize(f)) for f in files]
    everything = [uri for uri, _ in native.data_expand_paths([str(dataset)])]
    assert everything == [str(dataset / "README.txt"), *files], "hidden names are skipped, the rest sorted"
    assert [u for u, _ in native.data_expand_paths([f"{dataset}/**/*.parquet"])] == files
    named = [str(dataset / "_SUCCESS"), f"file://{files[1]}"]
    assert [u for u, _ in native.data_expand_paths(named, ["parquet"])] == [named[0], files[1]]


def test_expand_paths_errors_name_the_path(dataset):
    with pytest.raises(FileNotFoundError, match="nope"):
        native.data_expand_paths([str(dataset / "nope")])
    with pytest.raises(FileNotFoundError, match=r"\*\.json"):
        native.data_expand_paths([f"{dataset}/*.json"])
    (dataset / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="empty"):
        native.data_expand_paths([str(dataset / "empty")])
    with pytest.raises(ValueError, match="s3://"):
        native.data_expand_paths(["gs://bucket/key"])


# --- parquet ---


def test_inspect_matches_the_parquet_footers(dataset):
    files = files_of(dataset)
    schema, groups = native.data_parquet_inspect(files)
    assert isinstance(schema, pa.Schema)
    assert schema.remove_metadata() == make_table(0, 1).schema.remove_metadata()
    for path, file_groups in zip(files, groups, strict=True):
        meta = pq.ParquetFile(path).metadata
        expected = [(meta.row_group(i).num_rows, meta.row_group(i).total_byte_size) for i in range(meta.num_row_groups)]
        assert file_groups == expected
    assert [n for n, _ in groups[0]] == [400, 400, 200]


def test_read_parquet_pushes_down_columns_row_groups_and_limit(dataset):
    path = files_of(dataset)[0]
    batches = native.data_read_parquet(path, None, None, None, 128)
    assert all(isinstance(b, pa.RecordBatch) and b.num_rows <= 128 for b in batches)
    assert pa.Table.from_batches(batches).equals(pq.read_table(path))

    got = pa.Table.from_batches(native.data_read_parquet(path, [2, 0], ["name", "id"], 500, 4096))
    reference = pq.ParquetFile(path).read_row_groups([2, 0], columns=["name", "id"])
    assert got.column_names == ["name", "id"]
    assert got.equals(reference.select(["name", "id"]).slice(0, 500))
    assert native.data_read_parquet(path, None, ["id"], 0, 10) == []


def test_parquet_bad_inputs(dataset):
    path = files_of(dataset)[0]
    with pytest.raises(ValueError, match=r"unknown column \"nope\".*\"id\", \"x\", \"name\""):
        native.data_read_parquet(path, None, ["nope"], None, 10)
    with pytest.raises(ValueError, match="batch_size=0"):
        native.data_read_parquet(path, None, None, None, 0)
    with pytest.raises(ValueError, match="row_groups=7"):
        native.data_read_parquet(path, [7], None, None, 10)
    readme = str(dataset / "README.txt")
    with pytest.raises(ValueError, match=f"{readme} is not a parquet file"):
        native.data_parquet_inspect([path, readme])
    with pytest.raises(FileNotFoundError, match="gone.parquet"):
        native.data_read_parquet(str(dataset / "gone.parquet"), None, None, None, 10)
    other = dataset / "other.parquet"
    pq.write_table(make_table(0, 10).set_column(1, "x", pa.array(np.zeros(10))), other)
    with pytest.raises(ValueError, match=r"schemas differ between .*a\.parquet and .*other\.parquet.*`x: Float32`"):
        native.data_parquet_inspect([path, str(other)])


def test_stream_yields_fragments_in_order_with_a_global_limit(dataset):
    a, b = files_of(dataset)
    fragments = [(b, None), (a, [1]), (a, [0, 2])]
    reference = pa.concat_tables(
        [pq.read_table(b), pq.ParquetFile(a).read_row_group(1), pq.ParquetFile(a).read_row_groups([0, 2])]
    )
    stream = native.DataParquetStream(fragments, None, None, 100, 2, 1 << 30)
    assert pa.Table.from_batches(list(stream)).equals(reference)

    limited = native.DataParquetStream(fragments, ["id"], 777, 100, 3, 0)
    batches = list(limited)
    assert sum(b.num_rows for b in batches) == 777
    assert pa.Table.from_batches(batches).column("id").equals(reference.column("id").slice(0, 777))
    assert next(limited, None) is None


def test_stream_stays_in_budget_and_stops_when_dropped(tmp_path):
    paths = []
    for i in range(6):
        path = tmp_path / f"part-{i}.parquet"
        pq.write_table(make_table(i * 20_000, (i + 1) * 20_000), path, row_group_size=5_000)
        paths.append(str(path))
    budget = 256 * 1024  # well under the two fragments (~0.5 MB each) the window allows ahead
    gc.collect()  # iterators earlier tests dropped stop their prefetch threads now, not mid-count
    os_threads_before = len(os.listdir("/proc/self/task"))
    stream = native.DataParquetStream([(p, None) for p in paths], None, None, 1024, 2, budget)
    first = next(stream)
    assert first.num_rows == 1024
    # The decoders run ahead until the budget is reached, then wait for the consumer.
    filled = lambda s=stream: s.bytes_in_flight >= budget  # noqa: E731 - not a closure: `del stream` below frees it
    wait_until("the decoders to fill the budget", filled, timeout=60, interval=0.01)
    del filled
    assert stream.bytes_in_flight < budget + 4 * first.get_total_buffer_size()
    assert len(os.listdir("/proc/self/task")) == os_threads_before + 2, "two decoding threads"
    del stream
    gc.collect()  # dropping the stream stops and joins its Rust threads (a hang fails by timeout)
    assert len(os.listdir("/proc/self/task")) == os_threads_before
    with pytest.raises(ValueError, match="threads=0"):
        native.DataParquetStream([(paths[0], None)], None, None, 10, 0, 1)
    broken = native.DataParquetStream(
        [(paths[0], None), (str(tmp_path / "gone.parquet"), None)], None, None, 50_000, 2, 0
    )
    assert next(broken).num_rows == 20_000
    with pytest.raises(FileNotFoundError, match="gone.parquet"):
        next(broken)


# --- csv, json, text, bytes ---


def test_csv_matches_pyarrow(tmp_path):
    table = make_table(0, 300)
    path = tmp_path / "t.csv"
    pacsv.write_csv(table, path)
    got = pa.Table.from_batches(native.data_read_csv(str(path)))
    assert got.equals(pacsv.read_csv(path).cast(got.schema))
    assert got.column("id").to_pylist() == list(range(300))
    semi = tmp_path / "semi.csv.gz"
    import gzip

    semi.write_bytes(gzip.compress(b"a;b\n1;x\n2;y\n"))
    got = pa.Table.from_batches(native.data_read_csv(str(semi), ";", True, ["b"]))
    assert got.to_pydict() == {"b": ["x", "y"]}
    headless = pa.Table.from_batches(native.data_read_csv(str(semi), delimiter=";", has_header=False))
    reference = pacsv.read_csv(
        semi,
        read_options=pacsv.ReadOptions(autogenerate_column_names=True),
        parse_options=pacsv.ParseOptions(delimiter=";"),
    )
    assert headless.equals(reference)
    with pytest.raises(ValueError, match='unknown column "c"'):
        native.data_read_csv(str(semi), ";", True, ["c"])


def test_json_lines_and_arrays(tmp_path):
    rows = [{"a": i, "s": f"v{i}", "f": i / 4} for i in range(50)]
    lines = tmp_path / "rows.jsonl"
    lines.write_text("".join(json.dumps(r) + "\n" for r in rows))
    array = tmp_path / "rows.json"
    array.write_text(json.dumps(rows, indent=1))
    for path, mode in [(lines, None), (lines, True), (array, None), (array, False)]:
        got = pa.Table.from_batches(native.data_read_json(str(path), mode))
        assert got.to_pylist() == rows, (path, mode)
    with pytest.raises(ValueError, match="rows.jsonl"):
        native.data_read_json(str(lines), lines=False)


def test_text_and_bytes(tmp_path):
    path = tmp_path / "a.txt"
    content = "first\r\nsecond\n\n   \nlast"
    path.write_bytes(content.encode())
    got = pa.Table.from_batches(native.data_read_text(str(path)))
    assert got.column_names == ["text"]
    assert got.column("text").to_pylist() == content.splitlines()
    kept = pa.Table.from_batches(native.data_read_text(str(path), drop_empty_lines=True))
    assert kept.column("text").to_pylist() == ["first", "second", "last"]
    blob = bytes(range(256)) * 10
    (tmp_path / "b.bin").write_bytes(blob)
    assert native.data_read_bytes(str(tmp_path / "b.bin")) == blob
    with pytest.raises(ValueError, match="UTF-8"):
        native.data_read_text(str(tmp_path / "b.bin"))
    with pytest.raises(FileNotFoundError):
        native.data_read_bytes(str(tmp_path / "none.bin"))


# --- writers ---


def test_writers_match_pyarrow_and_leave_only_finished_files(tmp_path):
    table = make_table(0, 5000)
    chunked = pa.concat_tables([make_table(0, 2000), make_table(2000, 5000)])
    out = tmp_path / "out" / "deeper"
    uri = native.data_write_parquet(table.to_batches(max_chunksize=1000), str(out), "part-0.parquet")
    assert uri == str(out / "part-0.parquet")
    assert pq.read_table(uri).equals(table)
    assert pq.ParquetFile(uri).metadata.row_group(0).column(0).compression == "SNAPPY"
    zstd = native.data_write_parquet([chunked], str(out), "part-1.parquet", "zstd")
    assert pq.read_table(zstd).equals(table)
    assert pq.ParquetFile(zstd).metadata.row_group(0).column(0).compression == "ZSTD"
    no_rows = pa.RecordBatch.from_pylist([], schema=table.schema)
    empty = native.data_write_parquet([no_rows], str(out), "empty.parquet")
    assert pq.read_table(empty).schema.remove_metadata() == table.schema.remove_metadata()

    csv = native.data_write_csv(table.to_batches(), str(out), "part-0.csv")
    assert pacsv.read_csv(csv).cast(table.schema).equals(table)
    js = native.data_write_json(table.to_batches(), str(out), "part-0.json")
    with open(js) as f:
        assert [json.loads(line) for line in f] == table.to_pylist()
    with_nulls = pa.table({"a": [1, None], "n": pa.array([None, None], pa.null())})
    js_nulls = native.data_write_json(with_nulls.to_batches(), str(tmp_path), "nulls.json")
    with open(js_nulls) as f:
        assert [json.loads(line) for line in f] == with_nulls.to_pylist(), "nulls are written, as pandas does"
    raw = native.data_write_bytes(str(out), "blob.bin", b"\x00\x01\x02")
    assert open(raw, "rb").read() == b"\x00\x01\x02"

    assert sorted(os.listdir(out)) == [
        "blob.bin",
        "empty.parquet",
        "part-0.csv",
        "part-0.json",
        "part-0.parquet",
        "part-1.parquet",
    ]
    assert stat.S_IMODE(os.stat(uri).st_mode) & 0o644 == 0o644

    with pytest.raises(ValueError, match='compression="brotli"'):
        native.data_write_parquet(table.to_batches(), str(out), "x.parquet", "brotli")
    with pytest.raises(ValueError, match="batch 1"):
        native.data_write_parquet([table.to_batches()[0], table.select(["id"]).to_batches()[0]], str(out), "x.parquet")
    with pytest.raises(ValueError, match="filename"):
        native.data_write_csv(table.to_batches(), str(out), "../x.csv")
    assert "x.parquet" not in os.listdir(out) and not any(n.endswith(".tmp") for n in os.listdir(out))


# --- batching, concat, IPC ---


def drain(batcher) -> list:
    out = []
    while (batch := batcher.next_batch()) is not None:
        out.append(batch)
    return out


def test_batcher_cuts_exact_batches_like_slicing_the_table():
    table = make_table(0, 1000)
    pieces = [table.slice(0, 7), table.slice(7, 500), table.slice(507, 1), table.slice(508, 492)]
    for drop_last in (False, True):
        batcher = native.DataBatcher(128, drop_last=drop_last)
        out = []
        for piece in pieces:
            batcher.add(piece)  # tables are accepted as well as batches
            out += drain(batcher)
        assert all(b.num_rows == 128 for b in out)
        batcher.finish()
        out += drain(batcher)
        expected = 896 if drop_last else 1000
        assert pa.Table.from_batches(out).equals(table.slice(0, expected).combine_chunks())
    passthrough = native.DataBatcher(None)
    for piece in pieces:
        passthrough.add(piece.to_batches()[0])
    assert [b.num_rows for b in drain(passthrough)] == [7, 500, 1, 492]


def shuffled_ids(seed):
    batcher = native.DataBatcher(100, False, 300, seed)
    out = []
    for batch in make_table(0, 1000).to_batches(max_chunksize=90):
        batcher.add(batch)
        out += drain(batcher)
    batcher.finish()
    out += drain(batcher)
    assert [b.num_rows for b in out] == [100] * 10
    return pa.Table.from_batches(out).column("id").to_pylist()


def test_batcher_local_shuffle_is_seeded():
    first = shuffled_ids(3)
    assert first == shuffled_ids(3)
    assert first != shuffled_ids(4)
    assert sorted(first) == list(range(1000)) and first != list(range(1000))
    for bad in (0, -1):
        with pytest.raises(ValueError, match=f"batch_size={bad}"):
            native.DataBatcher(bad)
    with pytest.raises(ValueError, match="shuffle_buffer_size=0"):
        native.DataBatcher(10, shuffle_buffer_size=0)
    batcher = native.DataBatcher(10)
    batcher.add(make_table(0, 5).to_batches()[0])
    with pytest.raises(ValueError, match="`id: Int64`"):
        batcher.add(make_table(0, 5).select(["x", "id"]).to_batches()[0])


def test_concat_and_ipc_round_trip():
    batches = make_table(0, 1000).to_batches(max_chunksize=300)
    joined = native.data_concat_batches(batches)
    assert isinstance(joined, pa.RecordBatch)
    assert pa.Table.from_batches([joined]).equals(pa.Table.from_batches(batches).combine_chunks())
    with pytest.raises(ValueError, match="batch 1"):
        native.data_concat_batches([batches[0], batches[1].select(["id"])])
    data = native.data_encode_ipc(joined)
    assert isinstance(data, bytes)
    back = pa.ipc.open_stream(pa.py_buffer(data)).read_all()
    assert back.to_batches()[0].equals(joined)


# --- S3 on a real S3 API server ---


def test_s3_read_and_write_on_moto(moto_s3):
    table = make_table(0, 3000)
    base = "s3://oxray-test/data"
    first = native.data_write_parquet(table.slice(0, 1000).to_batches(), f"{base}/ds", "part-0.parquet")
    assert first == f"{base}/ds/part-0.parquet"
    native.data_write_parquet(table.slice(1000).to_batches(), f"{base}/ds/sub", "part-1.parquet", "zstd")
    native.data_write_bytes(f"{base}/ds", "_SUCCESS", b"")
    keys = sorted(o["Key"] for o in moto_s3.list_objects_v2(Bucket="oxray-test")["Contents"])
    assert keys == ["data/ds/_SUCCESS", "data/ds/part-0.parquet", "data/ds/sub/part-1.parquet"]

    found = native.data_expand_paths([f"{base}/ds"], ["parquet"])
    uris = [u for u, _ in found]
    assert uris == [f"{base}/ds/part-0.parquet", f"{base}/ds/sub/part-1.parquet"]
    sizes = {o["Key"]: o["Size"] for o in moto_s3.list_objects_v2(Bucket="oxray-test")["Contents"]}
    assert [s for _, s in found] == [sizes["data/ds/part-0.parquet"], sizes["data/ds/sub/part-1.parquet"]]
    assert [u for u, _ in native.data_expand_paths([f"{base}/ds/*.parquet"])] == uris[:1]
    assert [u for u, _ in native.data_expand_paths([f"{base}/ds/**/*.parquet"])] == uris
    assert [u for u, _ in native.data_expand_paths([uris[1]])] == uris[1:]

    schema, groups = native.data_parquet_inspect(uris)
    assert schema.remove_metadata() == table.schema.remove_metadata()
    assert [sum(n for n, _ in g) for g in groups] == [1000, 2000]
    part = pa.Table.from_batches(native.data_read_parquet(uris[1], None, ["name", "id"], 1500, 512))
    assert part.equals(table.slice(1000, 1500).select(["name", "id"]))
    streamed = pa.Table.from_batches(
        list(native.DataParquetStream([(u, None) for u in uris], None, None, 700, 2, 1 << 20))
    )
    assert streamed.equals(table)

    csv = native.data_write_csv(table.to_batches(), f"{base}/csv", "t.csv")
    assert pa.Table.from_batches(native.data_read_csv(csv)).cast(table.schema).equals(table)
    js = native.data_write_json(table.slice(0, 10).to_batches(), f"{base}/json", "t.json")
    assert pa.Table.from_batches(native.data_read_json(js)).to_pylist() == table.slice(0, 10).to_pylist()
    text = native.data_write_bytes(f"{base}/text", "t.txt", b"a\nb\n")
    assert pa.Table.from_batches(native.data_read_text(text)).column("text").to_pylist() == ["a", "b"]
    assert native.data_read_bytes(text) == b"a\nb\n"

    with pytest.raises(FileNotFoundError, match="s3://oxray-test/nothing-here"):
        native.data_expand_paths(["s3://oxray-test/nothing-here"])
    with pytest.raises(FileNotFoundError, match="missing.parquet"):
        native.data_read_parquet(f"{base}/missing.parquet", None, None, None, 10)
    with pytest.raises(ValueError, match="is not a parquet file"):
        native.data_parquet_inspect([text])
