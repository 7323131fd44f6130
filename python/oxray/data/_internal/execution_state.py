"""What a Data execution tells about itself. To the head, for the dashboard's
Datasets page and Ray's `/api/data/datasets/{job_id}`: each operator's rows
and bytes in and out, blocks out, tasks and blocks in flight, rows/s, the
object-store bytes the execution holds (now and at most), and how long it has
waited on its consumer. Sent at most twice a second while it runs; a failure to
reach the head is never the dataset's failure. To the user, `Dataset.stats()`
in Ray's layout (`stats_text`)."""

from __future__ import annotations

import json
import os
import time
from typing import Optional

# Seconds between two updates while an execution runs.
UPDATE_EVERY_S = 0.5


class ExecutionReporter:
    def __init__(self, specs: list, budget: int):
        import oxray

        self.specs = specs
        self.state = {
            "id": os.urandom(8).hex(),
            "dataset": " -> ".join(name for _, name, _, _ in specs),
            "job_id": oxray.get_runtime_context().get_job_id(),
            "state": "RUNNING",
            "start_time": time.time(),
            "end_time": None,
            "budget_bytes": budget,
            "blocked_on_consumer_s": 0.0,
            "rows_emitted": 0,
        }
        self._last = 0.0
        self._failed = False

    def waited_on_consumer(self, seconds: float, rows: int) -> None:
        self.state["blocked_on_consumer_s"] += seconds
        self.state["rows_emitted"] += rows

    def update(self, scheduler, force: bool = False) -> None:
        now = time.monotonic()
        if self._failed or (not force and now - self._last < UPDATE_EVERY_S):
            return
        self._last = now
        figures = scheduler.op_figures()
        operators = []
        for i, op in enumerate(figures):
            inputs = self.specs[i][2] if i < len(self.specs) else []
            operators.append(
                {
                    "operator": op.name,
                    "rows_in": sum(figures[j].rows for j in inputs) if inputs else None,
                    "bytes_in": sum(figures[j].bytes for j in inputs) if inputs else None,
                    "rows_out": op.rows,
                    "bytes_out": op.bytes,
                    "blocks_out": op.blocks,
                    "tasks": op.tasks,
                    "blocks_in_flight": op.in_flight,
                    "wall_s": op.wall_s,
                    "cpu_s": op.cpu_s,
                    "rows_per_s": op.rows / op.wall_s if op.wall_s > 0 else 0.0,
                }
            )
        used, peak = scheduler.memory()
        self.state.update(operators=operators, memory_used_bytes=used, memory_peak_bytes=peak)
        self._send()

    def ended(self, scheduler, state: str, detail: str = "") -> None:
        self.state["state"] = state
        self.state["end_time"] = time.time()
        self.state["detail"] = detail
        self.update(scheduler, force=True)

    def _send(self) -> None:
        from oxray._private.api import _client

        try:
            _client().update_dataset(self.state["id"], json.dumps(self.state, default=str))
        except Exception:  # noqa: BLE001 - the dashboard's view must never fail the dataset
            self._failed = True


def _rounded_s(seconds: float) -> float:
    return max(round(seconds, 2), 0)  # Ray's: never -0.0


def stats_text(stats) -> str:
    """`Dataset.stats()` of a run (an executor's `ExecutionStats`), in Ray's layout: per
    operator its tasks, blocks and time, its output rows and bytes per block, and its rows in
    (its inputs' rows out) and out. oxray keeps per-operator totals, not per-task figures, so
    the per-block lines give the mean and total (no min and max). When the run starts from
    blocks made before it (`from_items`, ...), those are reported first, as Ray reports its
    From* operator, and the run's operators are numbered after them."""
    scheduler, reporter = stats.scheduler, stats.reporter
    figures = scheduler.op_figures()
    specs = reporter.specs if reporter is not None else []
    stored = _stored_input(stats.stages)
    out = [stored_blocks_text(*stored)] if stored is not None else []
    stored_rows = sum(r for r, _ in stored[1]) if stored is not None else 0
    number = len(out)
    for i, op in enumerate(figures):
        name, rows, size, blocks, tasks = op.name, op.rows, op.bytes, op.blocks, op.tasks
        wall, cpu = op.wall_s, op.cpu_s
        inputs = specs[i][2] if i < len(specs) else []
        rows_in = sum(figures[j].rows for j in inputs)
        if stored is not None and i == 0:
            if name == stored[0]:
                continue  # the stored blocks read as they are: reported above
            # The stored blocks' read fused into this operator: its input is those blocks.
            name, rows_in = name.removeprefix(f"{stored[0]}->"), stored_rows
        lines = [f"Operator {number} {name}: {tasks} tasks executed, {blocks} blocks produced in {_rounded_s(wall)}s"]
        number += 1
        lines.append(f"* Operator wall time: {wall:.3f}s")
        lines.append(f"* Remote cpu time: {cpu:.3f}s total")
        if blocks:
            lines.append(f"* Output num rows per block: {rows // blocks} mean, {rows} total")
            lines.append(f"* Output size bytes per block: {size // blocks} mean, {size} total")
        lines += _throughput(rows_in, rows, rows / wall if wall > 0 else 0.0)
        out.append("\n".join(lines) + "\n")
    text = "\n".join(out)
    if reporter is not None:
        start, end = reporter.state["start_time"], reporter.state["end_time"] or time.time()
        last_rows = figures[-1].rows if figures else 0
        if end > start and last_rows:
            text += f"\nDataset throughput:\n\t* Ray Data throughput: {last_rows / (end - start)} rows/s\n"
        _used, peak = scheduler.memory()
        text += f"\nDataset memory:\n* Object store budget: {reporter.state['budget_bytes']} bytes"
        text += f"\n* Peak object store bytes in flight: {peak}\n"
    return text


def _stored_input(stages: list) -> Optional[tuple]:
    """(name, block metas) of the stored blocks the run's first stage reads, if it does."""
    from oxray.data._internal import plan as P
    from oxray.data._internal.datasource import StoredBlocksDatasource

    if not stages:
        return None
    first = stages[0]
    source = first.source if isinstance(first, P.ReadStage) else getattr(first, "read", None)
    if isinstance(source, StoredBlocksDatasource):
        return source.name, source.meta
    return None


def _throughput(rows_in: int, rows_out: int, rate: Optional[float]) -> list:
    lines = [
        "* Operator throughput:",
        f"\t* Total input num rows: {rows_in} rows",
        f"\t* Total output num rows: {rows_out} rows",
    ]
    if rate is not None:
        lines.append(f"\t* Ray Data throughput: {rate} rows/s")
    return lines


def stored_blocks_text(name: str, meta: list) -> str:
    """`stats()` of a dataset made from data held here (`from_numpy`, ...): the blocks its
    conversion put in the object store, as Ray reports its From* operator."""
    rows = [r for r, _ in meta]
    sizes = [b for _, b in meta]
    lines = [f"Operator 0 {name}: {len(meta)} blocks produced"]
    if meta:
        lines.append(
            f"* Output num rows per block: {min(rows)} min, {max(rows)} max, "
            f"{sum(rows) // len(rows)} mean, {sum(rows)} total"
        )
        lines.append(
            f"* Output size bytes per block: {min(sizes)} min, {max(sizes)} max, "
            f"{sum(sizes) // len(sizes)} mean, {sum(sizes)} total"
        )
    lines += _throughput(0, sum(rows), None)
    return "\n".join(lines) + "\n"
