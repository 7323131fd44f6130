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
from typing import Any, Callable, Optional

from oxray import _native
from oxray.data._internal import transforms as T
from oxray.data._internal.datasource import Datasource, ParquetDatasource, RangeDatasource, StoredBlocksDatasource


@dataclass(frozen=True)
class ComputeSpec:
    """How a map operator runs: as tasks, or on a pool of actors (class UDFs)."""

    actors: bool = False
    min_size: int = 1  # actors an idle pool shrinks back to
    initial_size: int = 1  # actors the pool starts with
    max_size: Optional[int] = None  # None: up to the cluster's CPUs
    max_tasks_in_flight_per_actor: int = 2
    task_concurrency: Optional[int] = None
    remote_args: tuple = ()  # sorted (key, value) pairs: num_cpus, num_gpus, resources, memory
    # Ray's `ray_remote_args_fn`: called for each task or actor; its options win over the above.
    remote_args_fn: Optional[Callable[[], dict]] = None

    def remote_options(self) -> dict:
        options = dict(self.remote_args)
        if isinstance(options.get("resources"), tuple):
            options["resources"] = dict(options["resources"])  # kept as sorted pairs (hashable)
        if self.remote_args_fn is not None:
            extra = self.remote_args_fn()
            if not isinstance(extra, dict):
                raise TypeError(f"ray_remote_args_fn returned {extra!r}; expected a dict of remote options")
            if "max_calls" in extra:
                raise ValueError(
                    "ray_remote_args_fn returned max_calls: it is a static option (pass max_calls=... to the "
                    "map call itself), as in Ray"
                )
            options.update(extra)
        return options


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
        extra = (("ray_remote_args_fn", spec.remote_args_fn),) if spec.remote_args_fn is not None else ()
        for key, value in spec.remote_args + extra:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                args.append((key, float(value), None))
            else:
                args.append((key, None, self._token(value)))
        return (
            spec.actors,
            spec.min_size,
            spec.initial_size,
            spec.max_size,
            spec.max_tasks_in_flight_per_actor,
            spec.task_concurrency,
            args,
        )

    def decode_compute(self, value: tuple) -> ComputeSpec:
        actors, min_size, initial, max_size, per_actor, concurrency, args = value
        remote_args, remote_args_fn = [], None
        for key, number, token in args:
            if key == "ray_remote_args_fn":
                remote_args_fn = self.tokens[token]
            elif token is not None:
                remote_args.append((key, self.tokens[token]))
            else:
                remote_args.append((key, int(number) if number == int(number) else number))
        return ComputeSpec(
            actors, min_size, initial, max_size, per_actor, concurrency, tuple(sorted(remote_args)), remote_args_fn
        )

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
    """The stages to run, after the engine's pushdown and fusion, with a groupby's columns
    pushed into the read before it."""
    encoded = _Encoded(plan, with_counts=False)
    values, _ = _native.data_optimize(encoded.value)
    return project_reads_into_groupbys(encoded.stages(values))


def project_reads_into_groupbys(stages: list) -> list:
    """A read straight into a groupby whose aggregations read only some columns decodes only
    those (the shuffle would drop the others anyway): less to read, hold and spill."""
    out = [
        UnionStage([project_reads_into_groupbys(s) for s in stage.inputs], stage.name)
        if isinstance(stage, UnionStage)
        else stage
        for stage in stages
    ]
    for i, (stage, following) in enumerate(zip(stages, stages[1:], strict=False)):
        if not (isinstance(stage, ReadStage) and isinstance(following, AllToAllStage)):
            continue
        reducer = following.args.get("reducer") if following.kind == "groupby" else None
        needed = getattr(reducer, "columns_needed", lambda: None)()
        with_ = getattr(stage.source, "with_", None)
        schema = stage.source.schema() if with_ is not None else None
        if needed is None or schema is None or not set(needed) <= set(schema.names):
            continue
        columns = [name for name in schema.names if name in needed]
        if len(columns) < len(schema.names):
            out[i] = ReadStage(with_(columns=columns), stage.name)
    return out


def describe(plan: Plan) -> str:
    """The optimized stages as one line."""
    return _native.data_optimize(_Encoded(plan, with_counts=False).value)[1]


