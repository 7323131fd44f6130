"""Data rebatches blocks into batches twice: in Rust (`batcher.rs`, through
`_native.DataBatcher`, for Arrow/pandas batches and local shuffles) and in Python
(`iterator._numpy_batches`, for numpy batches: zero-copy views of each block).
The two must agree on every batch size and block layout: same rows, same order,
same batch boundaries, the same last batch with and without `drop_last`."""

import itertools

import numpy as np
import pyarrow as pa
import pytest

from oxray.data import iterator

LAYOUTS = [
    [10],
    [1] * 13,
    [0, 5, 0, 7, 3],
    [4, 4, 4],
    [3, 1, 9, 2, 0, 6],
    [0],
    [],
]
BATCH_SIZES = [None, 1, 2, 3, 4, 5, 7, 13, 100]


def _blocks(layout):
    start = 0
    out = []
    for rows in layout:
        ids = np.arange(start, start + rows, dtype=np.int64)
        out.append(pa.table({"id": ids, "x": ids.astype(np.float32) / 2, "s": [f"r{i}" for i in ids]}))
        start += rows
    return out


def _as_columns(batch) -> dict:
    if isinstance(batch, pa.Table):
        return {name: batch.column(name).to_numpy(zero_copy_only=False) for name in batch.column_names}
    return {name: np.asarray(values) for name, values in batch.items()}


@pytest.mark.parametrize(
    ("layout", "batch_size", "drop_last"), list(itertools.product(LAYOUTS, BATCH_SIZES, [False, True]))
)
def test_numpy_and_arrow_rebatching_agree(layout, batch_size, drop_last):
    by_numpy = [_as_columns(b) for b in iterator._numpy_batches(iter(_blocks(layout)), batch_size, drop_last)]
    by_arrow = [
        _as_columns(b) for b in iterator._arrow_batches(iter(_blocks(layout)), batch_size, drop_last, None, None)
    ]
    # Without a batch size both hand over each non-empty block as it is.
    assert [len(b["id"]) for b in by_numpy] == [len(b["id"]) for b in by_arrow], (layout, batch_size, drop_last)
    for mine, theirs in zip(by_numpy, by_arrow, strict=True):
        assert mine.keys() == theirs.keys()
        for name in mine:
            assert mine[name].tolist() == theirs[name].tolist(), name
    total = sum(layout)
    expected_rows = total if batch_size is None or not drop_last else total - total % batch_size
    assert sum(len(b["id"]) for b in by_numpy) == expected_rows
