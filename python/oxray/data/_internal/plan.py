"""The logical plan of a dataset, and the stages the engine's optimizer makes of it.

A plan is a source followed by operators holding the Python UDFs. The optimizer is the
engine's (`oxray-data`'s `plan.rs`, through `_native.data_optimize`): it sees each operator's
kind, columns and compute by id, pushes column selection and `limit` into a parquet reader,
fuses consecutive row/batch UDFs (and the read before them) into one stage, and answers
`count` from metadata. This module encodes a plan for it and turns its stages back into
Python objects; the schema a plan keeps (`schema_from_metadata`) stays here, with pyarrow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from oxray import _native
from oxray.data._internal import transforms as T
from oxray.data._internal.datasource import Datasource, ParquetDatasource


@dataclass(frozen=True)
class ComputeSpec:
    """How a map operator runs: as tasks, or on a pool of actors (class UDFs)."""

    actors: bool = False
    initial_size: int = 1  # actors the pool starts with
    max_size: Optional[int] = None  # None: up to the cluster's CPUs
    max_tasks_in_flight_per_actor: int = 2
    task_concurrency: Optional[int] = None
    remote_args: tuple = ()  # sorted (key, value) pairs: num_cpus, num_gpus, resources, memory

    def remote_options(self) -> dict:
        return dict(self.remote_args)


@dataclass
class MapOp:
    fn: T.BlockFn
    compute: ComputeSpec = field(default_factory=ComputeSpec)
    batch_size: Optional[int] = None
    # Whole rows of `batch_size` must reach one call (min_rows_per_file): never fused into a read.
    bundle_inputs: bool = False


@dataclass
class LimitOp:
    n: int


@dataclass
class UnionOp:
    others: list  # plans


@dataclass
class AllToAllOp:
    kind: str  # random_shuffle, randomize_block_order, repartition, sort, groupby
    args: dict


@dataclass
class Plan:
    source: Datasource
    ops: tuple = ()

    def with_op(self, op) -> "Plan":
        return Plan(self.source, self.ops + (op,))


# ---- stages (what the executor runs) ----


@dataclass
class ReadStage:
    source: Datasource
    name: str


@dataclass
class MapStage:
    fns: list
    compute: ComputeSpec
    batch_size: Optional[int]
    name: str
    read: Optional[Datasource] = None  # a read fused into this stage's tasks


@dataclass
class LimitStage:
    n: int
    name: str = "Limit"


@dataclass
class AllToAllStage:
    kind: str
    args: dict
    name: str


@dataclass
class UnionStage:
    inputs: list  # lists of stages
    name: str = "Union"


_ALL_TO_ALL_NAMES = {
    "random_shuffle": "RandomShuffle",
    "randomize_block_order": "RandomizeBlockOrder",
    "repartition": "Repartition",
    "sort": "Sort",
    "groupby": "Aggregate",
}

_UDF_KINDS = {T.SelectColumns: "select", T.DropColumns: "drop", T.RenameColumns: "rename"}


class _Encoded:
    """A plan as the engine's optimizer takes it (tuples), and the Python objects its ids name."""

    def __init__(self, plan: Plan, with_counts: bool):
        self.ops: dict = {}
        self.sources: dict = {}
        self.tokens: list = []  # non-numeric remote args, compared by equality
        self.with_counts = with_counts
        self.value = self._plan(plan)

    def _id(self) -> int:
        return len(self.ops) + len(self.sources)

    def _token(self, value) -> int:
        for i, known in enumerate(self.tokens):
            if known == value:
                return i
        self.tokens.append(value)
        return len(self.tokens) - 1

    def compute(self, spec: ComputeSpec) -> tuple:
        args = []
        for key, value in spec.remote_args:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                args.append((key, float(value), None))
            else:
                args.append((key, None, self._token(value)))
        return (
            spec.actors,
            spec.initial_size,
            spec.max_size,
            spec.max_tasks_in_flight_per_actor,
            spec.task_concurrency,
            args,
        )

    def decode_compute(self, value: tuple) -> ComputeSpec:
        actors, initial, max_size, per_actor, concurrency, args = value
        remote_args = []
        for key, number, token in args:
            if token is not None:
                remote_args.append((key, self.tokens[token]))
            else:
                remote_args.append((key, int(number) if number == int(number) else number))
        return ComputeSpec(actors, initial, max_size, per_actor, concurrency, tuple(sorted(remote_args)))

    def _plan(self, plan: Plan) -> tuple:
        source = plan.source
        sid = self._id()
        self.sources[sid] = source
        columns = source.schema().names if isinstance(source, ParquetDatasource) else None
        rows = source.count() if self.with_counts else None
        read_compute = self.compute(source.read_compute) if source.read_compute is not None else None
        ops = []
        for op in plan.ops:
            oid = self._id()
            self.ops[oid] = op
            if isinstance(op, MapOp):
                kind = _UDF_KINDS.get(type(op.fn), "udf")
                cols = list(op.fn.cols) if kind == "select" else []
                ops.append(
                    (
                        "map",
                        oid,
                        op.fn.name,
                        kind,
                        cols,
                        bool(op.fn.is_class_udf),
                        self.compute(op.compute),
                        op.batch_size,
                        op.bundle_inputs,
                    )
                )
            elif isinstance(op, LimitOp):
                ops.append(("limit", oid, op.n))
            elif isinstance(op, AllToAllOp):
                ops.append(("all_to_all", oid, _ALL_TO_ALL_NAMES[op.kind]))
            elif isinstance(op, UnionOp):
                ops.append(("union", oid, [self._plan(p) for p in op.others]))
            else:  # pragma: no cover - every op type is handled above
                raise TypeError(f"unknown operator {op!r}")
        return ((sid, source.name, columns, rows, read_compute), ops)

    def read(self, value: tuple) -> Datasource:
        sid, columns, limit = value
        source = self.sources[sid]
        if columns is not None or limit is not None:
            source = source.with_(columns=columns, limit=limit)
        return source

    def stages(self, values: list) -> list:
        out = []
        for value in values:
            kind = value[0]
            if kind == "read":
                _, name, read = value
                out.append(ReadStage(self.read(read), name))
            elif kind == "map":
                _, name, op_ids, compute, batch_size, read = value
                fns = [self.ops[i].fn for i in op_ids]
                out.append(
                    MapStage(fns, self.decode_compute(compute), batch_size, name, self.read(read) if read else None)
                )
            elif kind == "limit":
                out.append(LimitStage(value[1]))
            elif kind == "all_to_all":
                _, op_id, name = value
                op = self.ops[op_id]
                out.append(AllToAllStage(op.kind, op.args, name))
            else:
                out.append(UnionStage([self.stages(v) for v in value[1]]))
        return out