def count_from_metadata(plan: Plan) -> Optional[int]:
    """The row count without reading data, when no operator can change it."""
    if _aggregates(plan):
        return None  # a grouped aggregation makes one row per group
    return _native.data_count_from_metadata(_Encoded(plan, with_counts=True).value)


def _aggregates(plan: Plan) -> bool:
    """Whether a grouped aggregation (which changes rows and columns) is in the plan."""
    for op in plan.ops:
        if isinstance(op, AllToAllOp) and op.kind == "groupby" and op.args.get("reducer") is not None:
            return True
        if isinstance(op, UnionOp) and any(_aggregates(p) for p in op.others):
            return True
    return False


def schema_from_metadata(plan: Plan) -> Any:
    """The schema without reading data, when no UDF can change it, else None."""
    if isinstance(plan.source, RangeDatasource) and plan.source.n == 0:
        return None  # no blocks, so no schema (as Ray: `range(0).schema()` is None)
    schema = plan.source.schema()
    if schema is None:
        return None
    import pyarrow as pa

    for op in plan.ops:
        if isinstance(op, UnionOp):
            return None  # the inputs' schemas are only known once read (Ray: unknown too)
        if isinstance(op, AllToAllOp) and op.kind == "groupby" and op.args.get("reducer") is not None:
            return None
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


# ---- describing a plan: `Dataset.explain()` and the repr's operator tree ----


@dataclass
class PlanNode:
    """One operator of a plan as Ray prints it: `kind[name]`, above its inputs."""

    kind: str  # Ray's operator class: MapRows, Read, TaskPoolMapOperator, ...
    name: str  # Map(f), ReadRange, limit=10, ...
    inputs: list = field(default_factory=list)
    is_source: bool = False


def render_tree(node: PlanNode, with_kind: bool = True, with_sources: bool = True) -> tuple:
    """The tree in Ray's layout (`+- ` under its parent, three spaces a level), and its depth."""
    lines: list = []
    deepest = 0

    def visit(n: PlanNode, depth: int) -> None:
        nonlocal deepest
        deepest = max(deepest, depth)
        if n.is_source and not with_sources:
            return
        label = f"{n.kind}[{n.name}]" if with_kind else n.name
        lines.append(label if depth == 0 else " " * ((depth - 1) * 3) + "+- " + label)
        for child in n.inputs:
            visit(child, depth + 1)

    visit(node, 0)
    return "".join(line + "\n" for line in lines), deepest


def fn_display_name(fn) -> str:
    """A step's name as Ray shows it (`map_groups` is Ray's MapBatches after a sort; column
    selection, dropping and renaming its Project)."""
    if isinstance(fn, T.MapGroups):
        return f"MapBatches({T.udf_name(fn.fn)})"
    if _map_kind(fn) == "Project":
        return "Project"  # Ray's one operator for column selection, dropping and renaming
    return fn.name


def _map_kind(fn) -> str:
    """Ray's logical operator class for one of our map steps."""
    if isinstance(fn, T.MapRows):
        return {"map": "MapRows", "flat_map": "FlatMap", "filter": "Filter"}[fn.kind]
    if isinstance(fn, T.FilterExpr):
        return "Filter"
    if isinstance(fn, (T.SelectColumns, T.DropColumns, T.RenameColumns, T.WithColumn)):
        return "Project"
    if fn.name.startswith("Write"):
        return "Write"
    return "MapBatches"


def _all_to_all_labels(kind: str, args: dict) -> tuple:
    """(Ray's logical class, name) of an all-to-all operator."""
    if kind == "groupby":
        # A groupby feeding map_groups is a sort; with aggregations, Ray's Aggregate.
        return ("Aggregate", "Aggregate") if args.get("reducer") is not None else ("Sort", "Sort")
    if kind == "randomize_block_order":
        return "RandomizeBlocks", "RandomizeBlockOrder"
    name = _ALL_TO_ALL_NAMES[kind]
    return name, name


def _source_node(source: Datasource) -> PlanNode:
    if isinstance(source, StoredBlocksDatasource):
        # Blocks already in the object store: Ray's InputData (a materialized dataset) or From*.
        name = "InputData" if source.name == "FromBlocks" else source.name
        return PlanNode(name, name, is_source=True)
    return PlanNode("Read", source.name, is_source=True)


