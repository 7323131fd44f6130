"""The logical plan of a dataset and its optimization into executable stages.

A plan is a source followed by operators. Before it runs, the optimizer pushes column
selection and `limit` into a parquet reader and fuses consecutive row/batch UDFs (and the
read before them) into one stage, so each block costs one task, not one per operator.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional

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
    kind: str  # random_shuffle, randomize_block_order, repartition
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


def _compatible(stage: MapStage, op: MapOp) -> bool:
    a, b = stage.compute, op.compute
    if a.remote_args != b.remote_args:
        return False
    if a.actors and b.actors:
        return False  # two class UDFs keep their own pools
    if a.actors or b.actors:
        return (a.actors and not T.any_class_udf([op.fn])) or (b.actors and not T.any_class_udf(stage.fns))
    return True


def _with_read_compute(compute: ComputeSpec, read: Optional[ComputeSpec]) -> ComputeSpec:
    """A fused read's own limits kept: the lower task concurrency, the larger CPU request."""
    if read is None:
        return compute
    conc = [c for c in (compute.task_concurrency, read.task_concurrency) if c]
    args = dict(compute.remote_args)
    for key, value in read.remote_args:
        args[key] = max(args.get(key, 0), value)
    return dataclasses.replace(
        compute, task_concurrency=min(conc) if conc else None, remote_args=tuple(sorted(args.items()))
    )


def optimize(plan: Plan) -> list:
    """The stages to run, after pushdown and fusion."""
    source = plan.source
    ops = list(plan.ops)
    # Projection and limit pushdown into the parquet reader.
    while ops and isinstance(source, ParquetDatasource):
        op = ops[0]
        if isinstance(op, LimitOp):
            # The operator stays too: the reader's limit is per fragment; it keeps the exact cut.
            source = source.with_(limit=op.n)
            break
        if isinstance(op, MapOp) and isinstance(op.fn, T.SelectColumns) and not op.compute.actors:
            if all(c in source.schema().names for c in op.fn.cols):
                source = source.with_(columns=op.fn.cols)
                ops.pop(0)
                continue
        break
    stages: list = [ReadStage(source, source.name)]
    for op in ops:
        last = stages[-1]
        if isinstance(op, MapOp):
            # A batch size that may span blocks needs its own stage (its input is bundled).
            if isinstance(last, MapStage) and op.batch_size is None and _compatible(last, op):
                last.fns.append(op.fn)
                last.name += "->" + op.fn.name
                if op.compute.actors:
                    last.compute = op.compute
                continue
            stage = MapStage([op.fn], op.compute, op.batch_size, op.fn.name)
            if isinstance(last, ReadStage) and not op.bundle_inputs:
                stage.read = last.source
                stage.name = f"{last.name}->{stage.name}"
                stage.compute = _with_read_compute(stage.compute, last.source.read_compute)
                stages[-1] = stage
            else:
                stages.append(stage)
        elif isinstance(op, LimitOp):
            if isinstance(last, LimitStage):
                last.n = min(last.n, op.n)
            else:
                stages.append(LimitStage(op.n))
        elif isinstance(op, AllToAllOp):
            stages.append(AllToAllStage(op.kind, op.args, _ALL_TO_ALL_NAMES[op.kind]))
        elif isinstance(op, UnionOp):
            stages = [UnionStage([stages] + [optimize(p) for p in op.others])]
        else:  # pragma: no cover - every op type is handled above
            raise TypeError(f"unknown operator {op!r}")
    return stages


_ALL_TO_ALL_NAMES = {
    "random_shuffle": "RandomShuffle",
    "randomize_block_order": "RandomizeBlockOrder",
    "repartition": "Repartition",
}


def describe(stages: list) -> str:
    parts = []
    for s in stages:
        if isinstance(s, UnionStage):
            parts.append("Union(" + " | ".join(describe(i) for i in s.inputs) + ")")
        else:
            parts.append(s.name)
    return " -> ".join(parts)


def count_from_metadata(plan: Plan) -> Optional[int]:
    """The row count without reading data, when no operator can change it."""
    n = plan.source.count()
    if n is None:
        return None
    for op in plan.ops:
        if isinstance(op, LimitOp):
            n = min(n, op.n)
        elif isinstance(op, MapOp) and isinstance(op.fn, (T.SelectColumns, T.DropColumns, T.RenameColumns)):
            continue
        elif isinstance(op, AllToAllOp):
            continue
        elif isinstance(op, UnionOp):
            for other in op.others:
                m = count_from_metadata(other)
                if m is None:
                    return None
                n += m
        else:
            return None
    return n


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
