"""A csv or JSON Lines file bigger than `DataContext.target_max_block_size` is read in blocks:
several read tasks, each parsing the whole lines that start in its byte range, so no task holds
the whole file (Ray streams such files in blocks). Every row arrives once."""

import json

import pytest
from data_testutil import ray


@pytest.fixture
def small_blocks(data_cluster):
    ctx = ray.data.DataContext.get_current()
    before = ctx.target_max_block_size
    ctx.target_max_block_size = 4096
    try:
        yield ctx
    finally:
        ctx.target_max_block_size = before


def test_a_large_csv_file_is_read_in_line_aligned_ranges(small_blocks, tmp_path):
    path = tmp_path / "big.csv"
    path.write_text("id,name\n" + "".join(f"{i},name-{'x' * (i % 13)}\n" for i in range(3000)))
    ds = ray.data.read_csv(str(path), include_paths=True)
    tasks = ds._plan.source.read_tasks()
    assert len(tasks) == -(-path.stat().st_size // 4096), "one read task per 4 KiB range"
    rows = sorted(ds.take_all(), key=lambda r: r["id"])
    assert [r["id"] for r in rows] == list(range(3000))
    assert rows[7]["name"] == "name-" + "x" * 7 and rows[0]["path"] == str(path)


def test_a_large_json_lines_file_is_read_in_ranges_and_a_json_array_is_not(small_blocks, tmp_path):
    lines = tmp_path / "big.jsonl"
    lines.write_text("".join(json.dumps({"id": i, "pad": "y" * (i % 11)}) + "\n" for i in range(2000)))
    ds = ray.data.read_json(str(lines))
    assert len(ds._plan.source.read_tasks()) > 1
    assert sorted(r["id"] for r in ds.take_all()) == list(range(2000))
    array = tmp_path / "big.json"
    array.write_text(json.dumps([{"id": i} for i in range(2000)]))
    ds = ray.data.read_json(str(array))
    assert len(ds._plan.source.read_tasks()) == 1, "a JSON array is one document: read whole"
    assert ds.count() == 2000


def test_a_bad_line_deep_in_a_large_file_names_the_file_and_its_offset(small_blocks, tmp_path):
    path = tmp_path / "broken.jsonl"
    good = "".join(json.dumps({"id": i}) + "\n" for i in range(1000))
    path.write_text(good + '{"id": \n' + json.dumps({"id": 1}) + "\n")
    with pytest.raises(Exception, match=rf"broken\.jsonl.*byte offset {len(good)}"):
        ray.data.read_json(str(path)).take_all()
