"""Data on a cluster of three 1-CPU nodes (separate agent processes on 127.0.0.1): map tasks go
round the nodes with room (Ray Data's SPREAD default), and a pool's actors each hold a CPU, so
a 3-actor pool lands on three nodes."""

import os
from collections import Counter

import numpy as np
import pytest

import oxray as ray
from cli_cluster import running_cluster
from oxray_testutil import WaitTimeout, wait_until

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
    reached = wait_until("three tasks running at once", lambda: len(os.listdir(barrier_dir)) >= 3, timeout=60)
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


def make_big_block(batch):
    """About 2 MiB per block: too big to travel inline, so it stays in the store of the node
    whose task made it."""
    n = len(batch["id"])
    return {"id": batch["id"], "payload": np.zeros((n, 1 << 16), dtype=np.float64)}


def test_a_map_task_runs_where_its_input_block_is(three_nodes):
    """Ray's locality: a task whose inputs reach `large_args_threshold` bytes is placed by
    `scheduling_strategy_large_args` (`DEFAULT`), on the node holding its input when it has room.
    Without locality it would run on the driver's node, where it fits."""
    ctx = ray.data.DataContext.get_current()
    ctx.large_args_threshold = 1 << 20
    # The block is made on node B by a task that takes no CPU there, so B's free CPU is never in
    # doubt (the head's figures lag a task's end by a heartbeat).
    made_on_b = ray.data.range(4, override_num_blocks=1).map_batches(
        make_big_block, num_cpus=0, resources={"node_b": 0.5}
    )
    made_on_b = made_on_b.materialize()
    node_b = next(n["NodeID"] for n in ray.nodes() if "node_b" in n["Resources"])
    ran_on = {r["node"] for r in made_on_b.map_batches(tag_node).select_columns(["node"]).take_all()}
    assert ran_on == {node_b}, "the map task did not run beside its input block"


def test_a_driver_read_runs_as_tasks_when_its_node_is_busy(three_nodes, tmp_path):
    """A read without a UDF decodes in the driver's process while the driver's node has CPUs to
    spare; once they are all taken (by training workers, say), it runs as tasks on the nodes with
    free CPUs."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from oxray.util.state import list_tasks

    for i in range(6):
        pq.write_table(pa.table({"x": np.arange(i * 100, (i + 1) * 100)}), str(tmp_path / f"part-{i}.parquet"))

    def new_map_tasks(before):
        return [t for t in list_tasks(limit=10_000) if t.task_id not in before and t.name.endswith("_map_task")]

    before = {t.task_id for t in list_tasks(limit=10_000)}
    assert sorted(x for b in ray.data.read_parquet(str(tmp_path)).iter_batches() for x in b["x"]) == list(range(600))
    assert new_map_tasks(before) == [], "the head had a free CPU: the driver decodes the read itself"

    @ray.remote(num_cpus=1, resources={"node_a": 1})
    class Trainer:
        def ready(self):
            return True

    trainer = Trainer.remote()
    ray.get(trainer.ready.remote())
    head = next(n["NodeID"] for n in ray.nodes() if "node_a" in n["Resources"])
    wait_until(
        lambda: f"the trainer to hold node_a ({ray.available_resources()})",
        lambda: "node_a" not in ray.available_resources(),
        timeout=60,
    )
    before = {t.task_id for t in list_tasks(limit=10_000)}
    assert sorted(x for b in ray.data.read_parquet(str(tmp_path)).iter_batches() for x in b["x"]) == list(range(600))
    reads = new_map_tasks(before)
    assert reads, "the read still decoded in the driver, on a node with no free CPU"
    assert all(t.node_id != head for t in reads), Counter(t.node_id for t in reads)
    ray.kill(trainer)


class HoldLastBlock:
    """Tags rows with the actor's pid; the call for the dataset's last block waits until the test
    has seen the pool shrink (a file appears), so the operator is still running meanwhile."""

    def __init__(self, release_file):
        self.release_file = release_file

    def __call__(self, batch):
        if batch["id"][-1] == 59:
            wait_until("the test to release the last block", lambda: os.path.exists(self.release_file), timeout=120)
        return {"id": batch["id"], "pid": np.array([os.getpid()] * len(batch["id"]))}


def test_an_idle_actor_pool_shrinks_to_its_minimum(three_nodes, tmp_path):
    import threading

    from oxray.util.state import list_actors

    ctx = ray.data.DataContext.get_current()
    ctx.actor_pool_scale_down_debounce_s = 0
    release = str(tmp_path / "release")

    def pool_actors(state):
        return [a for a in list_actors(limit=10_000) if a.class_name == "_MapActor" and a.state == state]

    seen = {}

    def watch():
        # Three actors start; with only the last call left, two of them are idle and stop.
        try:
            seen["three"] = wait_until("three pool actors", lambda: len(pool_actors("ALIVE")) == 3, timeout=60)
            seen["shrank"] = wait_until(
                "the pool to shrink to one actor",
                lambda: len(pool_actors("ALIVE")) == 1 and len(pool_actors("DEAD")) == 2,
                timeout=90,
            )
        except WaitTimeout as e:
            seen["timed out"] = str(e)
        finally:
            open(release, "w").close()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    ds = ray.data.range(60, override_num_blocks=30).map_batches(
        HoldLastBlock, fn_constructor_args=(release,), concurrency=(1, 3, 3)
    )
    rows = ds.take_all()
    watcher.join(timeout=120)
    open(release, "w").close()
    assert sorted(r["id"] for r in rows) == list(range(60))
    assert seen == {"three": True, "shrank": True}, seen
