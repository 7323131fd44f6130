"""Sort and groupby as distributed range-partitioned shuffles over the object store.

The engine's scheduler treats them like `random_shuffle` (it waits for the input bundles and
asks for `n` map and `n` reduce tasks within its memory budget); this module says what those
tasks do:

1. sample: each input bundle gives a few key rows (a small task each); the driver picks `n - 1`
   boundaries from them;
2. map: each input block is cut into `n` parts by the boundaries (rows whose key equals a
   boundary go left, so equal keys meet in one part);
3. reduce: part `j` of every block is sorted (and, for groupby, aggregated or handed to
   `map_groups`) into output block `j`.

No process ever holds the whole dataset: parts live in the object store, which spills.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from oxray.data._internal import block as B

SAMPLES_PER_BLOCK = 32


@dataclass(frozen=True)
class SortKey:
    """Columns to order by, each ascending or descending."""

    columns: tuple
    descending: tuple

    @staticmethod
    def of(key, descending, what: str) -> "SortKey":
        if key is None:
            raise ValueError(f"{what}: the 'key' parameter cannot be None")
        columns = [key] if isinstance(key, str) else key
        if not isinstance(columns, (list, tuple)) or not columns or not all(isinstance(c, str) for c in columns):
            raise ValueError(f"{what}(key={key!r}): expected a column name or a non-empty list of column names")
        if isinstance(descending, bool):
            flags = [descending] * len(columns)
        elif isinstance(descending, (list, tuple)) and all(isinstance(d, bool) for d in descending):
            if len(descending) != len(columns):
                raise ValueError(
                    f"{what}: descending={list(descending)} must have one entry per key column {list(columns)}"
                )
            flags = list(descending)
        else:
            raise ValueError(f"{what}(descending={descending!r}): expected a bool or a list of bools")
        return SortKey(tuple(columns), tuple(flags))

    def arrow_keys(self) -> list:
        return [(c, "descending" if d else "ascending") for c, d in zip(self.columns, self.descending, strict=True)]

    def check(self, names: list, what: str) -> None:
        missing = [c for c in self.columns if c not in names]
        if missing:
            raise ValueError(f"{what}: the dataset has no column(s) {missing}; its columns are {list(names)}")


def sample_keys(key: SortKey, n: int, *inputs) -> pa.Table:
    """Up to `n` evenly spaced rows of the key columns of one bundle."""
    table = B.concat_bundles(inputs)
    if table.num_rows == 0:
        return pa.table({})
    key.check(table.column_names, "sort")
    step = max(1, table.num_rows // n)
    return table.select(list(key.columns)).take(B.row_indices(np.arange(0, table.num_rows, step)[:n]))


def boundaries_from(samples: list, key: SortKey, parts: int) -> Optional[pa.Table]:
    """`parts - 1` key rows splitting the sampled keys into `parts` equal ranges."""
    samples = [s for s in samples if s.num_rows]
    if not samples or parts <= 1:
        return None
    table = B.concat(samples)
    table = table.take(pc.sort_indices(table, sort_keys=key.arrow_keys()))
    picks = [int(table.num_rows * (i + 1) / parts) for i in range(parts - 1)]
    picks = [min(p, table.num_rows - 1) for p in picks]
    return table.take(B.row_indices(np.array(picks)))


@dataclass(frozen=True)
class UserBoundaries:
    """A user's `sort(boundaries=)`: ascending, part i holds boundaries[i-1] <= key <
    boundaries[i]; descending, the same ranges come in reverse order."""

    values: list
    descending: bool = False


@dataclass(frozen=True)
class HashPartitions:
    """The hash shuffle: a row goes to part `hash(key) % n`."""

    n: int


_MIX = np.uint64(0x9E3779B97F4A7C15)


def _mix(h: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: every input bit reaches every output bit (uint64, wrapping)."""
    h = h ^ (h >> np.uint64(30))
    h = h * np.uint64(0xBF58476D1CE4E5B9)
    h = h ^ (h >> np.uint64(27))
    h = h * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


