"""`Dataset`: a lazy plan of reads and transforms, run by the streaming executor when consumed."""

from __future__ import annotations

import logging
import math
import os
import uuid
from typing import TYPE_CHECKING, Iterator, Optional

import numpy as np
import pyarrow as pa

import oxray
from oxray.data._internal import block as B
from oxray.data._internal import dataset_repr as R
from oxray.data._internal import exchange as X
from oxray.data._internal import plan as P
from oxray.data._internal import transforms as T
from oxray.data._internal.datasource import StoredBlocksDatasource, resolve_paths
from oxray.data._internal.execution_state import stats_text, stored_blocks_text
from oxray.data._internal.executor import Bundle, ExecutionStats, Executor, remote, slice_ranges
from oxray.data._internal.progress import progress_for
from oxray.data._internal.write import WriteBlocks, cleanup_written, path_exists, remove_existing
from oxray.data.context import DataContext
from oxray.data.iterator import DataIterator, _check_batch_size

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from oxray.data.grouped_data import GroupedData


class ActorPoolStrategy:
    """Runs a class UDF on a pool of actors: `size`, or between `min_size` and `max_size`."""

    def __init__(
        self,
        *,
        size: Optional[int] = None,
        min_size: Optional[int] = None,
        max_size: Optional[int] = None,
        initial_size: Optional[int] = None,
        max_tasks_in_flight_per_actor: Optional[int] = None,
    ):
        for name, v in (("size", size), ("min_size", min_size), ("max_size", max_size), ("initial_size", initial_size)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"ActorPoolStrategy({name}={v!r}): expected an integer >= 1")
        if size is not None and (min_size is not None or max_size is not None):
            raise ValueError("ActorPoolStrategy: give either size or min_size/max_size, not both")
        if min_size is not None and max_size is not None and min_size > max_size:
            raise ValueError(f"ActorPoolStrategy: min_size={min_size} is larger than max_size={max_size}")
        self.min_size = size or min_size or 1
        # None: grows while every actor is busy, up to the cluster's CPUs (Ray: unbounded).
        self.max_size = size or max_size
        self.initial_size = size or initial_size or self.min_size
        if self.max_size is not None and not self.min_size <= self.initial_size <= self.max_size:
            raise ValueError(f"ActorPoolStrategy: initial_size={initial_size} must lie between min_size and max_size")
        if max_tasks_in_flight_per_actor is not None and (
            isinstance(max_tasks_in_flight_per_actor, bool)
            or not isinstance(max_tasks_in_flight_per_actor, int)
            or max_tasks_in_flight_per_actor < 1
        ):
            raise ValueError(
                f"ActorPoolStrategy(max_tasks_in_flight_per_actor={max_tasks_in_flight_per_actor!r}): "
                "expected an integer >= 1"
            )
        self.max_tasks_in_flight_per_actor = max_tasks_in_flight_per_actor or 2


class TaskPoolStrategy:
    """Runs a function UDF as tasks, at most `size` at once."""

    def __init__(self, size: Optional[int] = None):
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise ValueError(f"TaskPoolStrategy(size={size!r}): expected an integer >= 1")
        self.size = size


_REMOTE_ARG_NAMES = {
    "num_cpus",
    "num_gpus",
    "memory",
    "resources",
    "scheduling_strategy",
    "accelerator_type",
    "runtime_env",
}
# Options only a task pool (a function UDF) or only an actor pool (a class UDF) takes.
_TASK_ONLY_ARGS = {"max_retries", "retry_exceptions", "max_calls"}
_ACTOR_ONLY_ARGS = {"max_concurrency", "max_task_retries", "max_restarts"}


def _compute_spec(fn, what, compute, concurrency, num_cpus, num_gpus, memory, ray_remote_args) -> P.ComputeSpec:  # noqa: C901 - Ray's compute, concurrency and remote-args rules, in Ray's order
    remote = {}
    for key, value in (("num_cpus", num_cpus), ("num_gpus", num_gpus), ("memory", memory)):
        if value is not None:
            remote[key] = value
    is_class = isinstance(fn, type)
    if num_cpus is not None and num_gpus is not None:
        logger.warning(
            "Specifying both num_cpus and num_gpus for map tasks is experimental, and may result in "
            "scheduling or stability issues."
        )
    ray_remote_args = dict(ray_remote_args or {})
    remote_args_fn = ray_remote_args.pop("ray_remote_args_fn", None)
    if remote_args_fn is not None and not callable(remote_args_fn):
        raise ValueError(f"{what}(ray_remote_args_fn={remote_args_fn!r}): expected a function returning a dict")
    for key, value in ray_remote_args.items():
        if key in _TASK_ONLY_ARGS and is_class:
            raise ValueError(f"{what}({key}=...) applies to tasks; a callable class runs on actors (max_task_retries)")
        if key in _ACTOR_ONLY_ARGS and not is_class:
            raise ValueError(f"{what}({key}=...) applies to an actor pool, which needs a callable class")
        if key not in _REMOTE_ARG_NAMES | _TASK_ONLY_ARGS | _ACTOR_ONLY_ARGS or key == "accelerator_type":
            raise ValueError(f"{what}({key}=...) is not supported by oxray")
        if key == "resources" and value is not None:
            value = tuple(sorted(value.items()))
        remote[key] = value
    actors = False
    min_size, initial_size, max_size, per_actor, task_conc = 1, 1, None, 2, None
    if compute is not None and concurrency is not None:
        raise ValueError(f"{what}: give either compute= or concurrency=, not both")
    if isinstance(compute, ActorPoolStrategy):
        actors, initial_size, max_size = True, compute.initial_size, compute.max_size
        min_size = compute.min_size
        per_actor = compute.max_tasks_in_flight_per_actor
    elif isinstance(compute, TaskPoolStrategy):
        task_conc = compute.size
    elif compute == "actors":
        actors = True
    elif compute not in (None, "tasks"):
        raise ValueError(f"{what}(compute={compute!r}): expected ActorPoolStrategy(...) or TaskPoolStrategy(...)")
    if concurrency is not None:
        if isinstance(concurrency, tuple):
            if not is_class:
                raise ValueError(
                    f"{what}(concurrency={concurrency!r}): a function's concurrency is an integer; "
                    "(min, max) and (min, max, initial) tuples are for callable classes"
                )
            if len(concurrency) not in (2, 3) or not all(
                isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in concurrency
            ):
                raise ValueError(
                    f"{what}(concurrency={concurrency!r}): expected an int, (min, max) or (min, max, initial)"
                )
            lo, hi = concurrency[:2]
            if lo > hi or (len(concurrency) == 3 and not lo <= concurrency[2] <= hi):
                raise ValueError(f"{what}(concurrency={concurrency!r}): expected min <= initial <= max")
            initial = concurrency[2] if len(concurrency) == 3 else lo
        elif isinstance(concurrency, int) and not isinstance(concurrency, bool) and concurrency >= 1:
            lo = hi = initial = concurrency
        else:
            raise ValueError(f"{what}(concurrency={concurrency!r}): expected an integer >= 1 or a (min, max) tuple")
        if is_class:
            actors, min_size, initial_size, max_size = True, lo, initial, hi
        else:
            task_conc = hi
    if is_class and (compute == "tasks" or isinstance(compute, TaskPoolStrategy)):
        raise ValueError(
            f"{what}: the callable class {fn.__name__} runs on an actor pool, not as tasks "
            f"(compute={compute!r}); pass compute=ActorPoolStrategy(...) or None"
        )
    if is_class and not actors:
        # Ray's default for a callable class: an autoscaling pool of 1 to the cluster's CPUs.
        actors, initial_size, max_size = True, 1, None
    if actors and not is_class:
        raise ValueError(f"{what}: an actor pool (compute=ActorPoolStrategy) needs a callable class, not a function")
    return P.ComputeSpec(
        actors=actors,
        min_size=min_size,
        initial_size=initial_size,
        max_size=max_size,
        max_tasks_in_flight_per_actor=per_actor,
        task_concurrency=task_conc,
        remote_args=tuple(sorted(remote.items())),
        remote_args_fn=remote_args_fn,
    )


