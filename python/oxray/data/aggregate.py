"""Aggregations: Ray Data's `AggregateFn`, `AggregateFnV2` and the built-in aggregators.

An aggregation runs in three steps: each block is folded into a partial accumulator where the
block is (a task), partials are combined, and the result is finalized. `Dataset.aggregate`
combines the partials of every block on the driver (a handful of small values); `groupby`
first range-partitions the rows by key so each group's rows meet in one reduce task.

Nulls follow Ray: with `ignore_nulls=True` they are skipped (and a column of only nulls gives
`None`); with `ignore_nulls=False` one null makes the result `None`.
"""

from __future__ import annotations

import abc
import copy
import math
from typing import Any, Callable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from oxray.data._internal import block as B

__all__ = [
    "AbsMax",
    "AsList",
    "AggregateFn",
    "AggregateFnV2",
    "Count",
    "Max",
    "Mean",
    "Min",
    "Quantile",
    "Std",
    "Sum",
    "Unique",
]


class _Nothing:
    """The accumulator of an aggregation that has seen no value yet."""

    def __repr__(self) -> str:
        return "<no value>"

    def __reduce__(self):
        return (_nothing, ())


def _nothing():
    return NOTHING


NOTHING = _Nothing()


class AggregateFn:
    """A custom aggregation: `init(key)` makes a group's accumulator, `accumulate_row(acc, row)`
    or `accumulate_block(acc, block)` folds rows (a block is a pyarrow Table) into it, `merge`
    combines two, and `finalize` turns the last one into the result named `name`."""

    def __init__(
        self,
        init: Callable[[Any], Any],
        merge: Callable[[Any, Any], Any],
        name: str,
        accumulate_row: Optional[Callable[[Any, dict], Any]] = None,
        accumulate_block: Optional[Callable[[Any, pa.Table], Any]] = None,
        finalize: Optional[Callable[[Any], Any]] = None,
    ):
        if (accumulate_row is None) == (accumulate_block is None):
            raise ValueError("Exactly one of accumulate_row or accumulate_block must be provided.")
        if not isinstance(name, str):
            raise TypeError("`name` must be provided.")
        self.name = name
        self.init = init
        self.merge = merge
        self._accumulate_row = accumulate_row
        self._accumulate_block = accumulate_block
        self.finalize = finalize if finalize is not None else (lambda a: a)

    def accumulate_block(self, acc, block: pa.Table):
        if self._accumulate_block is not None:
            return self._accumulate_block(acc, block)
        for row in B.rows_of(block):
            acc = self._accumulate_row(acc, row)
        return acc

    # The three steps as the engine runs them.
    def _partial(self, key, block: pa.Table):
        return self.accumulate_block(self.init(key), block)

    def _combine(self, a, b):
        return self.merge(a, b)

    def _result(self, acc):
        return self.finalize(acc)

    def _check_columns(self, names: list) -> None:
        """Raises if the aggregation names a column the dataset lacks."""


class AggregateFnV2(AggregateFn, abc.ABC):
    """An aggregation over column `on` (or whole rows): subclasses give `aggregate_block`
    (a block's partial accumulator) and `combine`, and may override `finalize`."""

    def __init__(self, name: str, zero_factory: Callable[[], Any], *, on: Optional[str], ignore_nulls: bool):
        if not name:
            raise ValueError(f"Non-empty string has to be provided as name (got {name})")
        self._target_col_name = on
        self._ignore_nulls = ignore_nulls
        self._zero_factory = zero_factory
        self.name = name
        self.init = lambda _key: NOTHING
        self.merge = self._combine
        self._accumulate_row = None
        self._accumulate_block = None

    def get_target_column(self) -> Optional[str]:
        return self._target_col_name

    def get_agg_name(self) -> str:
        return self.name.split("(", 1)[0]

    @abc.abstractmethod
    def aggregate_block(self, block: pa.Table):
        """The partial accumulator of one block."""

    @abc.abstractmethod
    def combine(self, current_accumulator, new):
        """Two partial accumulators as one."""

    def finalize(self, accumulator):
        return accumulator

    def _column(self, block: pa.Table):
        return block.column(self._target_col_name)

    def _partial(self, key, block: pa.Table):
        on = self._target_col_name
        if on is not None and on in block.column_names:
            column = block.column(on)
            nulls = column.null_count
            if nulls and not self._ignore_nulls:
                return None
            if nulls == len(column) and not self._counts_rows():
                return NOTHING
        if block.num_rows == 0 and not self._counts_rows():
            return NOTHING
        return self.aggregate_block(block)

    def _counts_rows(self) -> bool:
        return False

    def _combine(self, a, b):
        if a is NOTHING:
            return b
        if b is NOTHING:
            return a
        if a is None or b is None:
            return None  # a null seen with ignore_nulls=False
        return self.combine(a, b)

    def _result(self, acc):
        if acc is NOTHING:
            return self._zero_factory() if self._counts_rows() else None
        if acc is None:
            return None
        return self.finalize(acc)

    def _check_columns(self, names: list) -> None:
        on = self._target_col_name
        if on is not None and on not in names:
            raise ValueError(f"{self.name}: the dataset has no column {on!r}; its columns are {names}")


