"""The streaming executor: runs a dataset's stages as a chain of generators.

Blocks move as `Bundle`s: an object-store reference to a list of Arrow IPC blocks (made by a
task) or tables held in this process (read here by the engine's threads). Map stages keep
tasks in flight while the bytes of unconsumed output stay under the execution's budget
(`resource_limits.object_store_memory`, by default half the object store), so a dataset far
bigger than the store streams through it.
"""

from __future__ import annotations

import collections
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Iterator, Optional

import numpy as np
import pyarrow as pa

import oxray
from oxray.data._internal import block as B
from oxray.data._internal import plan as P
from oxray.data._internal import transforms as T

DEFAULT_STORE_SHARE = 0.5


class Budget:
    """Bytes of output in flight or produced and not yet consumed, across all stages."""

    def __init__(self, limit: int):
        self.limit = int(limit)
        self.used = 0
        self.peak = 0
        self._lock = threading.Lock()

    def fits(self, n: int) -> bool:
        return self.used + n <= self.limit

    def reserve(self, n: int) -> None:
        with self._lock:
            self.used += n
            self.peak = max(self.peak, self.used)

    def release(self, n: int) -> None:
        with self._lock:
            self.used -= n


class Bundle:
    """Blocks passed between stages: a reference to a list of IPC blocks, or local tables."""

    __slots__ = ("ref", "tables", "rows", "size", "_budget")

    def __init__(self, rows: int, size: int, ref=None, tables=None, budget: Optional[Budget] = None):
        self.ref, self.tables, self.rows, self.size = ref, tables, rows, size
        self._budget = budget
        if budget is not None:
            budget.reserve(size)

    def get_tables(self) -> list:
        if self.tables is not None:
            return self.tables
        return oxray.get(self.ref)

    def to_ref(self):
        """The bundle in the object store (tables held here are put there once)."""
        if self.ref is None:
            self.ref = oxray.put([B.IpcBlock(t) for t in self.tables])
            self.tables = None
        return self.ref

    def release(self) -> None:
        if self._budget is not None:
            self._budget.release(self.size)
            self._budget = None

    @classmethod
    def local(cls, tables: list, budget: Optional[Budget] = None) -> "Bundle":
        return cls(sum(t.num_rows for t in tables), sum(t.nbytes for t in tables), tables=tables, budget=budget)


@dataclass
class OpStats:
    name: str
    started: Optional[float] = None
    finished: Optional[float] = None
    cpu_s: float = 0.0
    task_wall_s: float = 0.0
    rows: int = 0
    bytes: int = 0
    blocks: int = 0
    tasks: int = 0
    in_flight: int = 0

    def start(self) -> None:
        if self.started is None:
            self.started = time.perf_counter()

    def output(self, rows: int, size: int, blocks: int) -> None:
        self.rows += rows
        self.bytes += size
        self.blocks += blocks
        self.finished = time.perf_counter()

    @property
    def wall_s(self) -> float:
        if self.started is None:
            return 0.0
        return (self.finished or time.perf_counter()) - self.started


@dataclass
class ExecutionStats:
    ops: list = field(default_factory=list)
    peak_budget_bytes: int = 0
    budget_bytes: int = 0
    started: float = field(default_factory=time.perf_counter)
    finished: Optional[float] = None

    def op(self, name: str) -> OpStats:
        s = OpStats(name)
        self.ops.append(s)
        return s

    def summary(self) -> str:
        lines = []
        for i, s in enumerate(self.ops):
            rate = s.rows / s.wall_s if s.wall_s > 0 else 0.0
            lines.append(
                f"Operator {i} {s.name}: {s.tasks} tasks, {s.blocks} blocks, {s.rows} rows, "
                f"{s.bytes:,} bytes ({_mb(s.bytes)}) output\n"
                f"* Wall time: {s.wall_s:.3f}s ({rate:,.0f} rows/s)\n"
                f"* CPU time: {s.cpu_s:.3f}s (in tasks: wall {s.task_wall_s:.3f}s)"
            )
        total = (self.finished or time.perf_counter()) - self.started
        lines.append(
            f"Dataset execution: {total:.3f}s wall; object store budget {_mb(self.budget_bytes)}, "
            f"peak in flight {_mb(self.peak_budget_bytes)}"
        )
        return "\n".join(lines)