class Schema:
    """A dataset's column names and types (Arrow types)."""

    def __init__(self, base_schema: pa.Schema):
        self.base_schema = base_schema

    @property
    def names(self) -> list:
        return list(self.base_schema.names)

    @property
    def types(self) -> list:
        return list(self.base_schema.types)

    def __eq__(self, other) -> bool:
        return isinstance(other, Schema) and self.base_schema == other.base_schema

    def __repr__(self) -> str:
        # Ray's layout: names padded to the widest (at least "Column") plus two spaces.
        width = max([len(n) for n in self.names] + [len("Column")]) + 2
        lines = ["Column".ljust(width) + "Type", "------".ljust(width) + "----"]
        lines += [f"{n.ljust(width)}{t}" for n, t in zip(self.names, self.types, strict=True)]
        return "\n".join(lines)


class Dataset:
    """A lazy, streaming dataset: transforms add to its plan; consuming it runs the plan."""

    def __init__(self, plan: P.Plan, context: Optional[DataContext] = None):
        self._plan = plan
        self._context = context
        self._last_stats: Optional[ExecutionStats] = None

    # ---- plan building ----

    def _with(self, op) -> "Dataset":
        return Dataset(self._plan.with_op(op), self._context)

    def __getstate__(self):
        # The settings in force where the dataset was shipped from travel with it.
        state = dict(self.__dict__)
        state["_context"] = self._context or DataContext.get_current().copy()
        state["_last_stats"] = None
        return state

    def _with_execution_options(self, options) -> "Dataset":
        """This dataset, run with `options` instead of the process's DataContext's."""
        ctx = (self._context or DataContext.get_current()).copy()
        ctx.execution_options = options
        return Dataset(self._plan, ctx)

    def __repr__(self) -> str:
        # Ray's: a table when the schema is known without running anything, else a summary.
        schema = P.schema_from_metadata(self._plan)
        if schema is None or not schema.names:
            return self._summary_repr()
        return R.table_repr(schema, P.count_from_metadata(self._plan), materialized=False)

    def _summary_repr(self) -> str:
        """`Dataset(num_rows=..., schema=...)` under the operators to run; without a union, the
        rows and schema are the source's, as Ray shows them (no execution)."""
        schema, num_rows = P.schema_from_metadata(self._plan), None
        if not any(isinstance(op, P.UnionOp) for op in self._plan.ops):
            num_rows = P.count_from_metadata(self._plan)
            source = self._plan.source
            schema = schema if schema is not None else P.schema_from_metadata(P.Plan(source))
            num_rows = num_rows if num_rows is not None else source.count()
        return R.summary_repr(type(self).__name__, self._plan, schema, num_rows, None)

    def explain(self) -> None:
        """Prints the logical and physical plans (Ray's format); runs nothing."""
        print(P.explain(self._plan))

    @property
    def has_started_execution(self) -> bool:
        """Whether this dataset has been (partly or fully) run; a `take` runs a derived one."""
        return self._last_stats is not None

    def serialize_lineage(self) -> bytes:
        """The dataset's plan (not its data) as bytes, to be rebuilt later, possibly on another
        cluster, with `Dataset.deserialize_lineage`. Only plans whose sources read external
        data can travel: blocks in this cluster's object store (from_*(), materialize(), zip)
        cannot."""
        if not P.has_serializable_lineage(self._plan):
            raise ValueError(
                "Lineage-based serialization is not supported for this dataset: it holds data in "
                "this cluster's object store (from the ray.data.from_*() APIs, materialize(), or zip). "
                "Only datasets made with the ray.data.read_*() APIs (and their unions) can be "
                "serialized this way; write the data to external storage with Dataset.write_*() and "
                "serialize a dataset that reads it back instead."
            )
        import cloudpickle

        return cloudpickle.dumps(Dataset(self._plan, self._context))

    @staticmethod
    def deserialize_lineage(serialized_ds: bytes) -> "Dataset":
        """The dataset `serialize_lineage` made these bytes of (it runs from scratch)."""
        import pickle

        ds = pickle.loads(serialized_ds)
        if not isinstance(ds, Dataset):
            raise ValueError(f"deserialize_lineage: the bytes hold a {type(ds).__name__}, not a serialized Dataset")
        return ds

    def map(
        self,
        fn,
        *,
        compute=None,
        fn_args=None,
        fn_kwargs=None,
        fn_constructor_args=None,
        fn_constructor_kwargs=None,
        num_cpus=None,
        num_gpus=None,
        memory=None,
        concurrency=None,
        **ray_remote_args,
    ) -> "Dataset":
        if fn_constructor_args or fn_constructor_kwargs:
            if not isinstance(fn, type):
                raise ValueError("map: fn_constructor_args/kwargs are only for a callable class")
            fn = _bind_ctor(fn, fn_constructor_args, fn_constructor_kwargs)
        remote = dict(ray_remote_args, num_cpus=num_cpus, num_gpus=num_gpus, memory=memory)
        return self._row_op("map", fn, fn_args, fn_kwargs, compute, concurrency, remote)

    def _row_op(self, kind: str, fn, fn_args, fn_kwargs, compute, concurrency, remote: dict) -> "Dataset":
        """map / flat_map / filter: a row UDF as an operator."""
        T.check_fn(fn, kind)
        num_cpus, num_gpus, memory = (remote.pop(k, None) for k in ("num_cpus", "num_gpus", "memory"))
        spec = _compute_spec(fn, kind, compute, concurrency, num_cpus, num_gpus, memory, remote)
        return self._with(P.MapOp(T.MapRows(fn, kind, fn_args, fn_kwargs), spec))

    def flat_map(
        self,
        fn,
        *,
        compute=None,
        fn_args=None,
        fn_kwargs=None,
        fn_constructor_args=None,
        fn_constructor_kwargs=None,
        num_cpus=None,
        num_gpus=None,
        memory=None,
        concurrency=None,
        **ray_remote_args,
    ) -> "Dataset":
        if fn_constructor_args or fn_constructor_kwargs:
            if not isinstance(fn, type):
                raise ValueError("flat_map: fn_constructor_args/kwargs are only for a callable class")
            fn = _bind_ctor(fn, fn_constructor_args, fn_constructor_kwargs)
        remote = dict(ray_remote_args, num_cpus=num_cpus, num_gpus=num_gpus, memory=memory)
        return self._row_op("flat_map", fn, fn_args, fn_kwargs, compute, concurrency, remote)

    def filter(
        self,
        fn=None,
        expr=None,
        *,
        compute=None,
        fn_args=None,
        fn_kwargs=None,
        fn_constructor_args=None,
        fn_constructor_kwargs=None,
        num_cpus=None,
        num_gpus=None,
        memory=None,
        concurrency=None,
        **ray_remote_args,
    ) -> "Dataset":
        if (fn is None) == (expr is None):
            raise ValueError(
                "Exactly one of 'fn' or 'expr' must be provided (filter: give either fn or expr, not both)."
            )
        if expr is not None:
            from oxray.data.expressions import as_expr

            if any(a is not None for a in (fn_args, fn_kwargs, fn_constructor_args, fn_constructor_kwargs)):
                raise ValueError(
                    "when 'expr' is used, 'fn_args/fn_kwargs' or 'fn_constructor_args/fn_constructor_kwargs' "
                    "cannot be used."
                )
            if isinstance(expr, str):
                import warnings

                warnings.warn(
                    "String expressions are deprecated and will be removed in a future version. "
                    "Use predicate expressions from ray.data.expressions instead. "
                    "For example: from ray.data.expressions import col; ds.filter(expr=col('column_name') > 5)",
                    DeprecationWarning,
                    stacklevel=2,
                )
            expr = as_expr(expr, "filter(expr=...)")
            # As in Ray, a column the blocks lack fails when the dataset runs, not here.
            spec = _compute_spec(None, "filter", compute, concurrency, num_cpus, num_gpus, memory, ray_remote_args)
            return self._with(P.MapOp(T.FilterExpr(expr), spec))
        if not callable(fn):
            raise ValueError(f"fn must be a UserDefinedFunction, but got {type(fn).__name__} instead.")
        if fn_constructor_args or fn_constructor_kwargs:
            if not isinstance(fn, type):
                raise ValueError("filter: fn_constructor_args/kwargs are only for a callable class")
            fn = _bind_ctor(fn, fn_constructor_args, fn_constructor_kwargs)
        remote = dict(ray_remote_args, num_cpus=num_cpus, num_gpus=num_gpus, memory=memory)
        return self._row_op("filter", fn, fn_args, fn_kwargs, compute, concurrency, remote)

    def map_batches(
        self,
        fn,
        *,
        batch_size="default",
        compute=None,
        batch_format: Optional[str] = "default",
        zero_copy_batch: bool = False,
        fn_args=None,
        fn_kwargs=None,
        fn_constructor_args=None,
        fn_constructor_kwargs=None,
        num_cpus=None,
        num_gpus=None,
        memory=None,
        concurrency=None,
        **ray_remote_args,
    ) -> "Dataset":
        T.check_fn(fn, "map_batches")
        B.check_batch_format(batch_format)
        if batch_size in ("default", "auto"):
            batch_size = None
        _check_batch_size(batch_size)
        if num_gpus and batch_size is None:
            raise ValueError("map_batches(num_gpus=...) needs an integer batch_size, as in Ray")
        if (fn_constructor_args or fn_constructor_kwargs) and not isinstance(fn, type):
            raise ValueError("map_batches: fn_constructor_args/kwargs are only for a callable class")
        spec = _compute_spec(fn, "map_batches", compute, concurrency, num_cpus, num_gpus, memory, ray_remote_args)
        udf = T.MapBatches(
            fn,
            batch_size,
            batch_format,
            fn_args,
            fn_kwargs,
            fn_constructor_args,
            fn_constructor_kwargs,
            zero_copy_batch,
        )
        return self._with(P.MapOp(udf, spec, batch_size))

    def add_column(
        self, col: str, fn, *, batch_format: Optional[str] = "pandas", compute=None, concurrency=None, **ray_remote_args
    ) -> "Dataset":
        if not isinstance(col, str):
            raise TypeError(f"add_column: the column name must be a string, got {col!r}")
        T.check_fn(fn, "add_column")
        B.check_batch_format(batch_format)
        spec = _compute_spec(fn, "add_column", compute, concurrency, None, None, None, ray_remote_args)
        return self._with(P.MapOp(T.AddColumn(col, fn, batch_format), spec))

    def with_column(self, column_name: str, expr, **ray_remote_args) -> "Dataset":
        """A column computed from an expression: `with_column("z", col("x") * 2 + col("y"))`."""
        from oxray.data.expressions import as_expr

        if not isinstance(column_name, str):
            raise TypeError(f"with_column: the column name must be a string, got {column_name!r}")
        expr = as_expr(expr, "with_column")
        self._check_expr_columns(expr, "with_column")
        spec = _compute_spec(None, "with_column", None, None, None, None, None, ray_remote_args)
        return self._with(P.MapOp(T.WithColumn(column_name, expr), spec))

    def _check_expr_columns(self, expr, what: str) -> None:
        schema = P.schema_from_metadata(self._plan)
        if schema is not None:
            T.check_columns(what, schema.names, sorted(expr.columns()))

    def _columns_arg(self, cols, what: str, check_known: bool = True) -> list:
        """Column names as Ray checks them (with its messages); with `check_known`, names the
        dataset's schema (when known without reading) lacks are refused here."""
        if isinstance(cols, str):
            cols = [cols]
        if not isinstance(cols, list):
            raise TypeError(f"{what} requires 'cols' to be a string or a list of strings.")
        if not all(isinstance(c, str) for c in cols):
            raise ValueError(f"{what} requires all elements of 'cols' to be strings.")
        if len(set(cols)) != len(cols):
            verb = "expects" if what == "drop_columns" else "expected"  # Ray's two wordings
            raise ValueError(f"{what} {verb} unique column names, got duplicate column names: {cols}")
        schema = P.schema_from_metadata(self._plan) if check_known else None
        if schema is not None:
            T.check_columns(what, schema.names, cols)
        return list(cols)

    def select_columns(self, cols, *, compute=None, concurrency=None, **ray_remote_args) -> "Dataset":
        # As Ray: an unknown column fails when the dataset runs (a KeyError), not here.
        cols = self._columns_arg(cols, "select_columns", check_known=False)
        spec = _compute_spec(None, "select_columns", compute, concurrency, None, None, None, ray_remote_args)
        return self._with(P.MapOp(T.SelectColumns(cols), spec))

    def drop_columns(self, cols, *, compute=None, concurrency=None, **ray_remote_args) -> "Dataset":
        cols = self._columns_arg(cols, "drop_columns")
        spec = _compute_spec(None, "drop_columns", compute, concurrency, None, None, None, ray_remote_args)
        return self._with(P.MapOp(T.DropColumns(cols), spec))

    def rename_columns(self, names, *, concurrency=None, **ray_remote_args) -> "Dataset":
        """Renames columns by a dict of old -> new names, or a list of new names for every column."""
        if isinstance(names, dict):
            if not names:
                raise ValueError("rename_columns received 'names' with no entries.")
            if len(set(names.values())) != len(names):
                raise ValueError(f"rename_columns received duplicate values in the 'names': {names}")
            if not all(isinstance(k, str) and isinstance(v, str) for k, v in names.items()):
                raise ValueError("rename_columns requires both keys and values in the 'names' to be strings.")
        elif isinstance(names, list):
            if not names:
                raise ValueError("rename_columns requires 'names' with at least one column name.")
            if len(set(names)) != len(names):
                raise ValueError(f"rename_columns received duplicate values in the 'names': {names}")
            if not all(isinstance(n, str) for n in names):
                raise ValueError("rename_columns requires all elements in the 'names' to be strings.")
            schema = P.schema_from_metadata(self._plan)
            current = schema.names if schema is not None else self.schema().names
            if len(names) != len(current):
                raise ValueError(
                    f"rename_columns requires 'names': {names} length match current schema names: {current}."
                )
            names = dict(zip(current, names, strict=True))
        else:
            raise TypeError(
                f"rename_columns expected names to be either List[str] or Dict[str, str], got {type(names)}."
            )
        spec = _compute_spec(None, "rename_columns", None, concurrency, None, None, None, ray_remote_args)
        return self._with(P.MapOp(T.RenameColumns(names), spec))

    def limit(self, limit: int) -> "Dataset":
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ValueError(f"limit({limit!r}): expected an integer >= 0")
        return self._with(P.LimitOp(limit))

    def union(self, *other: "Dataset") -> "Dataset":
        for o in other:
            if not isinstance(o, Dataset):
                raise TypeError(f"union: expected Datasets, got {type(o).__name__}")
        return self._with(P.UnionOp([o._plan for o in other]))

    def random_shuffle(self, *, seed: Optional[int] = None, num_blocks: Optional[int] = None, **kw) -> "Dataset":
        if kw:
            raise ValueError(f"random_shuffle({', '.join(kw)}=...) is not supported by oxray")
        return self._with(P.AllToAllOp("random_shuffle", {"seed": seed, "num_blocks": num_blocks}))

    def sort(self, key, descending=False, boundaries=None) -> "Dataset":
        """Rows ordered by `key` (a column or columns), as a distributed range-partitioned sort."""
        sort_key = X.SortKey.of(key, descending, "sort")
        self._check_key_columns(sort_key, "sort")
        args = {"key": sort_key, "num_blocks": None}
        if boundaries is not None:
            if len(sort_key.columns) != 1:
                raise ValueError(f"sort(boundaries=...): boundaries split one key column, got {key!r}")
            if not isinstance(boundaries, (list, tuple)) or sorted(boundaries) != list(boundaries):
                raise ValueError(f"sort(boundaries={boundaries!r}): expected an ascending list of key values")
            # Output block i holds boundaries[i-1] <= key < boundaries[i], as in Ray (in
            # reverse block order when descending).
            args.update(boundaries=list(boundaries), num_blocks=len(boundaries) + 1)
        return self._with(P.AllToAllOp("sort", args))

    def _check_key_columns(self, key, what: str) -> None:
        schema = P.schema_from_metadata(self._plan)
        if schema is not None:
            key.check(schema.names, what)

    def groupby(self, key, num_partitions: Optional[int] = None) -> "GroupedData":
        """Rows grouped by `key` (a column, a list of columns, or None for one group)."""
        from oxray.data.grouped_data import GroupedData

        if num_partitions is not None and (
            isinstance(num_partitions, bool) or not isinstance(num_partitions, int) or num_partitions < 1
        ):
            raise ValueError(f"groupby(num_partitions={num_partitions!r}): expected an integer >= 1")
        return GroupedData(self, key, num_partitions)

    def aggregate(self, *aggs):
        """The aggregations over the whole dataset, as a dict of results by aggregation name."""
        from oxray.data import aggregate as A

        aggs = A.check_aggs(aggs, "aggregate")
        schema = self.schema(fetch_if_missing=False)  # known without running anything, or checked in the tasks
        if schema is not None:
            for agg in aggs:
                agg._check_columns(schema.names)
        accs = [A.NOTHING if isinstance(a, A.AggregateFnV2) else a.init(None) for a in aggs]
        for table in self._with(P.MapOp(T.PartialAggregate(aggs), P.ComputeSpec()))._iter_tables(progress=False):
            for row in T.PartialAggregate.partials_of(table):
                accs = [a._combine(acc, part) for a, acc, part in zip(aggs, accs, row, strict=True)]
        return {a.name: a._result(acc) for a, acc in zip(aggs, accs, strict=True)}

    def _aggregation_columns(self, on, what: str, skip=()) -> list:
        """The columns `on` names (a name or a list; None: every column but `skip`), checked."""
        if on is None:
            schema = self.schema()
            on = [c for c in schema.names if c not in skip] if schema is not None else []
        columns = [on] if isinstance(on, str) else on
        if not isinstance(columns, (list, tuple)) or not all(isinstance(c, str) for c in columns):
            raise ValueError(f"{what}(on={on!r}): expected a column name or a list of column names")
        if not columns:
            raise ValueError(f"{what}: at least 1 column to aggregate on has to be provided")
        return list(columns)

    def _aggregate_on(self, agg_cls, on, what: str, **kwargs):
        columns = self._aggregation_columns(on, what)
        result = self.aggregate(*[agg_cls(c, **kwargs) for c in columns])
        return next(iter(result.values())) if len(result) == 1 else result

    def sum(self, on=None, ignore_nulls: bool = True):
        from oxray.data.aggregate import Sum

        return self._aggregate_on(Sum, on, "sum", ignore_nulls=ignore_nulls)

    def min(self, on=None, ignore_nulls: bool = True):
        from oxray.data.aggregate import Min

        return self._aggregate_on(Min, on, "min", ignore_nulls=ignore_nulls)

    def max(self, on=None, ignore_nulls: bool = True):
        from oxray.data.aggregate import Max

        return self._aggregate_on(Max, on, "max", ignore_nulls=ignore_nulls)

    def mean(self, on=None, ignore_nulls: bool = True):
        from oxray.data.aggregate import Mean

        return self._aggregate_on(Mean, on, "mean", ignore_nulls=ignore_nulls)

    def std(self, on=None, ddof: int = 1, ignore_nulls: bool = True):
        from oxray.data.aggregate import Std

        return self._aggregate_on(Std, on, "std", ddof=ddof, ignore_nulls=ignore_nulls)

    def unique(self, column: str, ignore_nulls: bool = False) -> list:
        from oxray.data.aggregate import Unique

        if not isinstance(column, str):
            raise ValueError(f"unique(column={column!r}): expected a column name")
        return self._aggregate_on(Unique, column, "unique", ignore_nulls=ignore_nulls)

    def zip(self, *other: "Dataset") -> "MaterializedDataset":
        """Each row of this dataset with the same row of the others, their columns side by side (a
        name already taken gets a suffix `_1`, `_2`, ...). The others' rows are cut in tasks to this
        dataset's blocks, and a task per block joins them; no process gathers the data."""
        if not other:
            raise ValueError("zip: give at least one other Dataset")
        for o in other:
            if not isinstance(o, Dataset):
                raise TypeError(f"zip: expected Datasets, got {type(o).__name__}")
        left = self.materialize()
        rows = [r for r, _ in left._meta]
        total = sum(rows)
        starts = np.cumsum([0, *rows])
        bounds = [(int(starts[i]), int(starts[i + 1])) for i in range(len(rows))]
        aligned = []
        for o in other:
            right = o.materialize()
            right_rows = [r for r, _ in right._meta]
            if sum(right_rows) != total:
                raise ValueError(f"Cannot zip datasets of different number of rows: {total}, {sum(right_rows)}")
            aligned.append([data for data, _meta in slice_ranges(right._refs, right_rows, bounds)] if rows else [])
        zip_task = remote(_zip_blocks, num_returns=2)
        made = [zip_task.remote(left._refs[i], *[a[i] for a in aligned]) for i in range(len(rows))]
        metas = oxray.get([m for _, m in made])
        refs = [d for d, _ in made]
        schema = oxray.get(refs[0])[0].schema if refs else None
        return MaterializedDataset(refs, [(m["rows"], m["bytes"]) for m in metas], schema, None, "Zip")

    def random_sample(self, fraction: float, *, seed: Optional[int] = None) -> "Dataset":
        """Each row kept with probability `fraction` (seeded: the same rows every run)."""
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 <= fraction <= 1:
            raise ValueError("Fraction must be between 0 and 1.")
        if (isinstance(self._plan.source, StoredBlocksDatasource) and not self._plan.source.refs) or (
            not self._plan.ops and self._plan.source.count() == 0
        ):
            raise ValueError("Cannot sample from an empty Dataset.")
        return self._with(P.MapOp(T.RandomSample(float(fraction), seed), P.ComputeSpec()))

    def randomize_block_order(self, *, seed: Optional[int] = None) -> "Dataset":
        return self._with(P.AllToAllOp("randomize_block_order", {"seed": seed}))

    def repartition(
        self,
        num_blocks: Optional[int] = None,
        target_num_rows_per_block: Optional[int] = None,
        *,
        shuffle: bool = False,
        keys=None,
        sort: bool = False,
    ) -> "Dataset":
        if keys is not None:
            # Rows with equal keys in one block, as a range-partitioned shuffle (each block sorted
            # by key whether or not `sort` asks: a stronger order than Ray promises without it).
            if num_blocks is None or target_num_rows_per_block is not None or shuffle:
                raise ValueError("repartition(keys=...): give num_blocks (and no target_num_rows_per_block or shuffle)")
            if isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or num_blocks < 1:
                raise ValueError(f"repartition(num_blocks={num_blocks!r}): expected an integer >= 1")
            sort_key = X.SortKey.of(keys, False, "repartition")
            self._check_key_columns(sort_key, "repartition")
            return self._with(P.AllToAllOp("sort", {"key": sort_key, "num_blocks": num_blocks}))
        if sort:
            raise ValueError("repartition(sort=True) needs keys=: the columns to sort each block by")
        if num_blocks is not None and target_num_rows_per_block is not None:
            raise ValueError(
                "repartition: Only one of `num_blocks` or `target_num_rows_per_block` must be set, but not both."
            )
        if num_blocks is None and target_num_rows_per_block is None:
            raise ValueError("repartition: Either `num_blocks` or `target_num_rows_per_block` must be set")
        if shuffle and target_num_rows_per_block is not None:
            raise ValueError("repartition: `shuffle` must be False when `target_num_rows_per_block` is set.")
        for name, v in (("num_blocks", num_blocks), ("target_num_rows_per_block", target_num_rows_per_block)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"repartition({name}={v!r}): expected an integer >= 1")
        ds = self.random_shuffle() if shuffle else self
        return ds._with(
            P.AllToAllOp(
                "repartition", {"num_blocks": num_blocks, "target_num_rows_per_block": target_num_rows_per_block}
            )
        )

    # ---- execution ----

    def _execute(
        self, ctx: Optional[DataContext] = None, progress: bool = True, reads_as_tasks: bool = False
    ) -> Iterator[Bundle]:
        """Runs the plan, yielding its output bundles. `reads_as_tasks`: a read the consumer
        would decode in its own process runs as tasks over the cluster instead."""
        ctx = ctx or self._context or DataContext.get_current()
        if not oxray.is_initialized():
            oxray.init()
        stats = ExecutionStats()
        self._last_stats = stats
        if any(isinstance(op, P.AllToAllOp) and op.kind in ("sort", "groupby") for op in self._plan.ops):
            # A sort's (and groupby's) output is ordered: its blocks leave in order.
            ctx = ctx.copy()
            ctx.execution_options.preserve_order = True
        stages = P.optimize(self._plan)
        bars = progress_for(stages, ctx) if progress else None
        executor = Executor(stages, ctx, stats, bars, reads_as_tasks=reads_as_tasks)
        run = executor.run()
        try:
            yield from run
        finally:
            run.close()
            if bars is not None:
                bars.close()

    def _iter_tables(self, ctx=None, progress: bool = True) -> Iterator[pa.Table]:
        for bundle in self._execute(ctx, progress):
            tables = bundle.get_tables()
            bundle.release()
            for t in tables:
                if t.num_rows or t.num_columns:
                    yield t

    def iterator(self) -> DataIterator:
        return DataIterator(self._iter_tables, f"Dataset({P.describe(self._plan)})", self.stats, self.schema)

    def iter_batches(self, **kwargs) -> Iterator:
        return self.iterator().iter_batches(**kwargs)

    def iter_torch_batches(self, **kwargs) -> Iterator:
        return self.iterator().iter_torch_batches(**kwargs)

    def iter_rows(self, **kwargs) -> Iterator[dict]:
        return self.iterator().iter_rows(**kwargs)

    def to_torch(self, **kwargs):
        return self.iterator().to_torch(**kwargs)

    def __iter__(self):
        raise TypeError(
            "`Dataset` objects aren't iterable. To iterate records, call `ds.iter_rows()` or `ds.iter_batches()`."
        )

    def __len__(self) -> int:
        raise AttributeError(
            "Use `ds.count()` to compute the length of a distributed Dataset. This may be an expensive operation."
        )

    def materialize(self) -> "MaterializedDataset":
        refs, tables_meta, reported = [], [], None
        for bundle in self._execute():
            refs.append(bundle.to_ref())
            tables_meta.append((bundle.rows, bundle.size))
            if reported is None and bundle.rows:
                reported = bundle.schema
            bundle.release()
        schema = P.schema_from_metadata(self._plan) or reported
        if schema is None:
            # The first block with rows says it (an empty block's columns may be a guess: Ray
            # leaves an empty dataset's schema unknown).
            first = next((r for r, (rows, _) in zip(refs, tables_meta, strict=True) if rows), None)
            schema = oxray.get(first)[0].schema if first is not None else None
        return MaterializedDataset(refs, tables_meta, schema, self._last_stats)

    def take(self, limit: int = 20) -> list:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ValueError(f"take({limit!r}): expected an integer >= 0")
        rows = []
        for table in self.limit(limit)._iter_tables(progress=False):
            rows.extend(B.rows_of(table))
        return rows[:limit]

    def take_all(self, limit: Optional[int] = None) -> list:
        rows = []
        for table in self._iter_tables():
            rows.extend(B.rows_of(table))
            if limit is not None and len(rows) > limit:
                raise ValueError(f"take_all: the dataset has more than the given limit={limit} rows")
        return rows

    def take_batch(self, batch_size: int = 20, *, batch_format: Optional[str] = "default"):
        _check_batch_size(batch_size, allow_none=False)
        B.check_batch_format(batch_format)
        tables = list(self.limit(batch_size)._iter_tables(progress=False))
        if not tables:
            raise ValueError("The dataset is empty.")
        return B.to_batch(B.concat(tables), batch_format)

    def show(self, limit: int = 20) -> None:
        for row in self.take(limit):
            print(row)

    def count(self) -> int:
        n = P.count_from_metadata(self._plan)
        if n is not None:
            return n
        return sum(b.rows for b in self._count_bundles())

    def _count_bundles(self):
        for bundle in self._execute():
            bundle.release()
            yield bundle

    def schema(self, fetch_if_missing: bool = True) -> Optional[Schema]:
        schema = P.schema_from_metadata(self._plan)
        if schema is None and fetch_if_missing:
            tables = list(self.limit(1)._iter_tables(progress=False))
            if tables:
                schema = tables[0].schema
        return Schema(schema) if schema is not None else None

    def columns(self, fetch_if_missing: bool = True) -> Optional[list]:
        schema = self.schema(fetch_if_missing)
        return schema.names if schema is not None else None

    def to_pandas(self, limit: Optional[int] = None):
        tables = list(self._iter_tables())
        table = B.concat(tables) if tables else pa.table({})
        if limit is not None and table.num_rows > limit:
            raise ValueError(f"to_pandas: the dataset has {table.num_rows} rows, more than limit={limit}")
        return B.table_to_pandas(table)

    def to_arrow_refs(self) -> list:
        return self.materialize()._table_refs()

    def to_numpy_refs(self, *, column: Optional[str] = None) -> list:
        out = []
        for table in self._iter_tables():
            arrays = B.table_to_numpy(table)
            out.append(oxray.put(arrays[column] if column is not None else arrays))
        return out

    def to_pandas_refs(self) -> list:
        return [oxray.put(B.table_to_pandas(t)) for t in self._iter_tables()]

    def stats(self) -> str:
        """How the last run of this dataset went, per operator (Ray's layout); "" before any.
        A dataset made from data held here reports the blocks its conversion made."""
        if self._last_stats is None or self._last_stats.scheduler is None:
            source = self._plan.source
            if isinstance(source, StoredBlocksDatasource) and not self._plan.ops:
                return stored_blocks_text(source.name, source.meta)
            return ""
        return stats_text(self._last_stats)

    def input_files(self) -> list:
        files = getattr(self._plan.source, "files", None) or []
        return [f if isinstance(f, str) else f[0] for f in files]

    def size_bytes(self) -> int:
        return sum(b.size for b in self._count_bundles())

    # ---- splitting ----

    def _split_rows(self, bounds_for, name: str) -> list:
        """Materializes the dataset, then cuts it by row ranges with tasks over its blocks (no
        process gathers the data): `bounds_for(total rows)` gives the (lo, hi) ranges."""
        done = self.materialize()
        rows = [r for r, _ in done._meta]
        bounds = bounds_for(sum(rows))
        if not done._refs:
            return [MaterializedDataset([], [], done._schema, None, name) for _ in bounds]
        out = []
        for data_ref, meta_ref in slice_ranges(done._refs, rows, bounds):
            meta = oxray.get(meta_ref)
            out.append(MaterializedDataset([data_ref], [(meta["rows"], meta["bytes"])], done._schema, None, name))
        return out

    def split(self, n: int, *, equal: bool = False, locality_hints=None) -> list:
        _check_splits(n, locality_hints, "split")

        def bounds(total):
            per, extra = divmod(total, n)
            sizes = [per + (0 if equal or i >= extra else 1) for i in range(n)]
            starts = np.cumsum([0, *sizes])
            return [(int(starts[i]), int(starts[i + 1])) for i in range(n)]

        return self._split_rows(bounds, "Split")

    def split_at_indices(self, indices: list) -> list:
        if len(indices) < 1:
            raise ValueError("split_at_indices([]): indices must be at least of length 1")
        if any(b < a for a, b in zip([0, *indices], indices, strict=False)):
            raise ValueError(f"split_at_indices({indices!r}): indices must be sorted and >= 0")

        def bounds(total):
            cuts = [0, *(min(i, total) for i in indices), total]
            return list(zip(cuts, cuts[1:], strict=False))

        return self._split_rows(bounds, "Split")

    def split_proportionately(self, proportions: list) -> list:
        """Splits of these fractions of the rows (they sum below 1; the rest is the last split)."""
        if not isinstance(proportions, (list, tuple)) or len(proportions) < 1:
            raise ValueError("proportions must be at least of length 1")
        if sum(proportions) >= 1:
            raise ValueError("proportions must sum to less than 1")
        if any(p <= 0 for p in proportions):
            raise ValueError("proportions must be bigger than 0")
        done = self.materialize()
        total = sum(r for r, _ in done._meta)
        indices = [int(total * c) for c in np.cumsum(proportions)]
        # Each split keeps at least one row: equal cut points move left.
        for i in range(len(indices) - 2, -1, -1):
            if indices[i] >= indices[i + 1]:
                indices[i] = indices[i + 1] - 1
        if any(i <= 0 for i in indices) or (indices and indices[-1] >= total):
            raise ValueError("Couldn't create non-empty splits with the given proportions.")
        return done.split_at_indices(indices)

    def join(
        self,
        ds: "Dataset",
        join_type: str,
        num_partitions: int,
        on=("id",),
        right_on=None,
        left_suffix: Optional[str] = None,
        right_suffix: Optional[str] = None,
        *,
        partition_size_hint=None,
        aggregator_ray_remote_args=None,
        validate_schemas: bool = False,
    ) -> "MaterializedDataset":
        """Rows of this dataset and `ds` matched on key columns, as a distributed join: both sides
        are range-partitioned on their keys by the same sampled boundaries, and a task per
        partition joins its two parts (Arrow's hash join)."""
        from oxray.data._internal import join as J

        if not isinstance(ds, Dataset):
            raise TypeError(f"join: expected a Dataset to join with, got {type(ds).__name__}")
        for name, value in (
            ("partition_size_hint", partition_size_hint),
            ("aggregator_ray_remote_args", aggregator_ray_remote_args),
        ):
            if value is not None:
                raise ValueError(f"join({name}=...) is not supported by oxray")
        if isinstance(num_partitions, bool) or not isinstance(num_partitions, int) or num_partitions < 1:
            raise ValueError(f"join(num_partitions={num_partitions!r}): expected an integer >= 1")
        spec = J.JoinSpec.of(join_type, on, right_on, left_suffix, right_suffix)
        left, right = self.materialize(), ds.materialize()
        spec.check(left._schema, right._schema, validate_schemas)
        return J.run_join(left, right, spec, num_partitions)

    def train_test_split(self, test_size, *, shuffle: bool = False, seed: Optional[int] = None, stratify=None):
        if isinstance(test_size, bool) or not isinstance(test_size, (int, float)):
            raise TypeError(f"train_test_split(test_size={test_size!r}): expected a float or an int")
        if isinstance(test_size, float) and not 0 < test_size < 1:
            raise ValueError(f"train_test_split(test_size={test_size!r}): a float must be between 0 and 1")
        if stratify is not None:
            if shuffle:
                raise ValueError(
                    "Cannot specify both 'shuffle=True' and 'stratify' parameters. Stratified splitting "
                    "maintains class proportions and is incompatible with shuffling."
                )
            return self._stratified_split(test_size, stratify)

        def bounds(n):
            if isinstance(test_size, float):
                n_test = math.ceil(n * test_size)
            elif not 0 < test_size < n:
                raise ValueError(f"train_test_split(test_size={test_size!r}): expected 0 < test_size < {n}")
            else:
                n_test = test_size
            return [(0, n - n_test), (n - n_test, n)]

        ds = self.random_shuffle(seed=seed) if shuffle else self
        return tuple(ds._split_rows(bounds, "TrainTestSplit"))

    def _stratified_split(self, test_size, stratify: str) -> tuple:
        """Train and test sets that keep each `stratify` class's share, as Ray's: the last
        `int(n * test_size)` rows of each class (of n rows) go to the test set."""
        if isinstance(test_size, int):
            total = self.count()
            if not 0 < test_size < total:
                raise ValueError(f"train_test_split(test_size={test_size!r}): expected 0 < test_size < {total}")
            test_size = test_size / total
        column = T.TRAIN_TEST_COLUMN
        fraction = float(test_size)

        def mark_train_rows(group):
            n = len(group)
            n_test = int(n * fraction)
            group[column] = np.array([True] * (n - n_test) + [False] * n_test)
            return group

        marked = self.groupby(stratify).map_groups(mark_train_rows).materialize()
        train, test = _split_by_train_flag(marked, column)
        return train.materialize(), test.materialize()

    def streaming_train_test_split(
        self, test_size: float, *, split_type: str = "random", hash_column: Optional[str] = None, seed=None, **kw
    ) -> tuple:
        """Lazy train and test datasets: each row marked by a seeded draw (`random`) or a hash of
        `hash_column` (`hash`), then each side keeps its rows; nothing is materialized."""
        if kw:
            raise ValueError(f"streaming_train_test_split({', '.join(kw)}=...) is not supported by oxray")
        if isinstance(test_size, bool) or not isinstance(test_size, (int, float)) or not 0 < test_size < 1:
            raise ValueError("test_size must be between 0 and 1.")
        if seed is not None and split_type == "hash":
            raise ValueError("seed is not supported for hash split")
        if hash_column is not None and split_type == "random":
            raise ValueError("hash_column is not supported for random split")
        if split_type not in ("random", "hash"):
            raise ValueError(f"Invalid split type: {split_type}")
        if split_type == "hash" and hash_column is None:
            raise ValueError("hash_column is required for hash split")
        marked = self._with(P.MapOp(T.MarkTrainRows(float(test_size), split_type, hash_column, seed), P.ComputeSpec()))
        column = T.TRAIN_TEST_COLUMN
        train, test = _split_by_train_flag(marked, column)
        return train, test

    def streaming_split(self, n: int, *, equal: bool = False, locality_hints=None) -> list:
        _check_splits(n, locality_hints, "streaming_split")
        from oxray.data._internal.split import streaming_split

        return streaming_split(self, n, equal)

    # ---- writing ----

    def _write(  # noqa: C901 - the writer options' checks, in Ray's order, then the write
        self, fmt: str, path, kwargs: dict, *, partition_cols=None, column=None, options=None, arrow_args_fn=None
    ) -> None:
        """Writes the dataset as files under `path`; `kwargs` are the writer's shared options and,
        for parquet, pyarrow's writing options (Ray's `**arrow_parquet_args`)."""
        what = f"write_{fmt}"
        filesystem = kwargs.pop("filesystem", None)
        try_create_dir = kwargs.pop("try_create_dir", True)
        filenames = kwargs.pop("filename_provider", None)
        if filenames is not None:
            from oxray.data.datasource.filename_provider import check_provider

            check_provider(filenames, what)
        min_rows_per_file = kwargs.pop("min_rows_per_file", None)
        max_rows_per_file = kwargs.pop("max_rows_per_file", None)
        mode = _check_mode(kwargs.pop("mode", None), what)
        arrow_args = {}
        if fmt == "parquet":
            from oxray.data._internal.write import check_parquet_args

            arrow_args = {k: kwargs.pop(k) for k in list(kwargs) if k not in _SHARED_WRITE_ARGS + _RAY_WRITE_ARGS}
            check_parquet_args(arrow_args, what)
            if arrow_args_fn is not None and not callable(arrow_args_fn):
                raise TypeError(
                    f"{what}(arrow_parquet_args_fn={arrow_args_fn!r}): expected a function returning a dict"
                )
        if kwargs:
            raise ValueError(f"{what}({', '.join(kwargs)}=...) is not supported by oxray")
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"write_{fmt}: path must be a string, got {type(path).__name__}")
        (path,), fs = resolve_paths([path], what, filesystem)
        if fs is not None:
            raise NotImplementedError(
                f"{what}(filesystem={type(filesystem).__name__}): oxray writes local paths and s3:// URIs itself "
                "(S3 settings from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...); writing through another filesystem "
                "is not supported yet: pass filesystem=None"
            )
        if not try_create_dir and "://" not in path and not os.path.isdir(path):
            raise FileNotFoundError(f"{what}(try_create_dir=False): the directory {path} does not exist")
        for name, v in (("max_rows_per_file", max_rows_per_file), ("min_rows_per_file", min_rows_per_file)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"{name} must be a positive integer (write_{fmt} got {name}={v!r})")
        if min_rows_per_file and max_rows_per_file and min_rows_per_file > max_rows_per_file:
            raise ValueError(
                f"min_rows_per_file ({min_rows_per_file}) cannot be greater than "
                f"max_rows_per_file ({max_rows_per_file})"
            )
        if partition_cols is not None:
            partition_cols = self._columns_arg(partition_cols, f"write_{fmt}(partition_cols)")
        # As Ray, a directory that exists counts as existing even when empty.
        if mode != "append" and path_exists(path):
            if mode in ("error", "create"):
                raise ValueError(
                    f"Path {path} already exists. If this is unexpected, use mode='ignore' to ignore those files"
                )
            if mode == "ignore":
                return
            remove_existing(path)  # overwrite
        writer = WriteBlocks(
            fmt,
            path,
            uuid.uuid4().hex,
            partition_cols,
            max_rows_per_file,
            column,
            options or {},
            filenames,
            mode=mode,
            arrow_args=arrow_args,
            arrow_args_fn=arrow_args_fn,
        )
        ds = self._with(P.MapOp(writer, P.ComputeSpec(), min_rows_per_file, bundle_inputs=bool(min_rows_per_file)))
        finished = []
        try:
            for written in ds._iter_tables():
                finished.extend(written.column("path").to_pylist())
        except BaseException:
            cleanup_written(path, writer.token, finished)
            raise

    def write_datasink(self, datasink, *, ray_remote_args=None, concurrency: Optional[int] = None) -> None:
        """Writes every block through a user's `Datasink` (`oxray.data.datasource.Datasink`)."""
        from oxray.data._internal.columns import tensor_values
        from oxray.data._internal.datasource import _accepted_kwargs
        from oxray.data._internal.write import DatasinkWrite
        from oxray.data.datasource import WriteResult

        if not hasattr(datasink, "write"):
            raise TypeError(f"write_datasink: expected a Datasink, got {type(datasink).__name__}")
        spec = _compute_spec(None, "write_datasink", None, concurrency, None, None, None, ray_remote_args)
        min_rows = datasink.min_rows_per_write
        writer = DatasinkWrite(datasink)
        ds = self._with(P.MapOp(writer, spec, min_rows, bundle_inputs=bool(min_rows)))
        start = datasink.on_write_start
        start(**_accepted_kwargs(start, {"schema": None}))
        rows = size = 0
        returns = []
        try:
            if datasink.supports_distributed_writes:
                tables = ds._iter_tables()
            else:  # the sink writes from this process only
                tables = (t for table in self._iter_tables() for t in writer(table))
            for table in tables:
                rows += sum(table.column("rows").to_pylist())
                size += sum(table.column("bytes").to_pylist())
                returns.extend(tensor_values(table.column("returned").combine_chunks()))
        except Exception as e:
            datasink.on_write_failed(e)
            raise
        datasink.on_write_complete(WriteResult(num_rows=rows, size_bytes=size, write_returns=returns))

    def write_parquet(
        self, path: str, *, partition_cols=None, compression: str = "snappy", arrow_parquet_args_fn=None, **kwargs
    ) -> None:
        """Parquet files under `path`. pyarrow's writing options (`row_group_size`, `schema`, ...,
        and `arrow_parquet_args_fn` returning more of them) are honoured by writing with pyarrow."""
        self._write(
            "parquet",
            path,
            kwargs,
            partition_cols=partition_cols,
            options={"compression": compression},
            arrow_args_fn=arrow_parquet_args_fn,
        )

    def write_csv(self, path: str, **kwargs) -> None:
        self._write("csv", path, kwargs)

    def write_json(self, path: str, **kwargs) -> None:
        self._write("json", path, kwargs)

    def write_images(self, path: str, column: str, file_format: str = "png", **kwargs) -> None:
        """Each row's image in `column` (an H×W or H×W×C array) as one file, encoded by PIL in
        `file_format`, as Ray's."""
        from PIL import Image

        self._columns_arg([column], "write_images(column)")
        Image.init()
        if not isinstance(file_format, str) or file_format.upper() not in Image.SAVE:
            raise ValueError(
                f"write_images(file_format={file_format!r}): expected a format PIL writes, such as 'png' or 'jpeg'"
            )
        per_file = [k for k in ("min_rows_per_file", "max_rows_per_file") if k in kwargs]
        if per_file:
            raise ValueError(f"write_images({', '.join(per_file)}=...): each row is its own file")
        self._write("images", path, kwargs, column=column, options={"file_format": file_format})

    def write_numpy(self, path: str, *, column: str, **kwargs) -> None:
        self._columns_arg([column], "write_numpy(column)")
        self._write("numpy", path, kwargs, column=column)


