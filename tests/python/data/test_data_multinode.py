"""Data on a cluster of three 1-CPU nodes (separate agent processes on 127.0.0.1): map tasks go
round the nodes with room (Ray Data's SPREAD default), and a pool's actors each hold a CPU, so
a 3-actor pool lands on three nodes."""

import os
from collections import Counter

import numpy as np
import pytest

import oxray as ray
from cli_cluster import running_cluster
from oxray_testutil import wait_until

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def three_nodes(tmp_path, monkeypatch):
    with running_cluster(tmp_path / "oxray", monkeypatch) as cluster:
        cluster.start_head(num_cpus=1, resources={"node_a": 1})
        cluster.add_node(num_cpus=1, resources={"node_b": 1})
        cluster.add_node(num_cpus=1, resources={"node_c": 1})
        ray.init()
        cluster.wait_nodes(3)
        try:
            yield cluster
        finally:
            ray.shutdown()


def tag_node(batch):
    return {"id": batch["id"], "node": np.array([os.environ["OXRAY_NODE_ID"]] * len(batch["id"]))}


class TagNode:
    def __call__(self, batch):
        return tag_node(batch)


def barrier_then_tag(batch, barrier_dir):
    """Marks this task running, waits until three run at once (one per 1-CPU node, so only
    when the tasks went to all three nodes), then tags the rows with its node."""
    open(os.path.join(barrier_dir, f"{os.getpid()}-{batch['id'][0]}"), "w").close()
    reached = wait_until(lambda: len(os.listdir(barrier_dir)) >= 3, timeout=60)
    out = tag_node(batch)
    out["reached"] = np.array([reached] * len(batch["id"]))
    return out


def test_map_tasks_run_on_every_node_at_once(three_nodes, tmp_path):
    rows = (
        ray.data.range(24, override_num_blocks=12)
        .map_batches(barrier_then_tag, fn_kwargs={"barrier_dir": str(tmp_path)})
        .take_all()
    )
    assert sorted(r["id"] for r in rows) == list(range(24))
    assert all(r["reached"] for r in rows), "three tasks never ran at once: they did not go to every node"
    assert len({r["node"] for r in rows}) == 3


def busy_tag_node(batch):
    """Real work per block (a few hundred small matrix products), so each 1-CPU node is a
    worker of equal speed and the tasks should be shared out by free CPUs."""
    m = np.random.default_rng(0).random((64, 64))
    for _ in range(300):
        m = np.tanh(m @ m.T / 64)
    return tag_node(batch)


def test_map_tasks_spread_over_the_nodes(three_nodes):
    ray.data.range(24, override_num_blocks=12).map_batches(tag_node).take_all()  # every node's worker warm
    rows = ray.data.range(24, override_num_blocks=12).map_batches(busy_tag_node).take_all()
    assert sorted(r["id"] for r in rows) == list(range(24))
    blocks_per_node = Counter(r["node"] for r in rows if r["id"] % 2 == 0)  # one row per block
    assert len(blocks_per_node) == 3, blocks_per_node
    assert max(blocks_per_node.values()) <= 6, f"one node ran most of the tasks: {blocks_per_node}"


def test_an_actor_pool_takes_a_cpu_per_actor_and_spreads(three_nodes):
    ds = ray.data.range(60, override_num_blocks=12).map_batches(TagNode, concurrency=3, batch_size=5)
    nodes = {r["node"] for r in ds.take_all()}
    assert len(nodes) == 3, f"the pool's actors ran on {len(nodes)} node(s)"


def test_a_split_for_training_reads_as_tasks_over_the_nodes(three_nodes, tmp_path):
    """streaming_split's coordinator (one process, fed to ranks busy training) does not decode a
    parquet read itself: the read runs as tasks, spread over the nodes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from oxray.util.state import list_tasks

    for i in range(12):
        pq.write_table(pa.table({"x": np.arange(i * 100, (i + 1) * 100)}), str(tmp_path / f"part-{i:02d}.parquet"))
    before = {t.task_id for t in list_tasks(limit=10_000)}
    (split,) = ray.data.read_parquet(str(tmp_path)).streaming_split(1)
    assert sorted(x for b in split.iter_batches() for x in b["x"]) == list(range(1200))
    reads = [t for t in list_tasks(limit=10_000) if t.task_id not in before and t.name.endswith("_map_task")]
    assert len(reads) >= 2, f"the read ran as {len(reads)} task(s)"
    assert len({t.node_id for t in reads}) >= 2, f"every read task ran on one node: {Counter(t.node_id for t in reads)}"