def _mb(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


# ---- what runs in tasks and actors ----


def _run_blocks(fns, read_task, inputs):
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    if read_task is not None:
        tables = read_task()
    else:
        # Bundled inputs (a batch size spanning blocks) reach the UDF as one table (no copy).
        tables = [t for blocks in inputs for t in blocks]
        if len(tables) > 1:
            tables = [B.concat(tables)]
    out = T.run_fns(fns, tables)
    return [B.IpcBlock(t) for t in out], _meta_of(out, wall0, cpu0)


def _map_task(fns, read_task, *inputs):
    for fn in fns:
        fn.setup()
    return _run_blocks(fns, read_task, inputs)


def _meta_of(tables: list, wall0: float, cpu0: float) -> dict:
    return {
        "rows": sum(t.num_rows for t in tables),
        "bytes": sum(t.nbytes for t in tables),
        "blocks": len(tables),
        "wall": time.perf_counter() - wall0,
        "cpu": time.thread_time() - cpu0,
    }


def _shuffle_map(n: int, seed: int, *inputs):
    """Deals a block's rows at random into `n` parts (one return value each)."""
    table = B.concat([t for blocks in inputs for t in blocks])
    part = np.random.default_rng(seed).integers(n, size=table.num_rows)
    order = np.argsort(part, kind="stable")
    counts = np.bincount(part, minlength=n)
    dealt = table.take(pa.array(order)) if table.num_rows else table
    out, start = [], 0
    for count in counts:
        out.append([B.IpcBlock(dealt.slice(start, int(count)))])
        start += int(count)
    return out[0] if n == 1 else tuple(out)


def _shuffle_reduce(seed: int, *parts):
    """One output block: its share of every input, in a random order."""
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    table = B.concat([t for blocks in parts for t in blocks if t.num_rows])
    if table.num_rows:
        table = table.take(pa.array(np.random.default_rng(seed).permutation(table.num_rows)))
    out = [table] if table.num_rows or table.num_columns else []
    return [B.IpcBlock(t) for t in out], _meta_of(out, wall0, cpu0)


def _slice_concat(pieces: list, *inputs):
    """One output block of `repartition`: (input, offset, rows) pieces of the inputs, joined."""
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    tables = [B.concat(list(blocks)) for blocks in inputs]
    out = [B.concat([tables[i].slice(offset, rows) for i, offset, rows in pieces])]
    return [B.IpcBlock(t) for t in out], _meta_of(out, wall0, cpu0)


_remotes: dict = {}


def remote(target, **options):
    """`oxray.remote(**options)(target)`, made once per process (a function is registered once)."""
    key = (target, tuple(sorted(options.items())))
    if key not in _remotes:
        _remotes[key] = oxray.remote(**options)(target) if options else oxray.remote(target)
    return _remotes[key]


def _shuffle(refs: list, n_out: int, seed) -> list:
    rng = np.random.default_rng(seed)
    map_seeds = rng.integers(1 << 62, size=len(refs))
    reduce_seeds = rng.integers(1 << 62, size=n_out)
    dealt = []
    for ref, map_seed in zip(refs, map_seeds, strict=True):
        parts = remote(_shuffle_map, num_returns=n_out).remote(n_out, int(map_seed), ref)
        dealt.append([parts] if n_out == 1 else parts)
    reduce = remote(_shuffle_reduce, num_returns=2)
    return [reduce.remote(int(reduce_seeds[j]), *[parts[j] for parts in dealt]) for j in range(n_out)]


def _repartition(refs: list, rows: list, n_out: int) -> list:
    total = sum(rows)
    per = -(-total // n_out) if total else 0
    return slice_ranges(refs, rows, [(min(j * per, total), min((j + 1) * per, total)) for j in range(n_out)])


def slice_ranges(refs: list, rows: list, bounds: list) -> list:
    """One task per (lo, hi) row range of the blocks `refs` (of `rows` rows each), which joins
    the range's slices into one block: (data ref, metadata ref) per range."""
    starts = np.cumsum([0, *rows])
    outputs = []
    task = remote(_slice_concat, num_returns=2)
    for lo, hi in bounds:
        pieces, args = [], []
        for i, ref in enumerate(refs):
            a, b = max(lo, int(starts[i])), min(hi, int(starts[i + 1]))
            if a < b:
                pieces.append((len(args), a - int(starts[i]), b - a))
                args.append(ref)
        if not args and refs:
            pieces, args = [(0, 0, 0)], [refs[0]]
        if args:
            outputs.append(task.remote(pieces, *args))
    return outputs


class _MapActor:
    """One member of a class UDF's actor pool: builds the UDF once, then maps blocks."""

    def __init__(self, fns):
        self.fns = fns
        for fn in fns:
            fn.setup()

    def run(self, read_task, *inputs):
        return _run_blocks(self.fns, read_task, inputs)


# ---- stages ----


class Executor:
    def __init__(self, stages: list, ctx, stats: ExecutionStats, progress=None):
        self.stages = stages
        self.ctx = ctx
        self.stats = stats
        self.progress = progress
        opts = ctx.execution_options
        self.preserve_order = bool(opts.preserve_order)
        limit = opts.resource_limits.object_store_memory
        cpus = opts.resource_limits.cpu
        if limit is None or cpus is None:
            cluster = oxray.cluster_resources()
            if limit is None:
                limit = int(cluster.get("object_store_memory", 2 << 30) * DEFAULT_STORE_SHARE)
            if cpus is None:
                cpus = cluster.get("CPU", 1)
        self.budget = Budget(int(limit))
        stats.budget_bytes = self.budget.limit
        self.max_tasks = max(1, int(cpus) * 2)
        self.cluster_cpus = max(1, int(cpus))
        self.read_threads = max(1, min(int(cpus), 8))

    def run(self) -> Iterator[Bundle]:
        it = self._chain(self.stages)
        try:
            yield from it
        finally:
            it.close()
            self.stats.finished = time.perf_counter()
            self.stats.peak_budget_bytes = self.budget.peak

    def _chain(self, stages: list) -> Iterator[Bundle]:
        it = None
        for stage in stages:
            if isinstance(stage, P.ReadStage):
                it = self._read(stage)
            elif isinstance(stage, P.MapStage):
                it = self._map(stage, it)
            elif isinstance(stage, P.LimitStage):
                it = self._limit(stage, it)
            elif isinstance(stage, P.AllToAllStage):
                it = self._all_to_all(stage, it)
            elif isinstance(stage, P.UnionStage):
                it = self._union(stage)
            else:  # pragma: no cover
                raise TypeError(f"unknown stage {stage!r}")
        return it

    def _read(self, stage: P.ReadStage) -> Iterator[Bundle]:
        stream = stage.source.local_stream(self.read_threads, self.budget.limit)
        if stream is None:
            compute = stage.source.read_compute or P.ComputeSpec()
            yield from self._map(P.MapStage([], compute, None, stage.name, read=stage.source), None)
            return
        stats = self.stats.op(stage.name)
        stats.start()
        cpu0 = time.process_time()
        try:
            for table in stream:
                stats.output(table.num_rows, table.nbytes, 1)
                stats.cpu_s = time.process_time() - cpu0
                self._progress(stats)
                yield Bundle.local([table], self.budget)
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()

    def _progress(self, stats: OpStats) -> None:
        if self.progress is not None:
            self.progress.update(stats)

    def _inputs(self, stage: P.MapStage, upstream) -> Iterator[tuple]:
        """(read task or None, input bundles, estimated output bytes) per task to submit."""
        if stage.read is not None:
            for task in stage.read.read_tasks():
                yield task, [], task.size or (1 << 20)
            return
        pending, rows, size = [], 0, 0
        for bundle in upstream:
            pending.append(bundle)
            rows += bundle.rows
            size += bundle.size
            if stage.batch_size is None or rows >= stage.batch_size:
                yield None, pending, size
                pending, rows, size = [], 0, 0
        if pending:
            yield None, pending, size

    def _map(self, stage: P.MapStage, upstream) -> Iterator[Bundle]:
        stats = self.stats.op(stage.name)
        pool = _ActorPool(stage, self.cluster_cpus) if stage.compute.actors else None
        max_in_flight = stage.compute.task_concurrency or self.max_tasks
        if pool is not None:
            max_in_flight = pool.capacity
        inputs = self._inputs(stage, upstream)
        in_flight: collections.OrderedDict = collections.OrderedDict()  # meta ref -> (data ref, bundles, est, actor)
        exhausted = False
        next_item = None
        try:
            while True:
                while not exhausted and len(in_flight) < max_in_flight:
                    if next_item is None:
                        try:
                            next_item = next(inputs)
                        except StopIteration:
                            exhausted = True
                            break
                    read_task, bundles, est = next_item
                    if in_flight and not self.budget.fits(est):
                        break
                    next_item = None
                    stats.start()
                    args = [b.to_ref() for b in bundles]
                    if pool is not None:
                        actor = pool.pick()
                        data_ref, meta_ref = actor.run.options(num_returns=2).remote(read_task, *args)
                    else:
                        actor = None
                        task = remote(_map_task, num_returns=2)
                        opts = stage.compute.remote_options()
                        if opts:
                            task = task.options(**opts)
                        data_ref, meta_ref = task.remote(stage.fns, read_task, *args)
                    self.budget.reserve(est)
                    in_flight[meta_ref] = (data_ref, bundles, est, actor)
                    stats.tasks += 1
                    stats.in_flight = len(in_flight)
                if not in_flight:
                    return
                if self.preserve_order:
                    meta_ref = next(iter(in_flight))
                else:
                    ready, _ = oxray.wait(list(in_flight), num_returns=1)
                    meta_ref = ready[0]
                data_ref, bundles, est, actor = in_flight.pop(meta_ref)
                self.budget.release(est)
                for b in bundles:
                    b.release()
                if actor is not None:
                    pool.done(actor)
                meta = oxray.get(meta_ref)
                stats.cpu_s += meta["cpu"]
                stats.task_wall_s += meta["wall"]
                stats.output(meta["rows"], meta["bytes"], meta["blocks"])
                stats.in_flight = len(in_flight)
                self._progress(stats)
                if meta["blocks"]:
                    yield Bundle(meta["rows"], meta["bytes"], ref=data_ref, budget=self.budget)
        finally:
            for meta_ref, (_data_ref, bundles, est, _actor) in in_flight.items():
                self.budget.release(est)
                for b in bundles:
                    b.release()
                try:
                    oxray.cancel(meta_ref)
                except Exception:  # noqa: BLE001 - best effort: the task may have finished
                    pass
            inputs.close()
            if pool is not None:
                pool.shutdown()

    def _limit(self, stage: P.LimitStage, upstream) -> Iterator[Bundle]:
        stats = self.stats.op(stage.name)
        stats.start()
        remaining = stage.n
        try:
            for bundle in upstream:
                if remaining <= 0:
                    bundle.release()
                    break
                if bundle.rows <= remaining:
                    remaining -= bundle.rows
                    stats.output(bundle.rows, bundle.size, 1)
                    yield bundle
                    continue
                tables, cut = [], remaining
                for t in bundle.get_tables():
                    if cut <= 0:
                        break
                    tables.append(t.slice(0, cut))
                    cut -= min(cut, t.num_rows)
                bundle.release()
                out = Bundle.local(tables, self.budget)
                remaining = 0
                stats.output(out.rows, out.size, len(tables))
                yield out
                break
        finally:
            upstream.close()

    def _all_to_all(self, stage: P.AllToAllStage, upstream) -> Iterator[Bundle]:
        """Operators that need every input block: run as tasks over the blocks in the store
        (a map-reduce for `random_shuffle`, slicing tasks for `repartition`), so no process
        holds the whole dataset."""
        stats = self.stats.op(stage.name)
        bundles = list(upstream)
        stats.start()
        if stage.kind == "randomize_block_order":
            random.Random(stage.args.get("seed")).shuffle(bundles)
            for b in bundles:
                stats.output(b.rows, b.size, 1)
                yield b
            return
        refs = [b.to_ref() for b in bundles if b.rows]
        rows = [b.rows for b in bundles if b.rows]
        for b in bundles:
            b.release()  # the tasks' arguments keep the blocks alive from here on
        total = sum(rows)
        if stage.kind == "random_shuffle":
            n_out = max(1, stage.args.get("num_blocks") or len(refs))
            outputs = _shuffle(refs, n_out, stage.args.get("seed"))
        else:
            n_out = stage.args.get("num_blocks")
            if stage.args.get("target_num_rows_per_block"):
                n_out = max(1, -(-total // stage.args["target_num_rows_per_block"]))
            outputs = _repartition(refs, rows, n_out)
        stats.tasks += len(outputs)
        try:
            for data_ref, meta_ref in outputs:
                meta = oxray.get(meta_ref)
                stats.cpu_s += meta["cpu"]
                stats.task_wall_s += meta["wall"]
                stats.output(meta["rows"], meta["bytes"], meta["blocks"])
                self._progress(stats)
                yield Bundle(meta["rows"], meta["bytes"], ref=data_ref, budget=self.budget)
        finally:
            for _data_ref, meta_ref in outputs:
                try:
                    oxray.cancel(meta_ref)
                except Exception:  # noqa: BLE001 - best effort: most have finished
                    pass

    def _union(self, stage: P.UnionStage) -> Iterator[Bundle]:
        for stages in stage.inputs:
            it = self._chain(stages)
            try:
                yield from it
            finally:
                it.close()


class _ActorPool:
    """A class UDF's actors: starts with `initial_size` and adds one (up to `max_size`) whenever
    every actor already has its `max_tasks_in_flight_per_actor` calls."""

    def __init__(self, stage: P.MapStage, cluster_cpus: int):
        compute = stage.compute
        self.fns = stage.fns
        self.max_size = max(compute.max_size or cluster_cpus, compute.initial_size)
        opts = compute.remote_options()
        self.cls = remote(_MapActor).options(**opts) if opts else remote(_MapActor)
        self.actors: list = []
        self.load: list = []
        for _ in range(compute.initial_size):
            self._add()
        self.per_actor = compute.max_tasks_in_flight_per_actor
        self.capacity = self.max_size * self.per_actor

    def _add(self) -> None:
        self.actors.append(self.cls.remote(self.fns))
        self.load.append(0)

    def pick(self):
        i = min(range(len(self.actors)), key=self.load.__getitem__)
        if self.load[i] >= self.per_actor and len(self.actors) < self.max_size:
            self._add()
            i = len(self.actors) - 1
        self.load[i] += 1
        return self.actors[i]

    def done(self, actor) -> None:
        self.load[self.actors.index(actor)] -= 1

    def shutdown(self) -> None:
        for a in self.actors:
            try:
                oxray.kill(a)
            except Exception:  # noqa: BLE001 - best effort: it may be gone already
                pass