def _zip_blocks(left, *rights):
    """One block of `zip`: the left block's columns, then each right block's (renamed if taken)."""
    table = B.concat_bundles([left])
    for blocks in rights:
        right = B.concat_bundles([blocks])
        for name in right.column_names:
            new, i = name, 1
            while new in table.column_names:
                new, i = f"{name}_{i}", i + 1
            table = table.append_column(new, right.column(name))
    return [B.IpcBlock(table)], {"rows": table.num_rows, "bytes": table.nbytes}


_SAVE_MODES = ("append", "overwrite", "ignore", "error", "create")
# The options every file writer takes; write_parquet hands the others to pyarrow.
_SHARED_WRITE_ARGS = (
    "filesystem",
    "try_create_dir",
    "filename_provider",
    "min_rows_per_file",
    "max_rows_per_file",
    "mode",
)
# Ray's other write options: not pyarrow's, and refused by name when given.
_RAY_WRITE_ARGS = ("ray_remote_args", "concurrency", "arrow_open_stream_args", "num_rows_per_file")


def _check_mode(mode, what: str) -> str:
    """Ray's SaveMode as a name: append (the default), overwrite, ignore, error or create."""
    if mode is None:
        return "append"
    name = str(getattr(mode, "value", mode)).lower()
    if name not in _SAVE_MODES:
        raise ValueError(f"{what}(mode={mode!r}): expected one of {', '.join(_SAVE_MODES)}")
    return name


