"""Progress while a dataset executes from the driver: one line per operator (rows done,
rows/s, blocks in flight) on stderr, redrawn at most 5 times a second; off with
`DataContext.enable_progress_bars = False` or when stderr is not a terminal."""

from __future__ import annotations

import sys
import time

from oxray._private import worker_devices


class ProgressBars:
    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.ops: list = []  # (name, rows, wall seconds, tasks in flight) per started operator
        self.last = 0.0
        self.lines = 0

    def update(self, ops: list) -> None:
        self.ops = ops
        now = time.monotonic()
        if now - self.last >= 0.2:
            self.last = now
            self._draw()

    def _draw(self) -> None:
        out = []
        if self.lines:
            out.append(f"\x1b[{self.lines}F")
        for op in self.ops:
            rate = op.rows / op.wall_s if op.wall_s > 0 else 0.0
            out.append(f"\x1b[2K- {op.name}: {op.rows:,} rows, {rate:,.0f} rows/s, {op.in_flight} in flight\n")
        self.lines = len(self.ops)
        self.stream.write("".join(out))
        self.stream.flush()

    def close(self) -> None:
        if self.ops:
            self._draw()


def progress_for(stages, ctx):
    if not ctx.enable_progress_bars:
        return None
    if worker_devices.in_train_loop():
        return None
    if not getattr(sys.stderr, "isatty", lambda: False)():
        return None
    return ProgressBars()
