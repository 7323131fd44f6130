"""Progress while a dataset executes from the driver: a line per operator on a terminal,
none with `DataContext.enable_progress_bars = False`. The driver runs under a pseudo-terminal
so its stderr is a TTY, as in a user's shell."""

import os
import pty
import subprocess
import sys

import pytest
from data_testutil import AGAINST_RAY

pytestmark = [pytest.mark.timeout(120), pytest.mark.skipif(AGAINST_RAY, reason="oxray's own progress lines")]

SCRIPT = """
import oxray as ray
ray.init(num_cpus=2)
ray.data.DataContext.get_current().enable_progress_bars = {enabled}
ds = ray.data.range(2000, override_num_blocks=20).map_batches(lambda b: {{"id": b["id"] * 2}})
print("rows", sum(len(b["id"]) for b in ds.iter_batches(batch_size=100)), flush=True)
"""


def _run_on_a_terminal(enabled: bool) -> str:
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT.format(enabled=enabled)],
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
        env=dict(os.environ),
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(timeout=60) == 0
    os.close(leader)
    return b"".join(chunks).decode(errors="replace")


def test_progress_lines_name_each_operator_with_rows_and_rate():
    out = _run_on_a_terminal(True)
    assert "rows 2000" in out
    line = [ln for ln in out.splitlines() if "ReadRange->MapBatches(<lambda>)" in ln]
    assert line, out
    assert "2,000 rows" in out and "rows/s" in line[-1] and "in flight" in line[-1]


def test_progress_lines_are_off_when_disabled():
    out = _run_on_a_terminal(False)
    assert "rows 2000" in out
    assert "rows/s" not in out and "MapBatches" not in out
