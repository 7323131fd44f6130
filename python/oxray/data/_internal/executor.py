"""The streaming executor's driver: performs what the engine's scheduler decides.

The scheduler is `oxray-data`'s `executor.rs` (`_native.DataExecutor`), a state machine that
does no I/O: it decides which read, map, slice, shuffle and repartition tasks run and when,
keeping the bytes in flight or produced and not yet consumed under the execution's budget
(`resource_limits.object_store_memory`, by default half the object store), so a dataset far
bigger than the store streams through it. This driver performs its actions (submits tasks and
actor calls, pulls blocks from the engine's local read streams, cancels), reports back, and
holds the blocks themselves: an object-store reference to a list of Arrow IPC blocks (made by
a task) or tables held in this process.
"""

from __future__ import annotations

import copy
import gc
import math
import time
import warnings
from typing import Iterator, Optional

import numpy as np

import oxray
from oxray import _native
from oxray.data._internal import block as B
from oxray.data._internal import exchange as X
from oxray.data._internal import plan as P
from oxray.data._internal import transforms as T
from oxray.data._internal.datasource import group_reads_for_batches
from oxray.data._internal.execution_state import ExecutionReporter
from oxray.data.context import ACTOR_TASK_RETRIES, DataContext

DEFAULT_STORE_SHARE = 0.5
# Restarts of a pool actor whose process died, and retries of its calls, unless the map asks
# for others (max_restarts=, max_task_retries=).
POOL_ACTOR_RESTARTS = 16
# The estimated output of a read task that does not know its size.
_UNKNOWN_READ_BYTES = 1 << 20
# The smallest read block the budget's share may ask for.
MIN_BLOCK_CAP = 4 << 20
# A task that made or took this many bytes hands Arrow's cached memory back when it ends.
_RELEASE_AFTER_BYTES = 4 << 20


def _with_block_cap(source, cap: int):
    """The read source with its blocks at most `cap` bytes, where it sizes its blocks."""
    target = getattr(source, "target_block_bytes", None)
    if target is None or target <= cap:
        return source
    capped = copy.copy(source)
    capped.target_block_bytes = cap
    return capped


class Bundle:
    """An output of the executor: a reference to a list of IPC blocks, or local tables. It
    counts against the budget until `release()`."""

    __slots__ = ("id", "ref", "tables", "rows", "size", "schema", "block_rows", "_scheduler")

    def __init__(self, bundle_id: int, rows: int, size: int, data, scheduler, report=None):
        self.id, self.rows, self.size = bundle_id, rows, size
        self.ref, self.tables = (None, data) if isinstance(data, list) else (data, None)
        # Its blocks' schema and rows when known without fetching them: the report of the task
        # that made it (B.task_meta), or the tables held here.
        report = report or {}
        self.schema, self.block_rows = report.get("schema"), report.get("block_rows")
        if self.tables is not None:
            self.schema = next((t.schema for t in self.tables if t.num_rows), None)
            self.block_rows = [t.num_rows for t in self.tables]
        self._scheduler = scheduler

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
        if self._scheduler is not None:
            self._scheduler.release(self.id)
            self._scheduler = None


class ExecutionStats:
    """The figures of one execution, kept by its scheduler (`Dataset.stats()`)."""

    def __init__(self):
        self.scheduler = None
        self.reporter = None  # the run's ExecutionReporter (execution_state.py)
        self.stages: list = []


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
    meta = B.task_meta(out, wall0, cpu0)
    if meta["bytes"] >= _RELEASE_AFTER_BYTES:
        B.release_cached_memory_after_task()
    return [B.IpcBlock(t) for t in out], meta


def _use_context(ctx) -> None:
    """The dataset's DataContext as this worker's current one while its work runs, as in Ray."""
    if ctx is not None:
        DataContext._current = ctx


def _map_task(fns, read_task, task_idx, ctx, *inputs):
    _use_context(ctx)
    for fn in fns:
        fn.setup()
    T.set_task_index(task_idx)
    return _run_blocks(fns, read_task, inputs)


