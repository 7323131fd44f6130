"""A dataset about 12x the object store streams through it within the
execution budget (``resource_limits.object_store_memory``): the store never
holds more than the budget plus a couple of blocks, nothing spills, and the
driver's RSS does not grow with the data.

oxray only: the store's usage is read from the embedded node
(``StoreStats``), which Ray does not expose.
"""

import threading

import numpy as np
import pytest
from data_testutil import AGAINST_RAY, MiB, ray, start_cluster

from oxray_testutil import wait_until

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.skipif(AGAINST_RAY, reason="reads oxray's own object store statistics"),
]

STORE = 32 * MiB
BUDGET = 16 * MiB
COLUMNS = 16
ROWS = 5_400_000  # (8 + 16 * 4) bytes a row: ~370 MiB, ~12x the store
BLOCKS = 256
BLOCK_BYTES = ROWS // BLOCKS * (8 + 4 * COLUMNS)


def widen(batch):
    ids = batch["id"]
    out = {"id": ids}
    for k in range(COLUMNS):
        out[f"f{k}"] = ids.astype(np.float32) + k
    return out


@pytest.fixture
def small_store_cluster():
    start_cluster(object_store_memory=STORE)
    ctx = ray.data.DataContext.get_current()
    before = ctx.execution_options.resource_limits
    ctx.execution_options.resource_limits = before.copy(object_store_memory=BUDGET)
    try:
        yield
    finally:
        ctx.execution_options.resource_limits = before
        ray.shutdown()


class StorePeak:
    """Samples the store's use (and this process's RSS) on a thread until stopped."""

    def __init__(self):
        import psutil

        from oxray._private.state import STATE

        self.stats = STATE.cluster.store_stats
        self.me = psutil.Process()
        self.spilled_before = self.stats().num_spilled_total
        self.rss_before = self.me.memory_info().rss
        self.shm = self.rss = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self):
        while not self._done.is_set():
            s = self.stats()
            if s is None:
                return
            self.shm = max(self.shm, s.shm_used)
            self.rss = max(self.rss, self.me.memory_info().rss)
            self._done.wait(0.005)

    def stop(self):
        self._done.set()
        self._thread.join(timeout=10)

    def spilled(self) -> bool:
        s = self.stats()
        return s.num_spilled_total != self.spilled_before or s.spilled_bytes != 0


def test_dataset_ten_times_the_store_streams_within_the_budget(small_store_cluster):
    pytest.importorskip("psutil")
    peak = StorePeak()
    rows = 0
    id_sum = 0
    try:
        ds = ray.data.range(ROWS, override_num_blocks=BLOCKS).map_batches(widen)
        for batch in ds.iter_batches(batch_size=65536, batch_format="numpy"):
            rows += len(batch["id"])
            id_sum += int(batch["id"].sum())
            assert float(batch["f15"][0]) == float(batch["id"][0]) + 15
    finally:
        peak.stop()
    assert rows == ROWS and id_sum == ROWS * (ROWS - 1) // 2
    assert peak.shm <= BUDGET + 2 * BLOCK_BYTES, f"store peaked at {peak.shm / MiB:.1f} MiB"
    assert not peak.spilled()
    assert peak.rss - peak.rss_before < 200 * MiB, f"driver RSS grew {(peak.rss - peak.rss_before) / MiB:.0f} MiB"


def test_streaming_split_to_two_consumers_stays_within_one_and_a_half_budgets(small_store_cluster):
    """Train's path: a split coordinator feeding two ranks keeps at most half the budget queued
    for the ranks, on top of the executor's own budget, however far the data exceeds the store."""
    pytest.importorskip("psutil")
    peak = StorePeak()
    rows = [0, 0]
    ds = ray.data.range(ROWS // 2, override_num_blocks=BLOCKS // 2).map_batches(widen)
    splits = ds.streaming_split(2, equal=True)
    coordinator = splits[0]._coordinator
    first_done, resume = threading.Event(), threading.Event()

    def consume(i):
        for batch in splits[i].iter_batches(batch_size=65536, batch_format="numpy", prefetch_batches=0):
            rows[i] += len(batch["id"])
            if i == 1:
                resume.wait()
        if i == 0:
            first_done.set()

    # Split 1 stalls after its first batch: split 0 runs ahead until split 1's queue is full and
    # it is held back (without backpressure, to its end while everything queues up for split 1).
    consumers = [threading.Thread(target=consume, args=(i,)) for i in range(2)]
    try:
        for t in consumers:
            t.start()
        wait_until(
            "split 0 to finish or be held back",
            lambda: first_done.is_set() or ray.get(coordinator.backpressure.remote()) != 0,
            timeout=120,
        )
        resume.set()
        for t in consumers:
            t.join()
    finally:
        resume.set()
        peak.stop()
    assert rows[0] == rows[1] == ROWS // 4
    assert not first_done.is_set() or ray.get(coordinator.backpressure.remote()) > 0
    assert peak.shm <= BUDGET * 1.5 + 4 * BLOCK_BYTES, f"store peaked at {peak.shm / MiB:.1f} MiB"
    assert not peak.spilled()