def _scalar(value: pa.Scalar):
    return value.as_py()


class Count(AggregateFnV2):
    """Rows, or the non-null values of `on` (all values with `ignore_nulls=False`)."""

    def __init__(self, on: Optional[str] = None, ignore_nulls: bool = False, alias_name: Optional[str] = None):
        super().__init__(alias_name or f"count({on or ''})", lambda: 0, on=on, ignore_nulls=ignore_nulls)

    def _counts_rows(self) -> bool:
        return True

    def _partial(self, key, block):
        return self.aggregate_block(block)

    def aggregate_block(self, block):
        if self._target_col_name is None:
            return block.num_rows
        column = self._column(block)
        return len(column) - column.null_count if self._ignore_nulls else len(column)

    def combine(self, current_accumulator, new):
        return current_accumulator + new


class Sum(AggregateFnV2):
    def __init__(self, on: Optional[str] = None, ignore_nulls: bool = True, alias_name: Optional[str] = None):
        super().__init__(alias_name or f"sum({on})", lambda: 0, on=on, ignore_nulls=ignore_nulls)

    def aggregate_block(self, block):
        return _scalar(pc.sum(self._column(block)))

    def combine(self, current_accumulator, new):
        return current_accumulator + new


class Min(AggregateFnV2):
    def __init__(self, on: Optional[str] = None, ignore_nulls: bool = True, alias_name: Optional[str] = None):
        super().__init__(alias_name or f"min({on})", lambda: float("inf"), on=on, ignore_nulls=ignore_nulls)

    def aggregate_block(self, block):
        return _scalar(pc.min(self._column(block)))

    def combine(self, current_accumulator, new):
        return min(current_accumulator, new)


class Max(AggregateFnV2):
    def __init__(self, on: Optional[str] = None, ignore_nulls: bool = True, alias_name: Optional[str] = None):
        super().__init__(alias_name or f"max({on})", lambda: float("-inf"), on=on, ignore_nulls=ignore_nulls)

    def aggregate_block(self, block):
        return _scalar(pc.max(self._column(block)))

    def combine(self, current_accumulator, new):
        return max(current_accumulator, new)


class AbsMax(AggregateFnV2):
    def __init__(self, on: Optional[str] = None, ignore_nulls: bool = True, alias_name: Optional[str] = None):
        if on is None or not isinstance(on, str):
            raise ValueError(f"Column to aggregate on has to be provided (got {on})")
        super().__init__(alias_name or f"abs_max({on})", lambda: 0, on=on, ignore_nulls=ignore_nulls)

    def aggregate_block(self, block):
        return _scalar(pc.max(pc.abs(self._column(block))))

    def combine(self, current_accumulator, new):
        return max(current_accumulator, new)


class Mean(AggregateFnV2):
    """Accumulates `[sum, count]`."""

    def __init__(self, on: Optional[str] = None, ignore_nulls: bool = True, alias_name: Optional[str] = None):
        super().__init__(alias_name or f"mean({on})", lambda: [0, 0], on=on, ignore_nulls=ignore_nulls)

    def aggregate_block(self, block):
        column = self._column(block)
        return [_scalar(pc.sum(column)), len(column) - column.null_count]

    def combine(self, current_accumulator, new):
        return [current_accumulator[0] + new[0], current_accumulator[1] + new[1]]

    def finalize(self, accumulator):
        total, count = accumulator
        return total / count if count else None