def _shuffle_map(n: int, seed: int, *inputs):
    """Deals a block's rows at random into `n` parts (one return value each)."""
    table = B.concat_bundles(inputs)
    return X.deal(table, np.random.default_rng(seed).integers(n, size=table.num_rows), n)


def _shuffle_reduce(seed: int, *parts):
    """One output block: its share of every input, in a random order."""
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    table = B.concat_bundles(parts, drop_empty=True)
    if table.num_rows:
        table = table.take(B.row_indices(np.random.default_rng(seed).permutation(table.num_rows)))
    out = [table] if table.num_rows or table.num_columns else []
    return [B.IpcBlock(t) for t in out], B.task_meta(out, wall0, cpu0)


def _push_merge(width: int, *parts):
    """Push-based shuffle's merge task: the parts one round of map tasks made for `width`
    consecutive output partitions (map-major: map 0's parts, then map 1's), joined into one
    block per partition, so a reduce task reads one input per round instead of one per map."""
    merged = []
    for k in range(width):
        table = B.concat_bundles(parts[k::width], drop_empty=True)
        merged.append([B.IpcBlock(table)] if table.num_rows or table.num_columns else [])
    return merged[0] if width == 1 else tuple(merged)


def push_based(ctx) -> bool:
    """Whether the dataset's context asks for Ray's push-based shuffle."""
    strategy = str(getattr(ctx.shuffle_strategy, "value", ctx.shuffle_strategy))
    return bool(ctx.use_push_based_shuffle) or strategy == "sort_shuffle_push_based"