def _column_hash(column) -> np.ndarray:
    """A hash per value that is the same in every process (Python's str hash is not)."""
    import zlib

    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    kind = column.type
    numeric = pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)
    if numeric and not column.null_count:
        values = column.to_numpy(zero_copy_only=False)
        if values.dtype.kind == "f":
            bits = np.where(values == 0, 0.0, values).astype(np.float64).view(np.uint64)  # -0.0 is 0.0
        else:
            bits = values.astype(np.int64).view(np.uint64)
        return _mix(bits)
    return np.array([zlib.crc32(repr(v).encode()) for v in column.to_pylist()], dtype=np.uint64)


def partition_of_rows(table: pa.Table, key: SortKey, bounds) -> np.ndarray:
    """The output part of each row: the number of boundaries that sort strictly before it."""
    if bounds is None or table.num_rows == 0:
        return np.zeros(table.num_rows, dtype=np.int64)
    if isinstance(bounds, HashPartitions):
        h = np.zeros(table.num_rows, dtype=np.uint64)
        with np.errstate(over="ignore"):
            for c in key.columns:
                h = _mix(h * _MIX + _column_hash(table.column(c)))
        return (h % np.uint64(bounds.n)).astype(np.int64)
    if isinstance(bounds, UserBoundaries):
        values = table.column(key.columns[0]).to_numpy(zero_copy_only=False)
        parts = np.searchsorted(np.asarray(bounds.values), values, side="right").astype(np.int64)
        return len(bounds.values) - parts if bounds.descending else parts
    keys = table.select(list(key.columns))
    bounds = bounds.cast(keys.schema) if bounds.schema != keys.schema else bounds
    both = pa.concat_tables([keys, bounds])
    order = B.numpy_of(pc.sort_indices(both, sort_keys=key.arrow_keys()))
    # Sorting is stable and rows come before boundaries, so a row equal to a boundary sorts
    # before it: equal keys all land left of that boundary, in one part.
    is_bound = order >= table.num_rows
    part_in_order = np.cumsum(is_bound) - is_bound
    parts = np.empty(table.num_rows, dtype=np.int64)
    rows = ~is_bound
    parts[order[rows]] = part_in_order[rows]
    return parts


def partition_map(key: SortKey, bounds: Optional[pa.Table], n: int, *inputs, columns: Optional[list] = None):
    """One input bundle cut into `n` parts by key range (one return value per part); only
    `columns` travel on when the reduce needs no others."""
    B.release_cached_memory()
    table = B.concat_bundles(inputs)
    if table.num_rows:
        key.check(table.column_names, "sort")
        if columns is not None:
            table = table.select([c for c in table.column_names if c in columns])
    return deal(table, partition_of_rows(table, key, bounds), n)


def deal(table: pa.Table, parts: np.ndarray, n: int):
    """The rows of `table` dealt into `n` parts by each row's part number, as a map task's
    return values (one per part, each a list of IPC blocks; order kept within a part)."""
    order = np.argsort(parts, kind="stable")
    counts = np.bincount(parts, minlength=n)
    dealt = table.take(B.row_indices(order)) if table.num_rows else table
    out, start = [], 0
    for count in counts:
        out.append([B.IpcBlock(dealt.slice(start, int(count)))])
        start += int(count)
    return out[0] if n == 1 else tuple(out)


def _sorted_part(key: SortKey, parts) -> pa.Table:
    table = B.concat_bundles(parts, drop_empty=True)
    if table.num_rows:
        table = table.take(pc.sort_indices(table, sort_keys=key.arrow_keys()))
    return table


def sort_reduce(key: SortKey, *parts):
    B.release_cached_memory()
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    table = _sorted_part(key, parts)
    out = [table] if table.num_rows else []
    return [B.IpcBlock(t) for t in out], B.task_meta(out, wall0, cpu0)


def group_bounds(table: pa.Table, columns: tuple) -> list:
    """(start, end) row ranges of the groups of a table sorted by `columns`."""
    n = table.num_rows
    if n == 0:
        return []
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for c in columns:
        col = table.column(c).combine_chunks()
        if n > 1:
            same = pc.fill_null(pc.equal(col.slice(1), col.slice(0, n - 1)), False).to_numpy(zero_copy_only=False)
            both_null = np.logical_and(
                col.slice(1).is_null().to_numpy(zero_copy_only=False),
                col.slice(0, n - 1).is_null().to_numpy(zero_copy_only=False),
            )
            change[1:] |= ~(same | both_null)
    starts = np.flatnonzero(change)
    ends = np.append(starts[1:], n)
    return list(zip(starts.tolist(), ends.tolist(), strict=True))


