"""What a Data execution tells the head about itself, for the dashboard's
Datasets page and Ray's `/api/data/datasets/{job_id}`: each operator's rows
and bytes in and out, blocks out, tasks and blocks in flight, rows/s, the
object-store bytes the execution holds (now and at most), and how long it has
waited on its consumer. Sent at most twice a second while it runs; a failure to
reach the head is never the dataset's failure."""

from __future__ import annotations

import json
import os
import time

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
        for i, (name, rows, size, blocks, tasks, in_flight, wall, cpu) in enumerate(figures):
            inputs = self.specs[i][2] if i < len(self.specs) else []
            operators.append(
                {
                    "operator": name,
                    "rows_in": sum(figures[j][1] for j in inputs) if inputs else None,
                    "bytes_in": sum(figures[j][2] for j in inputs) if inputs else None,
                    "rows_out": rows,
                    "bytes_out": size,
                    "blocks_out": blocks,
                    "tasks": tasks,
                    "blocks_in_flight": in_flight,
                    "wall_s": wall,
                    "cpu_s": cpu,
                    "rows_per_s": rows / wall if wall > 0 else 0.0,
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
