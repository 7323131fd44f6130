"""Block transforms: each turns one input block into zero or more output blocks.

A fused stage is a list of these run one after the other inside one task (or actor), so
consecutive row and batch UDFs cost one task per block, not one per UDF.
"""

from __future__ import annotations

import abc
import asyncio
import functools
import inspect
import threading
import traceback
from typing import Any, Callable, Iterator, Optional

import numpy as np
import pyarrow as pa

from oxray.data._internal import block as B
from oxray.data._internal import columns as C
from oxray.exceptions import UserCodeException


class UDFError(UserCodeException):
    """A user function failed, as Ray's `UserCodeException`: the user's exception is the
    `__cause__`, and the message carries its traceback and the input it got."""


def describe_input(table: pa.Table, limit: int = 3) -> str:
    try:
        head = table.slice(0, limit).to_pylist()
        text = repr(head)
    except Exception:  # noqa: BLE001 - a description must never fail
        text = "<unprintable>"
    if len(text) > 500:
        text = text[:500] + "..."
    return f"the input block had {table.num_rows} rows with columns {table.column_names}; first rows: {text}"


def call_udf(name: str, fn, table: pa.Table, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except UDFError:
        raise
    except Exception as e:  # noqa: BLE001 - wrap any failure of user code with its input
        raise UDFError(
            f"UDF failed to process a data block: {name} raised {type(e).__name__}: {e}\n{describe_input(table)}\n"
            f"Traceback of {name}:\n{traceback.format_exc()}"
        ) from e


def construct_udf(cls, args: tuple = (), kwargs: Optional[dict] = None):
    """A callable class UDF's instance; what its constructor raises is a UDFError."""
    try:
        return cls(*args, **(kwargs or {}))
    except Exception as e:  # noqa: BLE001 - the constructor is user code
        raise UDFError(
            f"the constructor of {udf_name(cls)} raised {type(e).__name__}: {e}\nTraceback:\n{traceback.format_exc()}"
        ) from e


def udf_name(fn) -> str:
    """The UDF's name in operator names, as Ray writes it: `f`, `Cls`, `Cls.method`, a
    partial's function, else the callable object's class."""
    if inspect.isclass(fn) or inspect.isfunction(fn):
        return fn.__name__
    if inspect.ismethod(fn):
        return f"{type(fn.__self__).__name__}.{fn.__name__}"
    if isinstance(fn, functools.partial):
        return udf_name(fn.func)
    return getattr(fn, "__name__", None) or type(fn).__name__


class BlockFn(abc.ABC):
    """One step of a fused stage. `setup()` runs once per worker or actor before use."""

    name = "Transform"
    is_class_udf = False

    def setup(self) -> None:  # noqa: B027 - most steps have nothing to set up
        """Builds what the step needs once per process (a class UDF's instance)."""

    @abc.abstractmethod
    def __call__(self, table: pa.Table) -> list:
        """The blocks this step makes of one input block."""


_ROW_OP_NAMES = {"map": "Map", "flat_map": "FlatMap", "filter": "Filter"}


class MapRows(BlockFn):
    def __init__(self, fn: Callable, kind: str, fn_args=(), fn_kwargs=None):
        self.fn, self.kind, self.fn_args, self.fn_kwargs = fn, kind, tuple(fn_args or ()), dict(fn_kwargs or {})
        self.name = f"{_ROW_OP_NAMES[kind]}({udf_name(fn)})"
        self.is_class_udf = inspect.isclass(fn)
        self._call = fn

    def setup(self) -> None:
        if self.is_class_udf:
            self._call = construct_udf(self.fn)

    def __call__(self, table: pa.Table) -> list:
        what = self.name
        if table.num_columns == 0:
            return []  # rows with no columns: nothing for a row UDF to see
        if self.kind == "filter":
            keep = []
            for row in B.rows_of(table):
                result = call_udf(what, self._call, table, row, *self.fn_args, **self.fn_kwargs)
                if inspect.iscoroutine(result):  # an `async def` filter
                    [result] = udf_outputs(what, result)
                keep.append(bool(result))  # any truthy value keeps the row, as in Ray
            return [table.filter(pa.array(keep, type=pa.bool_()))] if table.num_rows else [table]
        out = []
        for row in B.rows_of(table):
            result = call_udf(what, self._call, table, row, *self.fn_args, **self.fn_kwargs)
            if inspect.iscoroutine(result):  # an `async def` UDF
                [result] = udf_outputs(what, result)
            elif inspect.isasyncgen(result):  # an async generator UDF yields rows (flat_map)
                result = list(udf_outputs(what, result))
            if self.kind == "map":
                if not isinstance(result, dict):
                    raise ValueError(
                        f"{what} returned a {type(result).__name__}; a map function must return a dict "
                        "of column name -> value"
                    )
                out.append(result)
            else:
                try:
                    items = list(result)
                except TypeError:
                    raise ValueError(
                        f"{what} returned a {type(result).__name__}; a flat_map function must return a list of dicts"
                    ) from None
                out.extend(items)
        if not out:
            return []
        return [B.table_from_rows(out, what)]


class MapBatches(BlockFn):
    def __init__(
        self,
        fn,
        batch_size: Optional[int],
        batch_format,
        fn_args=(),
        fn_kwargs=None,
        fn_constructor_args=(),
        fn_constructor_kwargs=None,
        zero_copy_batch: bool = False,
    ):
        self.fn = fn
        self.batch_size = batch_size
        self.batch_format = batch_format
        self.fn_args = tuple(fn_args or ())
        self.fn_kwargs = dict(fn_kwargs or {})
        self.ctor_args = tuple(fn_constructor_args or ())
        self.ctor_kwargs = dict(fn_constructor_kwargs or {})
        self.zero_copy_batch = zero_copy_batch
        self.is_class_udf = inspect.isclass(fn)
        self.name = f"MapBatches({udf_name(fn)})"
        self._call = None if self.is_class_udf else fn

    def setup(self) -> None:
        if self.is_class_udf:
            self._call = construct_udf(self.fn, self.ctor_args, self.ctor_kwargs)

    def __call__(self, table: pa.Table) -> list:
        out = []
        size = self.batch_size or max(table.num_rows, 1)
        for start in range(0, max(table.num_rows, 1), size):
            self._apply(table.slice(start, size) if self.batch_size else table, out)
        return out

    def _apply(self, piece: pa.Table, out: list) -> None:
        """The UDF called on `piece` as one batch; its output blocks appended to `out`."""
        batch = B.to_batch(piece, self.batch_format)
        if isinstance(batch, dict):
            batch = {k: writable(v) if not self.zero_copy_batch else _read_only(v) for k, v in batch.items()}
        result = call_udf(self.name, self._call, piece, batch, *self.fn_args, **self.fn_kwargs)
        for item in udf_outputs(self.name, result):
            out.append(B.from_batch(item, self.name))


class MapGroups(MapBatches):
    """`GroupedData.map_groups`' step: the input blocks come sorted by the key with each group
    whole in one block (the groupby exchange made them), and the UDF sees each group as one
    batch. `batch_format="default"` is a pandas DataFrame here, as in Ray."""

    def __init__(self, key_columns: tuple, fn, batch_format, *args, **kwargs):
        if batch_format in ("default", "native"):
            batch_format = "pandas"
        super().__init__(fn, None, batch_format, *args, **kwargs)
        self.key_columns = tuple(key_columns)
        self.name = f"MapGroups({udf_name(fn)})"

    def __call__(self, table: pa.Table) -> list:
        from oxray.data._internal.exchange import group_bounds

        out = []
        if not self.key_columns:  # no key: the whole dataset is one group
            self._apply(table, out)
            return out
        for start, end in group_bounds(table, self.key_columns):
            self._apply(table.slice(start, end - start), out)
        return out


def udf_outputs(what: str, result) -> Iterator:
    """What one UDF call produced, as a sequence of outputs: a plain value is one; a generator
    yields several; a coroutine (an `async def` UDF) is run to its value, and an async
    generator to its items, on this worker's event loop. The user's code runs here too, so
    what it raises is wrapped as `call_udf` wraps it."""
    try:
        if inspect.iscoroutine(result):
            yield _event_loop().run_until_complete(result)
        elif inspect.isasyncgen(result):
            loop = _event_loop()
            while True:
                try:
                    item = loop.run_until_complete(result.__anext__())
                except StopAsyncIteration:
                    return
                yield item
        elif inspect.isgenerator(result):
            yield from result
        else:
            yield result
    except UDFError:
        raise
    except Exception as e:  # noqa: BLE001 - user code ran in the coroutine or generator
        raise UDFError(
            f"UDF failed to process a data block: {what} raised {type(e).__name__}: {e}\n"
            f"Traceback of {what}:\n{traceback.format_exc()}"
        ) from e


_loops = threading.local()


def _event_loop() -> asyncio.AbstractEventLoop:
    """An event loop per thread for async UDFs (an actor with max_concurrency > 1 runs calls
    on several threads at once; one loop cannot serve two of them)."""
    loop = getattr(_loops, "loop", None)
    if loop is None or loop.is_closed():
        loop = _loops.loop = asyncio.new_event_loop()
    return loop


def writable(values: np.ndarray) -> np.ndarray:
    """The batch's array as the UDF may change it: itself if writable, else a copy."""
    return values if values.flags.writeable else values.copy()


def _read_only(values: np.ndarray) -> np.ndarray:
    """A read-only view (zero_copy_batch=True): the block's memory is never the UDF's to change."""
    view = values.view()
    view.setflags(write=False)
    return view


class AddColumn(BlockFn):
    def __init__(self, col: str, fn, batch_format):
        self.col, self.fn, self.batch_format = col, fn, batch_format
        self.name = f"AddColumn({col})"

    def __call__(self, table: pa.Table) -> list:
        batch = B.to_batch(table, self.batch_format)
        values = call_udf(self.name, self.fn, table, batch)
        expected = {
            "pyarrow": ((pa.Array, pa.ChunkedArray), "a pyarrow Array"),
            "numpy": (np.ndarray, "a numpy.ndarray"),
        }
        if self.batch_format in expected and not isinstance(values, expected[self.batch_format][0]):
            raise UDFError(
                f"{self.name}: For {self.batch_format} batch format, the function must return "
                f"{expected[self.batch_format][1]}, got: {type(values)}"
            )
        if self.batch_format == "pandas" and np.ndim(values) == 0:
            values = [values] * table.num_rows  # a constant, as pandas' column assignment broadcasts it
        if hasattr(values, "to_numpy") and not isinstance(values, (pa.Array, pa.ChunkedArray)):
            values = values.to_numpy()  # a pandas Series
        try:
            column = B.array_from_values(self.col, values)
        except (TypeError, ValueError) as e:
            raise UDFError(f"{self.name}: {e}") from e
        if len(column) != table.num_rows:
            raise UDFError(f"{self.name}: the function returned {len(column)} values for {table.num_rows} rows")
        if self.col in table.column_names:
            return [table.set_column(table.column_names.index(self.col), self.col, column)]
        return [table.append_column(self.col, column)]


class PartialAggregate(BlockFn):
    """A block folded into each aggregation's partial accumulator: one row holding them."""

    def __init__(self, aggs: list):
        self.aggs = list(aggs)
        self.name = "Aggregate"

    def __call__(self, table: pa.Table) -> list:
        partials = []
        for agg in self.aggs:
            partials.append(call_udf(agg.name, agg._partial, table, None, table))
        return [pa.table({"partials": C.objects_column([partials])})]

    @staticmethod
    def partials_of(table: pa.Table) -> list:
        return list(C.tensor_values(table.column("partials").combine_chunks()))


class FilterExpr(BlockFn):
    """Rows where an expression (`oxray.data.expressions`) is true; null counts as false."""

    def __init__(self, expr):
        self.expr = expr
        self.name = f"Filter({expr!r})"

    def __call__(self, table: pa.Table) -> list:
        if table.num_rows == 0:
            return [table]
        mask = self.expr.eval(table)
        if isinstance(mask, pa.Scalar):
            mask = pa.array([mask.as_py()] * table.num_rows, type=pa.bool_())
        return [table.filter(mask, null_selection_behavior="drop")]


class WithColumn(BlockFn):
    """A column computed from an expression (replacing one of the same name)."""

    def __init__(self, col: str, expr):
        self.col, self.expr = col, expr
        self.name = f"WithColumn({col})"

    def __call__(self, table: pa.Table) -> list:
        values = self.expr.eval(table)
        if isinstance(values, pa.Scalar):
            values = pa.array([values.as_py()] * table.num_rows, type=values.type)
        if self.col in table.column_names:
            return [table.set_column(table.column_names.index(self.col), self.col, values)]
        return [table.append_column(self.col, values)]


_task_index = 0


def set_task_index(index: int) -> None:
    """The running task's index within its operator (Ray's `TaskContext.task_idx`)."""
    global _task_index
    _task_index = index


def current_task_index() -> int:
    return _task_index


TRAIN_TEST_COLUMN = "__oxray_is_train"


class MarkTrainRows(BlockFn):
    """`streaming_train_test_split`'s mark: whether each row goes to the train side. `random`
    draws one number per row from `default_rng([task_idx(, seed)])`; `hash` compares an 8-byte
    blake2b of the key's text with the train fraction, as Ray does, so the split is the same
    every run and matches Ray's."""

    def __init__(self, test_size: float, split_type: str, hash_column, seed):
        self.test_size, self.split_type, self.hash_column, self.seed = test_size, split_type, hash_column, seed
        self.name = "TrainTestSplit"
        self._rng = None

    def __call__(self, table: pa.Table) -> list:
        if self.split_type == "random":
            if self._rng is None or self._rng[0] != _task_index:
                parts = [_task_index] if self.seed is None else [_task_index, self.seed]
                self._rng = (_task_index, np.random.default_rng(parts))
            is_train = self._rng[1].random(table.num_rows) < (1 - self.test_size)
        else:
            import hashlib

            if self.hash_column not in table.column_names:
                raise ValueError(f"Key column {self.hash_column} not found in batch")
            limit = (1 - self.test_size) * (1 << 64)
            is_train = np.array(
                [
                    int.from_bytes(hashlib.blake2b(str(k).encode(), digest_size=8).digest(), "big") < limit
                    for k in table.column(self.hash_column).to_pylist()
                ],
                dtype=bool,
            )
        return [table.append_column(TRAIN_TEST_COLUMN, pa.array(is_train, type=pa.bool_()))]


class RandomSample(BlockFn):
    """Each row kept with probability `fraction`. Seeded as Ray seeds it: one generator per task,
    `default_rng((task_idx, seed))`, drawing one number per row, so a seeded sample keeps the
    same rows as Ray's for the same blocks."""

    def __init__(self, fraction: float, seed):
        self.fraction, self.seed = fraction, seed
        self.name = "RandomSample"
        self._rng = None  # (task index, generator)

    def _generator(self):
        if self._rng is None or self._rng[0] != _task_index:
            seed = None if self.seed is None else (_task_index, self.seed)
            self._rng = (_task_index, np.random.default_rng(seed))
        return self._rng[1]

    def __call__(self, table: pa.Table) -> list:
        mask = self._generator().random(table.num_rows) < self.fraction
        return [table.take(pa.array(np.flatnonzero(mask)))]


class ColumnNotFoundError(KeyError, ValueError):
    """A named column the dataset lacks (a KeyError, as Ray raises, and a ValueError)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def check_columns(op: str, names: list, cols) -> None:
    """`cols` must all be among the dataset's column `names`."""
    missing = [c for c in cols if c not in names]
    if missing:
        raise ColumnNotFoundError(f"{op}: unknown column(s) {missing}; the dataset's columns are {list(names)}")


class SelectColumns(BlockFn):
    def __init__(self, cols: list):
        self.cols = list(cols)
        self.name = "SelectColumns"

    def __call__(self, table: pa.Table) -> list:
        check_columns("select_columns", table.column_names, self.cols)
        return [table.select(self.cols)]


class DropColumns(BlockFn):
    def __init__(self, cols: list):
        self.cols = list(cols)
        self.name = "DropColumns"

    def __call__(self, table: pa.Table) -> list:
        check_columns("drop_columns", table.column_names, self.cols)
        return [table.drop_columns(self.cols)]


class RenameColumns(BlockFn):
    def __init__(self, mapping: dict):
        self.mapping = dict(mapping)
        self.name = "RenameColumns"

    def __call__(self, table: pa.Table) -> list:
        check_columns("rename_columns", table.column_names, list(self.mapping))
        return [table.rename_columns([self.mapping.get(c, c) for c in table.column_names])]


def run_fns(fns: list, tables: list) -> list:
    """Applies a fused chain to blocks; empty outputs are dropped between steps."""
    for fn in fns:
        nxt = []
        for t in tables:
            nxt.extend(fn(t))
        tables = nxt
    return tables


def any_class_udf(fns: list) -> bool:
    return any(f.is_class_udf for f in fns)


def check_fn(fn: Any, what: str) -> None:
    if not callable(fn):
        # ValueError, as Ray's "`fn` must be callable".
        raise ValueError(f"{what}: `fn` must be callable (a function or a callable class), got {fn!r}")