def _check_splits(n, locality_hints, what: str) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"{what}({n!r}): expected an integer >= 1")
    if locality_hints is not None and len(locality_hints) != n:
        raise ValueError(f"{what}: locality_hints must have {n} entries, got {len(locality_hints)}")


def _split_by_train_flag(marked: "Dataset", column: str) -> tuple:
    """The rows whose boolean `column` is true, and the others, each without the column."""
    from oxray.data.expressions import col

    train = marked.filter(expr=col(column)).drop_columns([column])
    test = marked.filter(expr=~col(column)).drop_columns([column])
    return train, test


def _bind_ctor(cls, args, kwargs):
    args, kwargs = tuple(args or ()), dict(kwargs or {})

    class Bound(cls):
        def __init__(self):
            super().__init__(*args, **kwargs)

    Bound.__name__ = Bound.__qualname__ = cls.__name__
    return Bound


class MaterializedDataset(Dataset):
    """A dataset whose blocks are in the object store."""

    def __init__(self, refs: list, meta: list, schema, stats=None, name: str = "FromBlocks"):
        self._refs = refs
        self._meta = meta
        self._schema = schema
        source = StoredBlocksDatasource(refs, meta, schema, name)
        super().__init__(P.Plan(source))
        self._last_stats = stats

    def num_blocks(self) -> int:
        return len(self._refs)

    def __repr__(self) -> str:
        # Ray's: the table with up to 10 rows (the first and last 5 of a longer dataset).
        num_rows = sum(rows for rows, _ in self._meta)
        if self._schema is None or not self._schema.names:
            return R.summary_repr(type(self).__name__, None, None, num_rows, len(self._refs))
        head_rows, tail_rows = R.preview_row_counts(num_rows)
        held = [(ref, rows) for ref, (rows, _) in zip(self._refs, self._meta, strict=True) if rows]
        head, tail = [], []
        try:
            for ref, _ in held:
                if len(head) >= head_rows:
                    break
                head.extend(B.rows_of(B.concat(oxray.get(ref)).slice(0, head_rows - len(head))))
            for ref, rows in reversed(held):
                if len(tail) >= tail_rows:
                    break
                need = tail_rows - len(tail)
                tail[:0] = B.rows_of(B.concat(oxray.get(ref)).slice(max(rows - need, 0)))
        except oxray.exceptions.RayError:
            head, tail = [], []  # the blocks are gone (say, after shutdown): the table without rows, as Ray
        return R.table_repr(self._schema, num_rows, True, head, tail)

    def _table_refs(self) -> list:
        return [oxray.put(B.concat(oxray.get(r))) for r in self._refs]


def from_tables(tables: list, name: str) -> MaterializedDataset:
    """A materialized dataset of tables held here (put into the object store now)."""
    tables = [t for t in tables]
    refs = [oxray.put([B.IpcBlock(t)]) for t in tables]
    meta = [(t.num_rows, t.nbytes) for t in tables]
    schema = tables[0].schema if tables else None
    return MaterializedDataset(refs, meta, schema, None, name)