def merge_rounds(dealt: list, n_out: int) -> list:
    """Push-based shuffle: the map outputs `dealt` (per map, its `n_out` part refs) merged
    round by round. A round is about sqrt(maps) map tasks; each of its merge tasks joins the
    round's parts for a contiguous range of partitions. Returns, per map round, its merged
    part refs, in the layout of `dealt` (the reduce step reads them as it reads map outputs)."""
    per_round = max(2, math.isqrt(max(len(dealt) - 1, 0)) + 1)
    mergers = max(1, min(n_out, per_round))
    ranges = [(n_out * m // mergers, n_out * (m + 1) // mergers) for m in range(mergers)]
    rounds = []
    for start in range(0, len(dealt), per_round):
        batch = dealt[start : start + per_round]
        merged: list = [None] * n_out
        for lo, hi in ranges:
            width = hi - lo
            if width == 0:
                continue
            args = [parts[j] for parts in batch for j in range(lo, hi)]
            out = remote(_push_merge, num_returns=width).remote(width, *args)
            merged[lo:hi] = [out] if width == 1 else out
        rounds.append(merged)
    return rounds


def _slice_concat(pieces: list, *inputs):
    """One output block of `repartition`: (input, offset, rows) pieces of the inputs, joined."""
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    tables = [B.concat(list(blocks)) for blocks in inputs]
    out = [B.concat([tables[i].slice(offset, rows) for i, offset, rows in pieces])]
    return [B.IpcBlock(t) for t in out], B.task_meta(out, wall0, cpu0)


_remotes: dict = {}


def remote(target, **options):
    """`oxray.remote(**options)(target)`, made once per process (a function is registered once)."""
    key = (target, tuple(sorted(options.items())))
    if key not in _remotes:
        _remotes[key] = oxray.remote(**options)(target) if options else oxray.remote(target)
    return _remotes[key]


def _submit_slices(refs: list, pieces: list):
    """One task joining `pieces` ((index into refs, offset, rows)) into one block: (data, meta)."""
    used = list(dict.fromkeys(i for i, _, _ in pieces))
    local = {i: j for j, i in enumerate(used)}
    task = remote(_slice_concat, num_returns=2)
    return task.remote([(local[i], offset, rows) for i, offset, rows in pieces], *[refs[i] for i in used])


def slice_ranges(refs: list, rows: list, bounds: list) -> list:
    """One task per (lo, hi) row range of the blocks `refs` (of `rows` rows each), which joins
    the range's slices into one block: (data ref, metadata ref) per range."""
    return [_submit_slices(refs, p) for p in _native.data_slice_pieces(rows, bounds)]


class _MapActor:
    """One member of a class UDF's actor pool: builds the UDF once, then maps blocks."""

    def __init__(self, fns, ctx=None):
        _use_context(ctx)
        self.fns = fns
        for fn in fns:
            fn.setup()

    def release_udfs(self) -> None:
        """Drops the UDF instances (running their `__del__`) before the actor exits."""
        self.fns = None
        gc.collect()

    def run(self, read_task, task_idx, *inputs):
        T.set_task_index(task_idx)
        retry_on = DataContext.get_current().actor_task_retry_on_errors
        attempt = 0
        while True:
            try:
                return _run_blocks(self.fns, read_task, inputs)
            except T.UDFError as e:
                # `actor_task_retry_on_errors`: the UDF's own exception decides a retry here,
                # on this actor (whose state the UDF may count on, as Ray's retried calls do).
                cause = e.__cause__
                wanted = retry_on is True or (
                    isinstance(retry_on, (list, tuple)) and isinstance(cause, tuple(retry_on))
                )
                if not wanted or attempt >= ACTOR_TASK_RETRIES:
                    raise
                attempt += 1


# ---- the driver ----


class Executor:
    def __init__(self, stages: list, ctx, stats: ExecutionStats, progress=None, reads_as_tasks: bool = False):
        self.stages = stages
        self.reads_as_tasks = reads_as_tasks
        self.ctx = ctx
        self.stats = stats
        self.progress = progress
        opts = ctx.execution_options
        self.preserve_order = bool(opts.preserve_order)
        self.scheduling_strategy = getattr(ctx, "scheduling_strategy", "SPREAD")
        limit = opts.resource_limits.object_store_memory
        cpus = opts.resource_limits.cpu
        if limit is None or cpus is None:
            cluster = oxray.cluster_resources()
            if limit is None:
                limit = int(cluster.get("object_store_memory", 2 << 30) * DEFAULT_STORE_SHARE)
            if cpus is None:
                cpus = cluster.get("CPU", 1)
        self.budget = int(limit)
        self.max_tasks = max(1, int(cpus) * 2)
        self.cluster_cpus = max(1, int(cpus))
        # No read block bigger than a task's share of the budget (a task per CPU, each holding
        # its input and its output), so a small store gets small blocks.
        self.block_cap = max(MIN_BLOCK_CAP, self.budget // (2 * self.cluster_cpus))
        self.read_threads = max(1, min(int(cpus), 8))
        # What the scheduler's operators, bundles and tasks name.
        self._specs: list = []
        self._ops: dict = {}  # op index -> stage (and its read tasks / local stream)
        self._data: dict = {}  # bundle id -> object ref or list of tables
        self._tasks: dict = {}  # meta ref -> (task id, data ref)
        self._task_refs: dict = {}  # task id -> meta ref
        self._actors: dict = {}  # op index -> {slot: actor}
        self._streams: dict = {}  # op index -> open local stream
        self._read_cpu: dict = {}  # op index -> process CPU time when its stream opened
        self._task_index: dict = {}  # op index -> tasks submitted so far
        # Bundle id -> what the task that made it reported (B.task_meta): its bytes place the
        # tasks that take it, its schema and rows per block spare its consumer a fetch.
        self._reports: dict = {}

    # -- topology --

    def _add(self, kind: str, name: str, inputs: list, params, stage) -> int:
        self._specs.append((kind, name, inputs, params))
        self._ops[len(self._specs) - 1] = stage
        return len(self._specs) - 1

    def _build(self, stages: list) -> int:
        last = None
        # An all-to-all waits for all its input: a read feeding one runs as tasks, so the blocks
        # wait in the object store (which spills), never as tables held in this process. A
        # consumer that asked for it (streaming_split's coordinator, which feeds training ranks
        # on any node) gets its reads as tasks too, spread over the cluster.
        feeds_all_to_all = any(isinstance(s, P.AllToAllStage) for s in stages)
        for stage in stages:
            if isinstance(stage, P.ReadStage):
                local = stage.source.streams_locally and not feeds_all_to_all
                if local and not (self.reads_as_tasks or reads_belong_elsewhere()):
                    last = self._add("local", stage.name, [], None, stage)
                else:
                    compute = stage.source.read_compute or P.ComputeSpec()
                    last = self._map(P.MapStage([], compute, None, stage.name, read=stage.source), None)
            elif isinstance(stage, P.MapStage):
                last = self._map(stage, last)
            elif isinstance(stage, P.LimitStage):
                last = self._add("limit", stage.name, [last], stage.n, stage)
            elif isinstance(stage, P.AllToAllStage):
                args = stage.args
                kind = stage.kind
                if kind in ("random_shuffle", "sort", "groupby"):
                    # Sort and groupby are shuffles to the scheduler: n map and n reduce tasks.
                    kind, params = "random_shuffle", (args.get("seed"), args.get("num_blocks"))
                elif kind == "randomize_block_order":
                    params = args.get("seed")
                else:
                    params = (args.get("num_blocks"), args.get("target_num_rows_per_block"))
                last = self._add(kind, stage.name, [last], params, stage)
            elif isinstance(stage, P.UnionStage):
                last = self._add("union", stage.name, [self._build(s) for s in stage.inputs], None, stage)
            else:  # pragma: no cover
                raise TypeError(f"unknown stage {stage!r}")
        return last

    def _map(self, stage: P.MapStage, upstream: Optional[int]) -> int:
        compute = stage.compute
        reads, inputs = None, [upstream]
        tasks = None
        if stage.read is not None:
            tasks = group_reads_for_batches(_with_block_cap(stage.read, self.block_cap).read_tasks(), stage.batch_size)
            reads, inputs = [t.size or _UNKNOWN_READ_BYTES for t in tasks], []
        pool = None
        if compute.actors:
            pool = (compute.min_size, compute.initial_size, compute.max_size, compute.max_tasks_in_flight_per_actor)
        params = (reads, stage.batch_size, compute.task_concurrency, pool)
        return self._add("map", stage.name, inputs, params, (stage, tasks))

    # -- running --

    def run(self) -> Iterator[Bundle]:
        self._build(self.stages)
        scheduler = _native.DataExecutor(
            self._specs,
            self.budget,
            self.max_tasks,
            self.cluster_cpus,
            self.preserve_order,
            self.ctx.actor_pool_util_downscaling_threshold,
            self.ctx.actor_pool_scale_down_debounce_s,
        )
        self.stats.scheduler = scheduler
        reporter = ExecutionReporter(self._specs, self.budget)
        # For stats(): the operators' inputs and the run's times, and the stages it ran.
        self.stats.reporter, self.stats.stages = reporter, self.stages
        ending = ("FINISHED", "")
        try:
            while True:
                actions = scheduler.poll()
                for action in actions:
                    self._perform(scheduler, action)
                reporter.update(scheduler)
                out = scheduler.next_output()
                if out is not None:
                    bundle_id, rows, size = out
                    handed = time.monotonic()
                    report = self._reports.pop(bundle_id, None)
                    yield Bundle(bundle_id, rows, size, self._data.pop(bundle_id), scheduler, report)
                    reporter.waited_on_consumer(time.monotonic() - handed, rows)
                    continue
                if scheduler.finished():
                    self._warn_few_inputs()
                    return
                if actions:
                    continue  # what they did (a block pulled) may let the scheduler move
                if not self._tasks:
                    raise RuntimeError(
                        "oxray.data: the executor has nothing running and no output (a scheduler bug); "
                        "please report it with the dataset's repr"
                    )
                self._wait(scheduler)
        except GeneratorExit:
            ending = ("FINISHED", "its consumer stopped early")
            raise
        except BaseException as e:
            ending = ("FAILED", f"{type(e).__name__}: {e}")
            raise
        finally:
            reporter.ended(scheduler, *ending)
            self._shutdown()

    def _warn_few_inputs(self) -> None:
        """As Ray: a map operator given a concurrency it could never use (fewer inputs than
        tasks it may run) says so, and how to get more inputs. Not after a limit, which cuts
        its upstream short on purpose."""
        if any(isinstance(stage, P.LimitStage) for stage in self.stages):
            return
        for op, entry in self._ops.items():
            stage = entry[0] if isinstance(entry, tuple) else entry  # a map op holds (stage, read tasks)
            if not isinstance(stage, P.MapStage):
                continue
            compute = stage.compute
            limit = compute.max_size if compute.actors else compute.task_concurrency
            ran = self._task_index.get(op, 0)
            if limit is not None and ran < limit:
                warnings.warn(
                    f"The maximum number of concurrent tasks for '{stage.name}' is set to {limit}, but the "
                    f"operator only received {ran} input(s). This means that the operator can launch at most "
                    f"{ran} task(s), which is less than the concurrency limit. You might be able to increase "
                    "the number of concurrent tasks by configuring `override_num_blocks` earlier in the pipeline.",
                    UserWarning,
                    stacklevel=2,
                )

    def _wait(self, scheduler) -> None:
        ready, _ = oxray.wait(list(self._tasks), num_returns=1)
        for meta_ref in ready:
            task, data_ref = self._tasks.pop(meta_ref)
            del self._task_refs[task]
            meta = oxray.get(meta_ref)
            bundle = scheduler.task_done(task, meta["rows"], meta["bytes"], meta["blocks"], meta["wall"], meta["cpu"])
            if bundle is not None:
                self._data[bundle] = data_ref
                self._reports[bundle] = meta
        self._report(scheduler)

    def _report(self, scheduler) -> None:
        if self.progress is not None:
            self.progress.update(scheduler.progress())

    def _track(self, task: int, refs) -> None:
        data_ref, meta_ref = refs
        self._tasks[meta_ref] = (task, data_ref)
        self._task_refs[task] = meta_ref

    def _ref(self, bundle: int):
        data = self._data[bundle]
        if isinstance(data, list):
            data = self._data[bundle] = oxray.put([B.IpcBlock(t) for t in data])
        return data

    def _tables(self, bundle: int) -> list:
        data = self._data[bundle]
        return data if isinstance(data, list) else oxray.get(data)

    def _perform(self, scheduler, action: _native.DataAction) -> None:  # noqa: C901 - one case per scheduler action
        A = _native.DataAction
        match action:
            case A.Submit(task=task, op=op, read=read, inputs=inputs, actor=actor):
                self._submit(task, op, read, inputs, actor)
            case A.PullLocal(op=op):
                self._pull(scheduler, op)
            case A.Release(bundle=bundle):
                self._data.pop(bundle, None)
                self._reports.pop(bundle, None)
            case A.StartActor(op=op, actor=slot):
                self._start_actor(op, slot)
            case A.StopActor(op=op, actor=slot):
                # Idle and no longer needed (the pool shrinks toward its minimum): its UDF's
                # __del__ runs, then it exits and frees its CPU.
                _stop_gracefully(self._actors[op].pop(slot))
            case A.StopActors(op=op, cancelled=cancelled):
                for actor in self._actors.pop(op, {}).values():
                    if cancelled:
                        _kill(actor)  # cut short: its calls may still run (a hung UDF must not keep a CPU)
                    else:
                        # The operator is done: the actor drops its UDF (so the UDF's __del__ cleans
                        # up, as in Ray), then exits, in call order; nothing here waits for it.
                        _stop_gracefully(actor)
            case A.Cancel(task=task):
                meta_ref = self._task_refs.pop(task, None)
                if meta_ref is not None:
                    self._tasks.pop(meta_ref, None)
                    _cancel(meta_ref)
            case A.Slice(bundle=bundle, rows=rows, out=out):
                self._slice(scheduler, bundle, rows, out)
            case A.Shuffle(op=op, inputs=inputs, map_seeds=map_seeds, outputs=outputs):
                if self._ops[op].kind in ("sort", "groupby"):
                    self._range_exchange(self._ops[op], inputs, [task for task, _ in outputs])
                else:
                    self._shuffle(inputs, map_seeds, outputs)
            case A.Slices(inputs=inputs, outputs=outputs):
                refs = [self._ref(b) for b in inputs]
                for task, pieces in outputs:
                    self._track(task, _submit_slices(refs, pieces))
            case _:  # pragma: no cover - every action the scheduler makes is handled above
                raise RuntimeError(f"unknown scheduler action {action!r}")

    def _submit(self, task: int, op: int, read, inputs: list, actor) -> None:
        stage, read_tasks = self._ops[op]
        read_task = read_tasks[read] if read is not None else None
        args = [self._ref(b) for b in inputs]
        # The operator's n-th task, as Ray's TaskContext.task_idx (seeds per-task randomness).
        task_idx = self._task_index.get(op, 0)
        self._task_index[op] = task_idx + 1
        if actor is not None:
            refs = self._actors[op][actor].run.options(num_returns=2).remote(read_task, task_idx, *args)
        else:
            input_bytes = sum(self._reports[b]["bytes"] for b in inputs if b in self._reports)
            input_bytes += getattr(read_task, "stored_bytes", 0)  # a user's ReadTask may lack it
            opts = self._placement(stage.compute.remote_options(), input_bytes)
            # max_calls is a static option of a remote function (not of .options()).
            static = {"max_calls": opts.pop("max_calls")} if "max_calls" in opts else {}
            fn = remote(_map_task, num_returns=2, **static).options(**opts)
            refs = fn.remote(stage.fns, read_task, task_idx, self.ctx, *args)
        self._track(task, refs)

    def _start_actor(self, op: int, slot: int) -> None:
        stage = self._ops[op][0]
        opts = self._placement(stage.compute.remote_options())
        if "num_cpus" not in opts and "num_gpus" not in opts:
            opts["num_cpus"] = 1  # as Ray Data: a pool actor holds a CPU, so pools spread over nodes
        # As Ray Data: a pool actor whose process dies is restarted and its calls retried,
        # unless max_restarts=0. Ray never stops; a bound turns a UDF that always crashes
        # its process into an error instead of a hang.
        opts.setdefault("max_restarts", POOL_ACTOR_RESTARTS)
        if opts["max_restarts"] != 0:
            opts.setdefault("max_task_retries", POOL_ACTOR_RESTARTS)
        self._actors.setdefault(op, {})[slot] = remote(_MapActor).options(**opts).remote(stage.fns, self.ctx)

    def _slice(self, scheduler, bundle: int, rows: int, out: int) -> None:
        tables, cut = [], rows
        for t in self._tables(bundle):
            if cut <= 0:
                break
            tables.append(t.slice(0, cut))
            cut -= min(cut, t.num_rows)
        self._data[out] = tables
        scheduler.sliced(out, sum(t.nbytes for t in tables))

    def _shuffle(self, inputs: list, map_seeds: list, outputs: list) -> None:
        n_out = len(outputs)
        dealt = []
        for bundle, seed in zip(inputs, map_seeds, strict=True):
            parts = remote(_shuffle_map, num_returns=n_out).remote(n_out, seed, self._ref(bundle))
            dealt.append([parts] if n_out == 1 else parts)
        if push_based(self.ctx):
            dealt = merge_rounds(dealt, n_out)
        reduce = remote(_shuffle_reduce, num_returns=2)
        for j, (task, seed) in enumerate(outputs):
            self._track(task, reduce.remote(seed, *[parts[j] for parts in dealt]))

    def _placement(self, opts: dict, input_bytes: int = 0) -> dict:
        """The remote options with the dataset's scheduling strategy: as Ray, `SPREAD` by default,
        and for a task whose inputs reach `large_args_threshold` bytes, `scheduling_strategy_large_args`
        (`DEFAULT`: the task goes to the node holding most of its inputs when it has room)."""
        opts = dict(opts)
        strategy = self.scheduling_strategy
        if input_bytes and input_bytes >= self.ctx.large_args_threshold:
            strategy = self.ctx.scheduling_strategy_large_args
        opts.setdefault("scheduling_strategy", strategy)
        return opts

    def _range_exchange(self, stage: P.AllToAllStage, inputs: list, tasks: list) -> None:
        """Sort or groupby: sample the keys, cut every input by key range, reduce each range."""
        key, n_out = stage.args["key"], len(tasks)
        refs = [self._ref(b) for b in inputs]
        if stage.args.get("hash"):
            bounds = X.HashPartitions(n_out)
        elif stage.args.get("boundaries") is not None:
            bounds = X.UserBoundaries(stage.args["boundaries"], key.descending[0])
        else:
            sample = remote(X.sample_keys)
            samples = oxray.get([sample.remote(key, X.SAMPLES_PER_BLOCK, r) for r in refs])
            bounds = X.boundaries_from(samples, key, n_out)
        reducer = stage.args.get("reducer")
        needed = getattr(reducer, "columns_needed", lambda: None)()
        columns = sorted(needed) if needed is not None else None
        dealt = []
        for ref in refs:
            parts = remote(X.partition_map, num_returns=n_out).remote(key, bounds, n_out, ref, columns=columns)
            dealt.append([parts] if n_out == 1 else parts)
        if push_based(self.ctx):
            dealt = merge_rounds(dealt, n_out)
        for j, task in enumerate(tasks):
            parts = [p[j] for p in dealt]
            if reducer is None:
                refs_out = remote(X.sort_reduce, num_returns=2).remote(key, *parts)
            else:
                refs_out = remote(X.group_reduce, num_returns=2).remote(reducer, *parts)
            self._track(task, refs_out)

    def _pull(self, scheduler, op: int) -> None:
        stream = self._streams.get(op)
        if stream is None:
            stage = self._ops[op]
            self._read_cpu[op] = time.process_time()
            stream = self._streams[op] = iter(stage.source.local_stream(self.read_threads, self.budget))
        table = next(stream, None)
        if table is None:
            scheduler.local_done(op)
            self._close(op)
        else:
            cpu = time.process_time() - self._read_cpu[op]
            bundle = scheduler.local_block(op, table.num_rows, table.nbytes, cpu)
            self._data[bundle] = [table]
            self._reports[bundle] = {"bytes": table.nbytes}
        self._report(scheduler)

    def _close(self, op: int) -> None:
        stream = self._streams.pop(op, None)
        close = getattr(stream, "close", None)
        if close is not None:
            close()

    def _shutdown(self) -> None:
        for meta_ref in self._tasks:
            _cancel(meta_ref)
        self._tasks.clear()
        self._task_refs.clear()
        for actors in self._actors.values():
            for actor in actors.values():
                _kill(actor)
        self._actors.clear()
        for op in list(self._streams):
            self._close(op)
        self._data.clear()


def reads_belong_elsewhere() -> bool:
    """Whether a read without a UDF should run as tasks instead of decoding in this process
    (oxray's fast path, Ray runs every read as a task): when this process is a worker (busy
    with its own task or actor, such as a training rank) and some node has a free CPU, or when
    it is the driver and its node's CPUs are all taken (by training workers, say) while
    another node has a free one."""
    from oxray._private.state import STATE

    nodes = [n for n in STATE.client.cluster_info() if n.alive]
    free = {n.node_id: n.available.get("CPU", 0.0) >= 1 for n in nodes}
    if STATE.mode == "worker":
        return any(free.values())
    return not free.get(STATE.node_id, True) and any(free.values())


def _cancel(ref) -> None:
    try:
        oxray.cancel(ref)
    except Exception:  # noqa: BLE001 - best effort: the task may have finished
        pass


def _stop_gracefully(actor) -> None:
    try:
        actor.release_udfs.remote()
        actor.__ray_terminate__.remote()
    except Exception:  # noqa: BLE001 - it may be gone already
        _kill(actor)


def _kill(actor) -> None:
    try:
        oxray.kill(actor)
    except Exception:  # noqa: BLE001 - best effort: it may be gone already
        pass
