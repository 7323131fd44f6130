"""`GroupedData`: what `Dataset.groupby(key)` returns; aggregations and `map_groups` per group.

Groups are formed by a distributed range-partitioned shuffle on the key (see
`_internal/exchange.py`), so each group's rows meet in one reduce task, and the output comes
sorted by key, as Ray's does.
"""

from __future__ import annotations

from typing import Optional

from oxray.data import aggregate as A
from oxray.data._internal import block as B
from oxray.data._internal import exchange as X
from oxray.data._internal import plan as P
from oxray.data._internal import transforms as T


class GroupedData:
    def __init__(self, dataset, key, num_partitions: Optional[int] = None):
        self._dataset = dataset
        self._key = key
        self._num_partitions = num_partitions
        if key is not None:
            self._sort_key = X.SortKey.of(key, False, "groupby")
            dataset._check_key_columns(self._sort_key, "groupby")
        else:
            self._sort_key = None

    def __repr__(self) -> str:
        return f"GroupedData(dataset={self._dataset!r}, key={self._key!r})"

    def _exchange(self, reducer):
        from oxray.data.context import DataContext, ShuffleStrategy

        ctx = DataContext.get_current()
        args = {
            "key": self._sort_key,
            "reducer": reducer,
            "num_blocks": self._num_partitions,
        }
        if ctx.shuffle_strategy == ShuffleStrategy.HASH_SHUFFLE:
            # Groups dealt to partitions by a hash of the key: no sampling, and groups are not in key
            # order across partitions (each partition's groups still come sorted).
            args["hash"] = True
            args["num_blocks"] = self._num_partitions or ctx.default_hash_shuffle_parallelism
        return self._dataset._with(P.AllToAllOp("groupby", args))

    def aggregate(self, *aggs):
        """One row per group: the key columns and each aggregation's result, by its name."""
        from oxray.data.read_api import from_items

        aggs = A.check_aggs(aggs, "aggregate")
        schema = self._dataset.schema(fetch_if_missing=False)
        if schema is not None:
            for agg in aggs:
                agg._check_columns(schema.names)
        if self._sort_key is None:
            return from_items([self._dataset.aggregate(*aggs)])
        return self._exchange(X.GroupAggregate(self._sort_key, aggs))

    def map_groups(
        self,
        fn,
        *,
        zero_copy_batch: bool = True,
        compute=None,
        batch_format: Optional[str] = "default",
        fn_args=None,
        fn_kwargs=None,
        fn_constructor_args=None,
        fn_constructor_kwargs=None,
        num_cpus=None,
        num_gpus=None,
        memory=None,
        concurrency=None,
        **ray_remote_args,
    ):
        """`fn` applied to each group as one batch (a pandas DataFrame by default, as in Ray);
        its outputs make the dataset. As Ray does it: a shuffle brings each group's rows
        together, sorted by the key, then a map step (tasks, or an actor pool for a callable
        class, with the usual compute, concurrency and remote options) splits each block into
        its groups."""
        from oxray.data.dataset import _compute_spec

        T.check_fn(fn, "map_groups")
        B.check_batch_format(batch_format)
        if (fn_constructor_args or fn_constructor_kwargs) and not isinstance(fn, type):
            raise ValueError("map_groups: fn_constructor_args/kwargs are only for a callable class")
        spec = _compute_spec(fn, "map_groups", compute, concurrency, num_cpus, num_gpus, memory, ray_remote_args)
        if self._sort_key is None:
            grouped, key_columns = self._dataset.repartition(1), ()  # one group: the whole dataset
        else:
            grouped, key_columns = self._exchange(None), self._sort_key.columns
        udf = T.MapGroups(
            key_columns,
            fn,
            batch_format,
            fn_args,
            fn_kwargs,
            fn_constructor_args,
            fn_constructor_kwargs,
            zero_copy_batch,
        )
        return grouped._with(P.MapOp(udf, spec))

    def with_column(self, column_name: str, expr, **ray_remote_args):
        """Each group with a column computed from `expr` over that group's rows (so a `@udf`
        in it sees one group at a time), as Ray's."""
        from oxray.data.expressions import as_expr

        step = T.WithColumn(column_name, as_expr(expr, "GroupedData.with_column"))

        def add_column(group):
            return step(group)[0]

        add_column.__name__ = f"with_column({column_name})"
        return self.map_groups(add_column, batch_format="pyarrow", **ray_remote_args)

    def _simple(self, agg_cls, on, **kwargs):
        keys = self._sort_key.columns if self._sort_key is not None else ()
        columns = self._dataset._aggregation_columns(on, f"groupby({self._key!r})", skip=keys)
        return self.aggregate(*[agg_cls(c, **kwargs) for c in columns])

    def count(self):
        return self.aggregate(A.Count())

    def sum(self, on=None, ignore_nulls: bool = True):
        return self._simple(A.Sum, on, ignore_nulls=ignore_nulls)

    def min(self, on=None, ignore_nulls: bool = True):
        return self._simple(A.Min, on, ignore_nulls=ignore_nulls)

    def max(self, on=None, ignore_nulls: bool = True):
        return self._simple(A.Max, on, ignore_nulls=ignore_nulls)

    def mean(self, on=None, ignore_nulls: bool = True):
        return self._simple(A.Mean, on, ignore_nulls=ignore_nulls)

    def std(self, on=None, ddof: int = 1, ignore_nulls: bool = True):
        return self._simple(A.Std, on, ddof=ddof, ignore_nulls=ignore_nulls)
