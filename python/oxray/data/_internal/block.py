"""Blocks are pyarrow Tables. This module converts them to and from what UDFs see
(rows, numpy dicts, pandas, pyarrow) and ships them through the object store as Arrow IPC.

Tensor columns (an ndarray per row, e.g. images) and the other values UDFs return are typed by
`columns`; fixed-shape tensors convert to and from numpy without a copy.
"""

from __future__ import annotations

import pickle
import sys
import time
from typing import Any, Iterable

import numpy as np
import pyarrow as pa

from oxray.data._internal import columns as C

BATCH_FORMATS = ("default", "numpy", "pandas", "pyarrow", None)


def check_batch_format(fmt) -> None:
    if fmt not in BATCH_FORMATS:
        raise ValueError(f"batch_format={fmt!r}: expected one of 'default', 'numpy', 'pandas', 'pyarrow' or None")


def num_rows(table: pa.Table) -> int:
    return table.num_rows


def size_bytes(table: pa.Table) -> int:
    return table.nbytes


class IpcBlock:
    """A block as it travels: pickled as one out-of-band Arrow IPC stream buffer, which the
    reader maps from shared memory without a copy."""

    __slots__ = ("table",)

    def __init__(self, table: pa.Table):
        self.table = table

    def __reduce_ex__(self, protocol):
        if protocol >= 5 and _owns_its_buffers(self.table):
            # Its own column buffers, out of band, copied once, straight into the store (no IPC
            # stream to build first); the reader gets a Table over them without a copy.
            return self.table.__reduce_ex__(protocol)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, self.table.schema) as writer:
            writer.write_table(self.table)
        buf = sink.getvalue()
        if protocol >= 5:
            return _ipc_to_table, (pickle.PickleBuffer(buf),)
        return _ipc_to_table, (buf.to_pybytes(),)


def _owns_its_buffers(table: pa.Table) -> bool:
    """Whether pickling the table moves only its own rows: not a slice of larger buffers (which
    pickle whole), and no extension type (those travel as IPC, which every reader knows)."""
    if any(isinstance(field.type, pa.BaseExtensionType) for field in table.schema):
        return False
    nbytes = table.nbytes
    return table.get_total_buffer_size() <= nbytes + nbytes // 64 + 4096


def row_indices(values: np.ndarray) -> pa.Array:
    """Row positions as an Arrow int64 array over the numpy buffer. Not `pa.array`: that imports
    pandas to check what it was given, some 30 MiB in every worker that only shuffles."""
    values = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


def numpy_of(array: pa.Array) -> np.ndarray:
    """An Arrow array as numpy: over its buffer when it is a null-free integer or float array
    (`to_numpy()` imports pandas too), else through `to_numpy`."""
    kind = "u" if pa.types.is_unsigned_integer(array.type) else "i" if pa.types.is_integer(array.type) else None
    if pa.types.is_floating(array.type) and array.type != pa.float16():
        kind = "f"
    if kind is None or array.null_count:
        return array.to_numpy(zero_copy_only=False)
    width = array.type.bit_width // 8
    dtype = np.dtype(f"{kind}{width}")
    return np.frombuffer(array.buffers()[1], dtype=dtype, count=len(array), offset=array.offset * width)


def _ipc_to_table(data) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


_PRIMITIVE_DTYPES = {
    pa.from_numpy_dtype(np.dtype(name)).id: np.dtype(name)
    for name in (
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
    )
}