@dataclass
class GroupAggregate:
    """A groupby's reduce: each group's rows folded by the aggregations into one output row."""

    key: SortKey
    aggs: list = field(default_factory=list)

    def columns_needed(self) -> Optional[set]:
        """The columns the aggregations read (None: whole rows, for a custom AggregateFn)."""
        if any(_arrow_spec(agg, self.key.columns[0]) is None for agg in self.aggs):
            return None
        return set(self.key.columns) | {a.get_target_column() for a in self.aggs if a.get_target_column()}

    def presorted(self) -> bool:
        """Whether the rows must come sorted by key (Arrow's hash aggregation needs no order)."""
        return self.columns_needed() is None

    def reduce(self, table: pa.Table) -> pa.Table:
        fast = _arrow_group_aggregate(table, self.key.columns, self.aggs)
        if fast is not None:
            return fast
        columns: dict = {c: [] for c in self.key.columns}
        results: dict = {a.name: [] for a in self.aggs}
        for start, end in group_bounds(table, self.key.columns):
            group = table.slice(start, end - start)
            key_values = [group.column(c)[0].as_py() for c in self.key.columns]
            for c, v in zip(self.key.columns, key_values, strict=True):
                columns[c].append(v)
            group_key = key_values[0] if len(key_values) == 1 else tuple(key_values)
            for agg in self.aggs:
                results[agg.name].append(agg._result(agg._partial(group_key, group)))
        out = {}
        for c in self.key.columns:
            out[c] = pa.array(columns[c], type=table.schema.field(c).type)
        for name, values in results.items():
            out[name] = B.array_from_values(name, values)
        return pa.table(out) if out else pa.table({})


def _arrow_spec(agg, key_column: str):
    """The pyarrow hash aggregation computing a built-in aggregator exactly, or None."""
    from oxray.data import aggregate as A

    if not isinstance(agg, A.AggregateFnV2):
        return None  # a custom AggregateFn folds whole rows in Python
    on = agg.get_target_column()
    skip = agg._ignore_nulls
    if type(agg) is A.Count:
        mode = "only_valid" if (on is not None and skip) else "all"
        return (on or key_column, "count", pc.CountOptions(mode=mode))
    names = {A.Sum: "sum", A.Min: "min", A.Max: "max", A.Mean: "mean"}
    if type(agg) in names and on is not None:
        return (on, names[type(agg)], pc.ScalarAggregateOptions(skip_nulls=skip, min_count=1))
    return None


def _arrow_group_aggregate(table: pa.Table, keys: tuple, aggs: list) -> Optional[pa.Table]:
    """Built-in aggregations over every group at once with Arrow's hash aggregation (the rows
    of each group are all in this table), sorted by key; None when an aggregation needs Python."""
    specs = [_arrow_spec(agg, keys[0]) for agg in aggs]
    if not specs or any(s is None for s in specs) or table.num_rows == 0:
        return None
    if any(isinstance(table.schema.field(c).type, pa.BaseExtensionType) for c in keys):
        return None
    out = table.group_by(list(keys), use_threads=False).aggregate(specs)
    # Arrow names them `<column>_<function>` (before or after the keys, by version); Ray names them
    # as the aggregators do.
    names = out.column_names
    key_at = [names.index(k) for k in keys]
    agg_at = [i for i in range(len(names)) if i not in key_at]
    out = out.select(key_at + agg_at).rename_columns([*keys, *[a.name for a in aggs]])
    return out.take(pc.sort_indices(out, sort_keys=[(k, "ascending") for k in keys]))


def group_reduce(reducer, *parts):
    B.release_cached_memory()
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    if getattr(reducer, "presorted", lambda: True)():
        table = _sorted_part(reducer.key, parts)
    else:
        table = B.concat_bundles(parts, drop_empty=True)
    out = reducer.reduce(table) if table.num_rows else None
    tables = [out] if out is not None and (out.num_rows or out.num_columns) else []
    return [B.IpcBlock(t) for t in tables], B.task_meta(tables, wall0, cpu0)