class Std(AggregateFnV2):
    """Accumulates `[M2, mean, count]` and merges them with Chan et al.'s parallel update, so
    the result is stable however the rows are split into blocks."""

    def __init__(
        self, on: Optional[str] = None, ddof: int = 1, ignore_nulls: bool = True, alias_name: Optional[str] = None
    ):
        super().__init__(alias_name or f"std({on})", lambda: [0, 0, 0], on=on, ignore_nulls=ignore_nulls)
        self._ddof = ddof

    def aggregate_block(self, block):
        values = self._column(block).drop_null().to_numpy(zero_copy_only=False).astype(np.float64)
        mean = float(values.mean())
        return [float(((values - mean) ** 2).sum()), mean, len(values)]

    def combine(self, current_accumulator, new):
        m2_a, mean_a, n_a = current_accumulator
        m2_b, mean_b, n_b = new
        n = n_a + n_b
        delta = mean_b - mean_a
        return [m2_a + m2_b + delta * delta * n_a * n_b / n, mean_a + delta * n_b / n, n]

    def finalize(self, accumulator):
        m2, _mean, count = accumulator
        if count - self._ddof <= 0:
            return math.nan  # undefined, as numpy and pandas say
        return math.sqrt(m2 / (count - self._ddof))


class Quantile(AggregateFnV2):
    """The `q` quantile of `on`, interpolated linearly between values (numpy's default)."""

    def __init__(
        self, on: Optional[str] = None, q: float = 0.5, ignore_nulls: bool = True, alias_name: Optional[str] = None
    ):
        if not 0 <= q <= 1:
            raise ValueError(f"Quantile(q={q!r}): expected a value between 0 and 1")
        super().__init__(alias_name or f"quantile({on})", list, on=on, ignore_nulls=ignore_nulls)
        self._q = q

    def aggregate_block(self, block):
        return self._column(block).drop_null().to_pylist()

    def combine(self, current_accumulator, new):
        return current_accumulator + new

    def finalize(self, accumulator):
        return float(np.quantile(np.asarray(accumulator), self._q)) if accumulator else None


class Unique(AggregateFnV2):
    """The distinct values of `on` (with `None` unless `ignore_nulls`), as a list."""

    def __init__(self, on: Optional[str] = None, ignore_nulls: bool = False, alias_name: Optional[str] = None):
        super().__init__(alias_name or f"unique({on})", set, on=on, ignore_nulls=ignore_nulls)

    def _partial(self, key, block):
        return self.aggregate_block(block)

    def aggregate_block(self, block):
        column = self._column(block)
        if self._ignore_nulls:
            column = column.drop_null()
        return set(pc.unique(column).to_pylist())

    def combine(self, current_accumulator, new):
        return current_accumulator | new

    def _combine(self, a, b):
        return (set() if a is NOTHING else a) | (set() if b is NOTHING else b)

    def finalize(self, accumulator):
        return list(accumulator)

    def _result(self, acc):
        return [] if acc is NOTHING else self.finalize(acc)


class AsList(AggregateFnV2):
    """Every value of `on` (nulls too, unless `ignore_nulls`), as a list."""

    def __init__(self, on: str, alias_name: Optional[str] = None, ignore_nulls: bool = False):
        super().__init__(alias_name or f"list({on or ''})", list, on=on, ignore_nulls=ignore_nulls)

    def _partial(self, key, block):
        return self.aggregate_block(block)

    def aggregate_block(self, block):
        column = self._column(block)
        return (column.drop_null() if self._ignore_nulls else column).to_pylist()

    def combine(self, current_accumulator, new):
        return current_accumulator + new

    def _combine(self, a, b):
        return (a if a is not NOTHING else []) + (b if b is not NOTHING else [])

    def _result(self, acc):
        return [] if acc is NOTHING else acc


def check_aggs(aggs: tuple, what: str) -> list:
    if not aggs:
        raise ValueError(f"{what}: give at least one aggregation (AggregateFn, Count(), Sum(on), ...)")
    for agg in aggs:
        if not isinstance(agg, AggregateFn):
            raise TypeError(f"{what}: {agg!r} is not an AggregateFn (use Count(), Sum(on), ... or AggregateFn(...))")
    return _unique_names(list(aggs))


def _unique_names(aggs: list) -> list:
    """The aggregations with distinct output names, as Ray gives them: a repeated name gets
    `_2`, `_3`, ... (renamed on a copy; the caller's objects are left as they are)."""
    seen: dict = {}
    out = []
    for agg in aggs:
        count = seen.get(agg.name, 0) + 1
        seen[agg.name] = count
        if count > 1:
            agg = copy.copy(agg)
            agg.name = f"{agg.name}_{count}"
        out.append(agg)
    return out