def column_to_numpy(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    if isinstance(column, pa.ChunkedArray):
        column = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    if C.has_numpy_form(column.type):
        return C.tensor_values(column)
    if pa.types.is_null(column.type):
        return np.full(len(column), None, dtype=object)
    if pa.types.is_fixed_size_list(column.type) or pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
        values = column.to_pylist()
        try:
            return np.array(values)
        except ValueError:
            out = np.empty(len(values), dtype=object)
            out[:] = [None if v is None else np.array(v) for v in values]
            return out
    if column.null_count == 0 and column.type.id in _PRIMITIVE_DTYPES:
        # A view of the values buffer: pyarrow's to_numpy would first import pandas.
        dtype = _PRIMITIVE_DTYPES[column.type.id]
        values = column.buffers()[1]
        return np.frombuffer(values, dtype=dtype, count=len(column), offset=column.offset * dtype.itemsize)
    try:
        return column.to_numpy(zero_copy_only=True)
    except (pa.ArrowInvalid, NotImplementedError):
        return column.to_numpy(zero_copy_only=False)


def table_to_numpy(table: pa.Table) -> dict:
    return {name: column_to_numpy(table.column(i)) for i, name in enumerate(table.column_names)}


def to_batch(table: pa.Table, batch_format) -> Any:
    """The block as `batch_format` asks: numpy dict (default), pandas or pyarrow."""
    if batch_format in ("default", "numpy"):
        return table_to_numpy(table)
    if batch_format == "pandas":
        return table_to_pandas(table)
    return table


def table_to_pandas(table: pa.Table):
    tensor_columns = [n for n in table.column_names if C.has_numpy_form(table.schema.field(n).type)]
    if not tensor_columns:
        return table.to_pandas()
    df = table.drop_columns(tensor_columns).to_pandas()
    for name in tensor_columns:
        arr = column_to_numpy(table.column(name))
        df[name] = list(arr)
    return df[table.column_names]


array_from_values = C.array_from_values


def table_from_columns(columns: dict) -> pa.Table:
    arrays = {}
    length = None
    for name, values in columns.items():
        if not isinstance(name, str):
            raise TypeError(f"column names must be strings, got {name!r} ({type(name).__name__})")
        arr = array_from_values(name, values)
        if length is not None and len(arr) != length:
            raise ValueError(
                f"columns have different lengths: {name!r} has {len(arr)} rows, the columns before it {length}"
            )
        length = len(arr)
        arrays[name] = arr
    return pa.Table.from_arrays(list(arrays.values()), names=list(arrays))


def from_batch(batch, what: str) -> pa.Table:
    """A block from what a batch UDF returned; `what` names the UDF for errors."""
    if isinstance(batch, pa.Table):
        return batch
    if isinstance(batch, pa.RecordBatch):
        return pa.Table.from_batches([batch])
    if isinstance(batch, dict):
        return table_from_columns(batch)
    pd = sys.modules.get("pandas")
    if pd is not None and isinstance(batch, pd.DataFrame):
        return pandas_to_table(batch)
    raise ValueError(
        f"{what} returned a {type(batch).__name__}; expected a dict of column name -> numpy array, "
        "a pandas DataFrame or a pyarrow Table"
    )


def pandas_to_table(df) -> pa.Table:
    columns = {}
    for name in df.columns:
        series = df[name]
        if series.dtype != object:
            columns[str(name)] = pa.array(series, from_pandas=True)
            continue
        values = list(series)
        first = next((v for v in values if v is not None), None)
        if isinstance(C.to_array_like(first), np.ndarray):
            columns[str(name)] = C.array_from_list(str(name), values)
            continue
        try:
            columns[str(name)] = pa.array(series, from_pandas=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError):
            columns[str(name)] = C.array_from_list(str(name), values)
    if not columns:
        return pa.table({})
    return table_from_columns(columns)


def rows_of(table: pa.Table) -> Iterable[dict]:
    """Rows as dicts: Python values, and ndarrays for tensor columns."""
    names = table.column_names
    cols = []
    for i in range(len(names)):
        col = table.column(i)
        if C.has_numpy_form(col.type):
            values = column_to_numpy(col)
            if values.dtype != object and not values.flags.writeable:
                values = values.copy()  # a row's arrays are the UDF's to change, as in Ray
            cols.append(list(values))
        else:
            cols.append(col.to_pylist())
    # A block with no columns has no rows to show (Ray's rows of it are none, not empty dicts).
    for values in zip(*cols, strict=True):
        yield dict(zip(names, values, strict=True))


def table_from_rows(rows: list, what: str) -> pa.Table:
    if not rows:
        return pa.table({})
    names: dict = {}
    for row in rows:
        if not isinstance(row, dict):
            raise ValueError(f"{what} returned a {type(row).__name__}; expected a dict of column name -> value")
        for k in row:
            names.setdefault(k, None)
    columns = {name: [row.get(name) for row in rows] for name in names}
    return table_from_columns(columns)


def concat(tables: list) -> pa.Table:
    tables = [t for t in tables if t.num_columns or t.num_rows]
    if not tables:
        return pa.table({})
    if len(tables) == 1:
        return tables[0]
    try:
        return pa.concat_tables(tables, promote_options="default")
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        pass
    tables = C.unify_tensor_columns(tables)
    try:
        return pa.concat_tables(tables, promote_options="default")
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        pass
    try:
        # Numeric columns widened to a common type (int64 and double: double), as Ray's does:
        # blocks a pandas UDF made with nulls hold doubles where others hold integers.
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise ValueError(f"blocks have different schemas and cannot be combined: {e}") from e


def concat_bundles(bundles, drop_empty: bool = False) -> pa.Table:
    """The blocks of several bundles (lists of tables, as tasks receive them) as one table;
    `drop_empty` leaves out blocks with no rows."""
    return concat([t for blocks in bundles for t in blocks if t.num_rows or not drop_empty])


def task_meta(tables: list, wall0: float, cpu0: float) -> dict:
    """What a Data task reports beside its blocks: rows, bytes, blocks, wall and CPU seconds,
    and the schema of its first block with rows (so its consumer need not fetch a block for it)."""
    return {
        "schema": next((t.schema for t in tables if t.num_rows), None),
        "block_rows": [t.num_rows for t in tables],
        "rows": sum(t.num_rows for t in tables),
        "bytes": sum(t.nbytes for t in tables),
        "blocks": len(tables),
        "wall": time.perf_counter() - wall0,
        "cpu": time.thread_time() - cpu0,
    }


def release_cached_memory() -> None:
    """Hands the memory Arrow's allocator kept back to the OS: what earlier tasks left now, and
    what this task leaves once its results are stored, so an idle worker does not hold a
    shuffle's worth of freed buffers."""
    pa.default_memory_pool().release_unused()
    release_cached_memory_after_task()


def release_cached_memory_after_task() -> None:
    """Hands the memory Arrow's allocator kept back to the OS once this task's results are stored."""
    from oxray._private.state import after_this_task

    after_this_task(_release_unused)


def _release_unused() -> None:
    pa.default_memory_pool().release_unused()