def logical_tree(plan: Plan) -> PlanNode:
    """The plan as Ray's logical operators, the last one at the root."""
    node = _source_node(plan.source)
    for op in plan.ops:
        if isinstance(op, MapOp):
            node = PlanNode(_map_kind(op.fn), fn_display_name(op.fn), [node])
        elif isinstance(op, LimitOp):
            node = PlanNode("Limit", f"limit={op.n}", [node])
        elif isinstance(op, AllToAllOp):
            node = PlanNode(*_all_to_all_labels(op.kind, op.args), [node])
        elif isinstance(op, UnionOp):
            node = PlanNode("Union", "Union", [node, *(logical_tree(p) for p in op.others)])
        else:  # pragma: no cover - every op type is handled above
            raise TypeError(f"unknown operator {op!r}")
    return node


_INPUT = PlanNode("InputDataBuffer", "Input", is_source=True)


def _physical_source(source: Datasource) -> PlanNode:
    if isinstance(source, StoredBlocksDatasource):
        return _INPUT
    return PlanNode("TaskPoolMapOperator", source.name, [_INPUT])


def _map_operator(compute: ComputeSpec) -> str:
    return "ActorPoolMapOperator" if compute.actors else "TaskPoolMapOperator"


def physical_tree(plan: Plan) -> PlanNode:
    """One physical operator per logical one, before fusion."""
    node = _physical_source(plan.source)
    for op in plan.ops:
        if isinstance(op, MapOp):
            node = PlanNode(_map_operator(op.compute), fn_display_name(op.fn), [node])
        elif isinstance(op, LimitOp):
            node = PlanNode("LimitOperator", f"limit={op.n}", [node])
        elif isinstance(op, AllToAllOp):
            node = PlanNode("AllToAllOperator", _all_to_all_labels(op.kind, op.args)[1], [node])
        elif isinstance(op, UnionOp):
            node = PlanNode("UnionOperator", "Union", [node, *(physical_tree(p) for p in op.others)])
    return node


def stages_tree(stages: list) -> PlanNode:
    """The operators oxray runs (`optimize`'s stages: reads and UDFs fused)."""
    node = None
    for stage in stages:
        if isinstance(stage, ReadStage):
            node = _physical_source(stage.source)
        elif isinstance(stage, MapStage):
            names = [fn_display_name(fn) for fn in stage.fns]
            if stage.read is not None:
                child = _physical_source(stage.read)
                if not isinstance(stage.read, StoredBlocksDatasource):
                    names.insert(0, stage.read.name)
                    child = _INPUT
            else:
                child = node
            node = PlanNode(_map_operator(stage.compute), "->".join(names), [child])
        elif isinstance(stage, LimitStage):
            node = PlanNode("LimitOperator", f"limit={stage.n}", [node])
        elif isinstance(stage, AllToAllStage):
            node = PlanNode("AllToAllOperator", _all_to_all_labels(stage.kind, stage.args)[1], [node])
        elif isinstance(stage, UnionStage):
            node = PlanNode("UnionOperator", "Union", [stages_tree(s) for s in stage.inputs])
    return node


def explain(plan: Plan) -> str:
    """Ray's `explain()` text: the logical plan and the physical plan, each before and after
    optimization. oxray's logical optimizations (pushdown) happen with fusion, so its two
    logical plans read the same; the optimized physical plan is the stages oxray runs."""
    logical = render_tree(logical_tree(plan))[0]
    sections = [
        ("Logical Plan", logical),
        ("Logical Plan (Optimized)", logical),
        ("Physical Plan", render_tree(physical_tree(plan))[0]),
        ("Physical Plan (Optimized)", render_tree(stages_tree(optimize(plan)))[0]),
    ]
    return "".join(f"\n-------- {title} --------\n{text}" for title, text in sections)


def has_serializable_lineage(plan: Plan) -> bool:
    """Whether the plan can be rebuilt elsewhere: every source reads external data (blocks
    already in this cluster's object store cannot travel), as Ray's lineage serialization."""
    if isinstance(plan.source, StoredBlocksDatasource):
        return False
    return all(has_serializable_lineage(p) for op in plan.ops if isinstance(op, UnionOp) for p in op.others)
