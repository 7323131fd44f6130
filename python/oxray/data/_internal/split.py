"""`streaming_split`: one execution of a dataset shared by n consumers (Train's ranks).

A coordinator actor (no CPU of its own) runs the executor and hands each split its share of
every block as (reference, table, offset, rows) segments; consumers slice the mapped blocks
themselves, so data moves once: the coordinator never fetches a block (the task that made it
reported its rows), and each consumer pulls its segments straight to its own node. With
`equal=True` every split gets the same number of rows: each block is cut into n equal runs
and the rows left over are pooled and shared out the same way (fewer than n rows may be
dropped at the end of an epoch); with `equal=False` each block goes whole to the split that
has had the fewest rows. A new epoch starts once every split has asked for it, and runs the
dataset again (a new shuffle order when it shuffles).
"""

from __future__ import annotations

import collections
import os
import threading

import oxray
from oxray.data._internal.executor import DEFAULT_STORE_SHARE, remote
from oxray.data.iterator import DataIterator


class _SplitCoordinator:
    def __init__(self, dataset, n: int, equal: bool):
        self.dataset, self.n, self.equal = dataset, n, equal
        self.cond = threading.Condition()
        self.epoch = -1
        self.waiting: set = set()
        # Per split: the last epoch it started (every copy of a split's iterator shares it),
        # and whether a consumer is reading it now.
        self.split_epochs = [-1] * n
        self.reading: list = [None] * n  # the reading process's pid, or None
        self.stats_text = ""
        # Stop pulling while a split has this many bytes waiting: the queues together hold at
        # most half the execution's budget (plus a few blocks), on top of the executor's own.
        ctx = dataset._context
        budget = ctx.execution_options.resource_limits.object_store_memory if ctx is not None else None
        if budget is None:
            budget = oxray.cluster_resources().get("object_store_memory", 2 << 30) * DEFAULT_STORE_SHARE
        self.base_queue_limit = self.queue_limit = max(int(budget) // (2 * n), 1)
        self.row_bytes = 0.0
        self.backpressure_waits = 0
        self._reset()

    def _reset(self) -> None:
        self.queues = [collections.deque() for _ in range(self.n)]
        self.queued_bytes = [0] * self.n
        self.leftover: list = []
        self.leftover_rows = 0
        self.rows_given = [0] * self.n
        self.finished = False
        self.pulling = False
        self.error = None
        self.gen = None

    def start_epoch(self, split: int, reader: int) -> int:
        """Starts `split`'s next epoch (once every split has asked for it); returns its number.
        `reader` is the consuming process: another process reading the split meanwhile is an
        error, as in Ray (the same process starting again has dropped its last epoch)."""
        with self.cond:
            if self.reading[split] not in (None, reader):
                raise ValueError(
                    f"streaming_split: split {split} is read by more than one consumer at once; each "
                    "split's iterator may be consumed by one reader at a time"
                )
            epoch = self.split_epochs[split] = self.split_epochs[split] + 1
            self.reading[split] = reader
            if epoch <= self.epoch:
                return epoch
            self.waiting.add(split)
            self.cond.notify_all()
            while epoch > self.epoch and len(self.waiting) < self.n:
                self.cond.wait()
            if epoch > self.epoch:
                if self.gen is not None:
                    self.gen.close()
                self._reset()
                self.epoch = epoch
                self.waiting.clear()
                # Reads run as tasks over the cluster: this coordinator is one process, on one
                # node, while the ranks it feeds (busy training) may be on any.
                self.gen = self.dataset._execute(progress=False, reads_as_tasks=True)
                self.cond.notify_all()
            return epoch

    def end_read(self, split: int, epoch: int) -> None:
        """`split`'s consumer stopped reading `epoch` (at its end or early)."""
        with self.cond:
            if self.split_epochs[split] == epoch:
                self.reading[split] = None
            self.cond.notify_all()

    def _give(self, split: int, segments: list, rows: int) -> None:
        if rows:
            size = int(rows * self.row_bytes)
            self.queues[split].append((segments, size))
            self.queued_bytes[split] += size

    @staticmethod
    def _take(segments: list, rows: int) -> tuple:
        """The first `rows` rows of a segment list, and the rest."""
        out, rest = [], []
        for ref, ti, off, length in segments:
            if rows <= 0:
                rest.append((ref, ti, off, length))
            elif length <= rows:
                out.append((ref, ti, off, length))
                rows -= length
            else:
                out.append((ref, ti, off, rows))
                rest.append((ref, ti, off + rows, length - rows))
                rows = 0
        return out, rest

    def _share(self, segments: list, total: int) -> None:
        per = total // self.n
        if per:
            for i in range(self.n):
                head, segments = self._take(segments, per)
                self._give(i, head, per)
        if segments:
            self.leftover.extend(segments)
            self.leftover_rows += total - per * self.n

    def _distribute(self, bundle) -> None:
        # The rows of each block, as the task that made it reported: the blocks stay where they
        # are until each consumer fetches its segments to its own node.
        block_rows = bundle.block_rows
        ref = bundle.to_ref()
        if block_rows is None:
            block_rows = [t.num_rows for t in oxray.get(ref)]
        self.row_bytes = bundle.size / max(bundle.rows, 1)
        # A split's share of a few blocks always fits, whatever the budget.
        self.queue_limit = max(self.base_queue_limit, 4 * bundle.size // self.n)
        segments = [(ref, i, 0, rows) for i, rows in enumerate(block_rows) if rows]
        if not self.equal:
            # Whole blocks, each to the split that has had the fewest rows, as Ray's splitter.
            split = min(range(self.n), key=lambda i: self.rows_given[i])
            self.rows_given[split] += bundle.rows
            self._give(split, segments, bundle.rows)
            return
        self._share(segments, bundle.rows)
        if self.leftover_rows >= self.n:
            pool, rows = self.leftover, self.leftover_rows
            self.leftover, self.leftover_rows = [], 0
            self._share(pool, rows)

    def _finish(self) -> None:
        self.leftover, self.leftover_rows = [], 0  # equal=True: fewer than n rows are dropped
        self.finished = True
        self.stats_text = self.dataset.stats()

    def next(self, split: int, epoch: int):
        """The next segments for `split`, or None at the end of the epoch."""
        with self.cond:
            while True:
                if epoch != self.epoch:
                    return None
                if self.queues[split]:
                    segs, size = self.queues[split].popleft()
                    self.queued_bytes[split] -= size
                    self.cond.notify_all()
                    return segs
                if self.error is not None:
                    raise self.error
                if self.finished:
                    return None
                if self.pulling:
                    self.cond.wait()
                    continue
                if max(self.queued_bytes) >= self.queue_limit:
                    self.backpressure_waits += 1  # a split behind holds the others back
                    self.cond.wait()
                    continue
                self.pulling = True
                gen = self.gen
                self.cond.release()
                bundle, error = None, None
                try:
                    bundle = next(gen)
                except StopIteration:
                    pass
                except BaseException as e:  # noqa: BLE001 - every split sees the failure
                    error = e
                finally:
                    self.cond.acquire()
                self.pulling = False
                if gen is self.gen:
                    if error is not None:
                        self.error = error
                    elif bundle is None:
                        self._finish()
                    else:
                        self._distribute(bundle)
                        bundle.release()
                self.cond.notify_all()

    def stats(self) -> str:
        return self.stats_text or self.dataset.stats()

    def backpressure(self) -> int:
        """How often a split waited because another split's queue was full."""
        return self.backpressure_waits


class _SplitBlocks:
    """The block stream of one split; each call runs one epoch."""

    def __init__(self, coordinator, split: int):
        self.coordinator, self.split = coordinator, split

    def __call__(self):
        # The coordinator counts epochs: copies of this iterator (shipped to tasks) share them.
        epoch = oxray.get(self.coordinator.start_epoch.remote(self.split, os.getpid()))
        try:
            while True:
                segs = oxray.get(self.coordinator.next.remote(self.split, epoch))
                if segs is None:
                    return
                refs = list(dict.fromkeys(s[0] for s in segs))
                fetched = dict(zip(refs, oxray.get(refs), strict=True))
                for ref, ti, off, length in segs:
                    yield fetched[ref][ti].slice(off, length)
        finally:
            try:
                # Not waited on: this may run while the generator is collected, or after shutdown.
                self.coordinator.end_read.remote(self.split, epoch)
            except Exception:  # noqa: BLE001 - the coordinator is gone: nothing left to tell
                pass


def streaming_split(dataset, n: int, equal: bool) -> list:
    if not oxray.is_initialized():
        oxray.init()
    coordinator = remote(_SplitCoordinator).options(num_cpus=0, max_concurrency=2 * n + 4).remote(dataset, n, equal)
    out = []
    for i in range(n):
        blocks = _SplitBlocks(coordinator, i)
        out.append(
            DataIterator(
                blocks,
                f"split {i} of {n} of {dataset!r}",
                lambda c=coordinator: oxray.get(c.stats.remote()),
                dataset.schema,
                coordinator,
            )
        )
    return out