def optimize(plan: Plan) -> list:
    """The stages to run, after the engine's pushdown and fusion."""
    encoded = _Encoded(plan, with_counts=False)
    values, _ = _native.data_optimize(encoded.value)
    return encoded.stages(values)


def describe(plan: Plan) -> str:
    """The optimized stages as one line."""
    return _native.data_optimize(_Encoded(plan, with_counts=False).value)[1]


def count_from_metadata(plan: Plan) -> Optional[int]:
    """The row count without reading data, when no operator can change it."""
    return _native.data_count_from_metadata(_Encoded(plan, with_counts=True).value)


def schema_from_metadata(plan: Plan) -> Any:
    """The schema without reading data, when no UDF can change it, else None."""
    schema = plan.source.schema()
    if schema is None:
        return None
    import pyarrow as pa

    for op in plan.ops:
        if isinstance(op, MapOp):
            fn = op.fn
            if isinstance(fn, T.SelectColumns):
                T.check_columns("select_columns", schema.names, fn.cols)
                schema = pa.schema([schema.field(c) for c in fn.cols])
            elif isinstance(fn, T.DropColumns):
                T.check_columns("drop_columns", schema.names, fn.cols)
                schema = pa.schema([f for f in schema if f.name not in fn.cols])
            elif isinstance(fn, T.RenameColumns):
                T.check_columns("rename_columns", schema.names, list(fn.mapping))
                schema = pa.schema([f.with_name(fn.mapping.get(f.name, f.name)) for f in schema])
            else:
                return None
    return schema
