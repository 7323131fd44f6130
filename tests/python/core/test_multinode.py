"""A real multi-node cluster on this host: a head and node agents started with
the `oxray` CLI as separate processes (own ports, own custom resources) that
talk only over the network. Each test stops every process it started, even
when it fails."""

import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import oxray as ray
from cli_cluster import MiB, free_port, running_cluster
from oxray.util import placement_group, placement_group_table, remove_placement_group
from oxray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
from oxray_testutil import wait_until


@pytest.fixture
def local_cluster(tmp_path, monkeypatch):
    with running_cluster(tmp_path / "oxray", monkeypatch) as cluster:
        yield cluster


@pytest.fixture
def three_nodes(local_cluster):
    local_cluster.start_head(num_cpus=1, resources={"node_a": 1})
    local_cluster.add_node(num_cpus=1, resources={"node_b": 1})
    local_cluster.add_node(num_cpus=1, resources={"node_c": 1})
    ray.init()
    local_cluster.wait_nodes(3)
    return local_cluster


def node_id():
    return os.environ["OXRAY_NODE_ID"]


@ray.remote
def where():
    return os.environ["OXRAY_NODE_ID"]


@ray.remote
def array_sum(x):
    return float(np.asarray(x).sum()), os.environ["OXRAY_NODE_ID"]


@ray.remote
def make_array(n, value):
    return np.full(n, value, dtype=np.float64)


@ray.remote
class Where:
    def __init__(self):
        self.calls = 0

    def call(self):
        self.calls += 1
        return self.calls, os.environ["OXRAY_NODE_ID"]


@ray.remote(num_cpus=1)
def wait_for_all_started(barrier_dir, count):
    """Marks this task started, then waits (generously) until `count` have:
    (node id, whether they all started)."""
    open(os.path.join(barrier_dir, f"{os.environ['OXRAY_NODE_ID']}-{os.getpid()}"), "w").close()
    started = wait_until(f"{count} tasks to start", lambda: len(os.listdir(barrier_dir)) >= count, timeout=60)
    return os.environ["OXRAY_NODE_ID"], started


def test_custom_resources_pin_tasks_and_actors_to_nodes(three_nodes, tmp_path):
    b, c = three_nodes.node_with("node_b"), three_nodes.node_with("node_c")
    assert ray.get(where.options(resources={"node_b": 0.1}).remote()) == b["node_id"]
    assert ray.get(where.options(resources={"node_c": 0.1}).remote()) == c["node_id"]
    actor = Where.options(resources={"node_c": 0.5}).remote()
    assert ray.get([actor.call.remote() for _ in range(20)]) == [(i, c["node_id"]) for i in range(1, 21)]
    # With one CPU per node, three tasks that each wait until all three have
    # started can only finish if they run at once, one per node.
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    ran_on = ray.get([wait_for_all_started.remote(str(barrier), 3) for _ in range(3)], timeout=120)
    assert all(all_started for _, all_started in ran_on), ran_on
    assert len({node for node, _ in ran_on}) == 3, ran_on
    assert ray.cluster_resources()["CPU"] == 3


def test_objects_move_between_nodes_both_ways(three_nodes):
    b = three_nodes.node_with("node_b")
    big = np.arange(40 * MiB // 8, dtype=np.float64)  # 40 MiB put on the head node
    ref = ray.put(big)
    total, ran_on = ray.get(array_sum.options(resources={"node_b": 0.1}).remote(ref))
    assert (total, ran_on) == (float(big.sum()), b["node_id"])
    # 300 MiB made on node_c is read by the driver on the head node.
    out = ray.get(make_array.options(resources={"node_c": 0.1}).remote(300 * MiB // 8, 3.0))
    assert out.shape == (300 * MiB // 8,) and float(out[0]) == 3.0 and float(out[-1]) == 3.0
    # A ref made on node_b and returned inside a list stays readable on the head node.
    nested = ray.remote(lambda: [ray.put(np.ones(1 * MiB)), ray.put("small")])
    inner = ray.get(nested.options(resources={"node_b": 0.1}).remote())
    assert float(ray.get(inner[0]).sum()) == 1 * MiB and ray.get(inner[1]) == "small"
    # An object made on node_b is passed straight to a task on node_c.
    made_on_b = make_array.options(resources={"node_b": 0.1}).remote(5 * MiB, 2.0)
    assert ray.get(array_sum.options(resources={"node_c": 0.1}).remote(made_on_b))[0] == 10.0 * MiB


def test_placement_group_strategies(three_nodes):
    spread = placement_group([{"CPU": 1}] * 3, strategy="STRICT_SPREAD")
    assert ray.get(spread.ready(), timeout=15) == spread
    nodes = placement_group_table(spread)["bundles_to_node_id"]
    assert len(set(nodes.values())) == 3
    for index in range(3):
        strategy = PlacementGroupSchedulingStrategy(spread, placement_group_bundle_index=index)
        assert ray.get(where.options(scheduling_strategy=strategy).remote()) == nodes[index]
    # Every CPU is now reserved: a 4th STRICT_SPREAD bundle can never fit, and a
    # second group waits until the first is removed.
    waiting = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_PACK")
    assert not waiting.wait(timeout_seconds=1)
    assert placement_group_table(waiting)["state"] == "PENDING"
    remove_placement_group(spread)
    assert waiting.wait(timeout_seconds=15) is False  # no single node has 2 CPUs
    remove_placement_group(waiting)
    packed = placement_group([{"CPU": 0.5}, {"CPU": 0.5}], strategy="STRICT_PACK")
    assert packed.wait(timeout_seconds=15)
    assert len(set(placement_group_table(packed)["bundles_to_node_id"].values())) == 1
    actor = Where.options(scheduling_strategy=PlacementGroupSchedulingStrategy(packed, 1), num_cpus=0.5).remote()
    assert ray.get(actor.call.remote())[1] == placement_group_table(packed)["bundles_to_node_id"][1]
    remove_placement_group(packed)
    wait_until(
        lambda: f"the 3 CPUs free again ({ray.available_resources()})",
        lambda: ray.available_resources().get("CPU") == 3,
        timeout=30,
    )
    with pytest.raises(ValueError, match="SPREAD"):
        placement_group([{"CPU": 1}], strategy="SPREADING")
    with pytest.raises(ValueError, match="empty"):
        placement_group([{"CPU": 0}])


@ray.remote(max_retries=2)
def slow_task(marker_dir):
    open(os.path.join(marker_dir, f"{os.environ['OXRAY_NODE_ID']}-{os.getpid()}"), "w").close()
    time.sleep(4)
    return os.environ["OXRAY_NODE_ID"]


def test_node_killed_mid_task_is_retried_and_reported_dead(local_cluster, tmp_path):
    local_cluster.start_head(num_cpus=1)
    local_cluster.add_node(num_cpus=1, resources={"node_b": 1})
    ray.init()
    local_cluster.wait_nodes(2)
    b = local_cluster.node_with("node_b")
    kept_on_b = make_array.options(resources={"node_b": 0.1}).remote(2 * MiB, 1.0)
    ray.wait([kept_on_b], timeout=30)
    markers = tmp_path / "markers"
    markers.mkdir()
    refs = [slow_task.remote(str(markers)) for _ in range(2)]
    wait_until(
        "a task to start on node b",
        lambda: any(p.name.startswith(b["node_id"]) for p in markers.iterdir()),
        timeout=60,
    )
    os.kill(b["pid"], signal.SIGKILL)
    head_id = local_cluster.node_with("node:__internal_head__")["node_id"]
    assert ray.get(refs, timeout=60) == [head_id, head_id]
    # The head marks the node dead, and `oxray status` says so.
    wait_until(
        "the head to mark node b dead",
        lambda: not next(n for n in ray.nodes() if n["NodeID"] == b["node_id"])["Alive"],
        timeout=60,
    )
    status = local_cluster.status()
    assert f"node_{b['node_id']}" in status.split("Dead:")[1].split("Resources")[0], status
    with pytest.raises(ray.exceptions.ObjectLostError, match=b["node_id"][:8]):
        ray.get(kept_on_b, timeout=30)


@ray.remote(resources={"node_b": 0.5}, lifetime="detached", name="keeper", namespace="kept")
class Keeper:
    def __init__(self):
        self.value = 0

    def add(self, k):
        self.value += k
        return self.value


def test_head_restart_keeps_actors_and_nodes_rejoin(local_cluster):
    local_cluster.start_head(num_cpus=1)
    local_cluster.add_node(num_cpus=1, resources={"node_b": 1})
    ray.init()
    local_cluster.wait_nodes(2)
    keeper = Keeper.remote()
    assert ray.get(keeper.add.remote(5)) == 5
    head = local_cluster.node_with("node:__internal_head__")
    os.kill(int(head["pid"]), signal.SIGKILL)
    # The connected driver gets an error, not a hang (today the native client's RPC
    # error; which one is not the point, as long as it is not the get's timeout).
    with pytest.raises(Exception) as raised:  # noqa: B017 - any error will do but the timeout
        ray.get(keeper.add.remote(1), timeout=60)
    assert not isinstance(raised.value, ray.exceptions.GetTimeoutError), raised.value
    ray.shutdown()
    wait_until("the killed head to go", lambda: not os.path.exists(f"/proc/{head['pid']}"), timeout=60)
    local_cluster.start_head(num_cpus=1)
    ray.init()
    local_cluster.wait_nodes(2)  # node_b registered again on its own
    again = ray.get_actor("keeper", namespace="kept")
    assert ray.get(again.add.remote(1)) == 6


def test_join_with_wrong_token_is_refused(local_cluster):
    local_cluster.start_head(num_cpus=1)
    before = len(local_cluster.records())
    refused = local_cluster.cli("start", "--address", local_cluster.address, "--token", "0" * 64, check=False)
    assert refused.returncode == 1
    assert "refused" in refused.stderr and "token" in refused.stderr, refused.stderr
    no_token = local_cluster.cli("start", "--address", "127.0.0.1:1", check=False)
    assert no_token.returncode == 1 and "token" in no_token.stderr
    assert len(local_cluster.records()) == before
    ray.init()
    assert sum(1 for n in ray.nodes() if n["Alive"]) == 1


def test_cli_reports_port_in_use_and_unreachable_head(local_cluster):
    local_cluster.start_head(num_cpus=1)
    again = local_cluster.cli(
        "start", "--head", "--dashboard-port", "0", "--port", str(local_cluster.port), check=False
    )
    assert again.returncode == 1 and f"port {local_cluster.port}" in again.stderr and "--port" in again.stderr
    dead_port = free_port()
    unreachable = local_cluster.cli(
        "start", "--address", f"127.0.0.1:{dead_port}", "--token", local_cluster.token, check=False
    )
    assert unreachable.returncode == 1
    assert f"127.0.0.1:{dead_port}" in unreachable.stderr and "oxray start --head" in unreachable.stderr
    bad = local_cluster.cli("start", "--head", "--dashboard-port", "0", "--resources", "{not json", check=False)
    assert bad.returncode == 1 and "--resources" in bad.stderr
    with pytest.raises(ValueError, match="num_cpus"):
        ray.init(num_cpus=3)


@pytest.mark.parametrize("stop_signal", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_actors_on_a_killed_node_restart_elsewhere_or_die_naming_it(local_cluster, stop_signal):
    # A node stopped gracefully (`oxray stop`, SIGTERM) loses its actors as a killed one does: those
    # with restarts left start again elsewhere, as in Ray.
    # The head offers no CPU, so both actors land on node b or c.
    local_cluster.start_head(num_cpus=0)
    local_cluster.add_node(num_cpus=1, resources={"node_b": 1})
    local_cluster.add_node(num_cpus=1, resources={"node_c": 1})
    ray.init()
    local_cluster.wait_nodes(3)
    restartable = Where.options(max_restarts=1, num_cpus=0.5).remote()
    mortal = Where.options(max_restarts=0, num_cpus=0.5).remote()
    first_node = ray.get(restartable.call.remote())[1]
    mortal_node = ray.get(mortal.call.remote())[1]
    records = {r["node_id"]: r for r in local_cluster.records()}
    os.kill(int(records[first_node]["pid"]), stop_signal)

    # A fresh instance on the surviving node answers (its counter starts again).
    def restarted():
        try:
            return ray.get(restartable.call.remote(), timeout=10)
        except ray.exceptions.RayError:
            return None

    calls, node = wait_until("the restartable actor to answer again", restarted, timeout=60, interval=0.5)
    assert node != first_node and calls == 1
    if mortal_node == first_node:
        with pytest.raises(ray.exceptions.ActorDiedError, match=first_node[:8]):
            ray.get(mortal.call.remote(), timeout=30)


def train_across_nodes_loop(config):
    import tempfile

    from oxray import train

    ctx = train.get_context()
    ckpt = train.get_checkpoint()
    start = 0
    if ckpt:
        with ckpt.as_directory() as d:
            start = int(open(os.path.join(d, "epoch")).read()) + 1
    log = os.path.join(config["log_dir"], f"start-{ctx.get_world_rank()}-{os.getpid()}")
    with open(log, "w") as f:
        json.dump(
            {
                "start": start,
                "node_rank": ctx.get_node_rank(),
                "local_rank": ctx.get_local_rank(),
                "node": ray.get_runtime_context().get_node_id(),
                "master": os.environ["MASTER_ADDR"],
            },
            f,
        )
    print(f"rank {ctx.get_world_rank()} starts at epoch {start} on node rank {ctx.get_node_rank()}", flush=True)
    for epoch in range(start, config["epochs"]):
        open(os.path.join(config["log_dir"], f"epoch-{epoch}-rank-{ctx.get_world_rank()}"), "w").close()
        time.sleep(0.5)
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "epoch"), "w") as f:
                f.write(str(epoch))
            train.report({"epoch": epoch}, checkpoint=train.Checkpoint.from_directory(d))


def test_training_survives_a_worker_node_dying(local_cluster, tmp_path, capfd):
    import threading

    from oxray.train import FailureConfig, RunConfig, ScalingConfig
    from oxray.train.torch import TorchTrainer

    local_cluster.start_head(num_cpus=2)
    local_cluster.add_node(num_cpus=1, resources={"node_b": 1})
    ray.init()
    local_cluster.wait_nodes(2)
    node_b = local_cluster.node_with("node_b")
    logs = tmp_path / "logs"
    logs.mkdir()

    def kill_node_b_mid_run():
        wait_until("rank 1 to reach epoch 2", lambda: (logs / "epoch-2-rank-1").exists(), timeout=120)
        os.kill(int(node_b["pid"]), signal.SIGKILL)

    killer = threading.Thread(target=kill_node_b_mid_run, daemon=True)
    killer.start()
    result = TorchTrainer(
        train_across_nodes_loop,
        train_loop_config={"epochs": 5, "log_dir": str(logs)},
        scaling_config=ScalingConfig(num_workers=2, placement_strategy="SPREAD"),
        run_config=RunConfig(
            storage_path=str(tmp_path / "results"), name="nodes", failure_config=FailureConfig(max_failures=1)
        ),
    ).fit()
    killer.join(timeout=5)
    runs = [json.load(open(logs / f)) for f in sorted(os.listdir(logs)) if f.startswith("start-")]
    first = [r for r in runs if r["start"] == 0]
    again = [r for r in runs if r["start"] > 0]
    # First attempt: one worker per node, rank 1 on node b with node rank 1; both use rank 0's node address.
    assert sorted(r["node_rank"] for r in first) == [0, 1] and {r["node"] for r in first} >= {node_b["node_id"]}
    assert {r["master"] for r in runs} == {"127.0.0.1"} and {r["local_rank"] for r in first} == {0}
    # After node b died, the group restarted on the head from the latest checkpoint (epoch >= 1).
    assert len(again) == 2 and len({r["start"] for r in again}) == 1 and again[0]["start"] >= 2
    assert {r["node"] for r in again} != {node_b["node_id"]} and sorted(r["local_rank"] for r in again) == [0, 1]
    assert result.metrics == {"epoch": 4}
    # Both workers' output reached this driver, the one on node b included, prefixed with rank, pid and ip.
    out = capfd.readouterr().out
    remote = [r for r in first if r["node"] == node_b["node_id"]]
    assert re.search(r"\(RayTrainWorker rank=1 pid=\d+, ip=127.0.0.1\) rank 1 starts at epoch 0 on node rank 1", out), (
        out
    )
    assert remote and re.search(r"\(RayTrainWorker rank=0 pid=\d+, ip=127.0.0.1\) rank 0 starts at epoch 0", out), out


@ray.remote(num_cpus=0)
class Gate:
    """Holds callers until opened (never, here)."""

    async def wait(self):
        import asyncio

        await asyncio.Event().wait()


@ray.remote(num_cpus=1, resources={"node_b": 1})
class Waiter:
    def wait_on(self, gate):
        # Blocked in get: the actor lends its CPU, so node b reports it free.
        return ray.get(gate.wait.remote())


@ray.remote(num_cpus=2)
class Hog:
    def ping(self):
        return True


def test_a_placement_group_is_never_ready_while_one_of_its_nodes_is_unreachable(local_cluster):
    # Node b freezes (SIGSTOP: connections open, nothing answers) with a blocked actor's CPU showing
    # free, and the head counts it alive for a few seconds more: a pending SPREAD group is planned onto
    # it and the head. The bundle on the head must run nothing until every node has reserved its share.
    # (Before, ready()'s probe ran there and reported the group ready while the head still waited on
    # node b, and giving the group up then SIGKILLed what the driver had started in it.)
    local_cluster.start_head(num_cpus=2)
    local_cluster.add_node(num_cpus=1, resources={"node_b": 1})
    ray.init()
    local_cluster.wait_nodes(2)
    node_b = local_cluster.node_with("node_b")
    head_node = local_cluster.node_with_pid_record(head=True)["node_id"]
    gate = Gate.remote()
    waiter = Waiter.remote()
    blocked = waiter.wait_on.remote(gate)
    hog = Hog.remote()
    assert ray.get(hog.ping.remote(), timeout=60)
    # The head's CPUs are taken and node b's one shows free: the group waits.
    wait_until(
        lambda: f"node b's CPU to be the only one free ({ray.available_resources()})",
        lambda: ray.available_resources().get("CPU") == 1.0,
        timeout=60,
    )
    pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="SPREAD")
    ready = pg.ready()
    assert placement_group_table(pg)["state"] == "PENDING"
    os.kill(int(node_b["pid"]), signal.SIGSTOP)
    try:
        ray.kill(hog)
        assert ray.wait([ready], timeout=60) == ([ready], [])
        assert placement_group_table(pg)["state"] == "CREATED", placement_group_table(pg)
        actors = [
            Where.options(
                num_cpus=1, scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i)
            ).remote()
            for i in range(2)
        ]
        assert [ray.get(a.call.remote(), timeout=60) for a in actors] == [(1, head_node)] * 2
        assert [ray.get(a.call.remote(), timeout=60) for a in actors] == [(2, head_node)] * 2
    finally:
        os.kill(int(node_b["pid"]), signal.SIGKILL)
    with pytest.raises(ray.exceptions.RayError, match=node_b["node_id"][:8]):
        ray.get(blocked, timeout=60)


def node_logs(cluster):
    """The output of every node process `oxray start` ran under this cluster's root."""
    text = ""
    for path in glob.glob(os.path.join(cluster.root, "node-start-*.log")):
        with open(path, errors="replace") as f:
            text += f.read()
    return text


def test_infeasible_request_on_a_cli_cluster_waits_for_a_node_that_fits(local_cluster):
    # A CLI cluster can grow: a request no node can meet stays PENDING (as in
    # Ray), with a periodic warning, and runs once a node that fits joins.
    local_cluster.env["OXRAY_INFEASIBLE_WARNING_INTERVAL_S"] = "0.2"
    local_cluster.start_head(num_cpus=1)
    ray.init()
    task = where.options(resources={"gpu_like": 1}).remote()
    actor = Where.options(resources={"gpu_like": 0.5}).remote()
    call = actor.call.remote()
    wait_until(
        lambda: f"the 'waiting for a node' warning in the node logs:\n{node_logs(local_cluster)}",
        lambda: "waiting for a node" in node_logs(local_cluster),
        timeout=60,
    )
    warning = next(line for line in node_logs(local_cluster).splitlines() if "waiting for a node" in line)
    assert "gpu_like" in warning and "CPU" in warning, warning
    assert ray.wait([task, call], num_returns=2, timeout=0) == ([], [task, call])
    local_cluster.add_node(num_cpus=1, resources={"gpu_like": 2})  # room for the task and the actor
    fits = local_cluster.node_with("gpu_like")["node_id"]
    assert ray.get(task, timeout=60) == fits
    assert ray.get(call, timeout=60) == (1, fits)


@ray.remote
def ones_after(n, marker):
    """`n` ones, once `marker` exists (empty: at once)."""
    if marker:
        wait_until(f"{marker} to appear", lambda: os.path.exists(marker), timeout=60)
    return np.ones(n)


@ray.remote
def launch_on(resource, n, marker, wait_inner):
    """Launches `ones_after` on the node offering `resource` and returns its ref in a list."""
    ref = ones_after.options(resources={resource: 0.1}).remote(n, marker)
    if wait_inner:
        ray.wait([ref], timeout=60)
    return [ref]


def test_return_made_by_a_nested_task_on_another_node_is_readable(local_cluster, tmp_path):
    local_cluster.start_head(num_cpus=1, resources={"node_a": 1})
    local_cluster.add_node(num_cpus=1, resources={"node_b": 1})
    ray.init()
    local_cluster.wait_nodes(2)
    for index, (n, wait_inner) in enumerate([(10, False), (MiB, False), (10, True), (MiB, True)]):
        # The driver's node owns the outer task, which runs on node b and launches
        # the inner one back on the head node; the inner one finishes only after
        # the outer one has returned its ref (or before, with wait_inner).
        marker = "" if wait_inner else str(tmp_path / f"release-{index}")
        outer = launch_on.options(resources={"node_b": 0.1}).remote("node_a", n, marker, wait_inner)
        [inner] = ray.get(outer, timeout=60)
        if marker:
            open(marker, "w").close()
        assert float(ray.get(inner, timeout=60).sum()) == n, (n, wait_inner)


ON_HEAD_DRIVER = """
import sys
import cloudpickle
import oxray as ray

ray.init()


@ray.remote
class Counter:
    def __init__(self):
        self.value = 0

    def add(self, k):
        self.value += k
        return self.value


counter = Counter.options(name="on_head", namespace="kept", lifetime="detached", max_restarts=1).remote()
assert ray.get(counter.add.remote(1)) == 1
with open(sys.argv[1], "wb") as f:
    f.write(cloudpickle.dumps(counter))
"""


def test_head_restart_fails_a_detached_actor_that_lived_on_the_head_node(local_cluster, tmp_path):
    local_cluster.start_head(num_cpus=1)
    handle_file = tmp_path / "handle.pkl"
    subprocess.run(
        [sys.executable, "-c", ON_HEAD_DRIVER, str(handle_file)], env=local_cluster.env, check=True, timeout=120
    )
    head = local_cluster.node_with_pid_record(head=True)
    os.kill(int(head["pid"]), signal.SIGKILL)
    wait_until("the killed head to go", lambda: not os.path.exists(f"/proc/{head['pid']}"), timeout=60)
    local_cluster.start_head(num_cpus=1)  # same state dir: the head's tables come back
    ray.init()
    # The actor's node went down with the old head: the actor is dead, so its
    # name is free (as in Ray), and a call through an old handle fails at once.
    with pytest.raises(ValueError, match="on_head"):
        ray.get_actor("on_head", namespace="kept")
    import cloudpickle

    handle = cloudpickle.loads(handle_file.read_bytes())
    with pytest.raises(ray.exceptions.ActorDiedError, match=head["node_id"][:8]):
        ray.get(handle.add.remote(1), timeout=30)


def store_used_gib(status):
    """The used GiB of object_store_memory in the Total Usage part of `oxray status`."""
    total_usage = status.split("Total Usage:")[1].split("Per node:")[0]
    match = re.search(r"([\d.]+)GiB/[\d.]+GiB object_store_memory", total_usage)
    assert match, status
    return float(match.group(1))


def test_status_shows_the_object_store_in_use(local_cluster):
    local_cluster.start_head(num_cpus=1)
    ray.init()
    held = [ray.put(np.full(40 * MiB // 8, float(i))) for i in range(4)]  # 160 MiB
    wait_until(
        lambda: f"oxray status to show 160 MiB in the store:\n{local_cluster.status()}",
        lambda: store_used_gib(local_cluster.status()) >= 0.15,
        timeout=60,
    )
    del held
    wait_until(
        lambda: f"oxray status to show the store empty:\n{local_cluster.status()}",
        lambda: store_used_gib(local_cluster.status()) < 0.01,
        timeout=60,
    )


def test_node_affinity_pins_work_to_a_node(three_nodes):
    from oxray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    b = three_nodes.node_with("node_b")["node_id"]
    on_b = NodeAffinitySchedulingStrategy(node_id=b, soft=False)
    assert ray.get([where.options(scheduling_strategy=on_b).remote() for _ in range(3)]) == [b] * 3
    actor = Where.options(scheduling_strategy=on_b).remote()
    assert ray.get(actor.call.remote())[1] == b
    # A node that is not in the cluster: hard affinity fails with the node named, soft runs anywhere.
    gone = "ab" * (len(b) // 2)
    with pytest.raises(ray.exceptions.TaskUnschedulableError, match=f"{gone}.*not a live node"):
        ray.get(where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(gone, soft=False)).remote())
    soft = NodeAffinitySchedulingStrategy(gone, soft=True)
    assert ray.get(where.options(scheduling_strategy=soft).remote()) in {n["NodeID"] for n in ray.nodes()}
    with pytest.raises(ValueError, match="node_id='not-hex'"):
        NodeAffinitySchedulingStrategy("not-hex", soft=False)


def test_spread_places_tasks_over_every_node(three_nodes):
    # Small tasks that would all fit on the first node: SPREAD still uses all three.
    nodes = ray.get([where.options(num_cpus=0.1, scheduling_strategy="SPREAD").remote() for _ in range(6)])
    assert set(nodes) == {n["NodeID"] for n in ray.nodes() if n["Alive"]}


@ray.remote
class Pinned:
    def pid_and_node(self):
        return os.getpid(), os.environ["OXRAY_NODE_ID"]


@ray.remote
def create_pinned_elsewhere():
    # Made by a task on node b, its handle comes back to the driver on node a.
    return Pinned.options(resources={"node_c": 0.1}).remote()


def test_an_actor_handle_that_crossed_nodes_keeps_its_actor_until_dropped(three_nodes):
    handle = ray.get(create_pinned_elsewhere.options(resources={"node_b": 0.1}).remote())
    pid, node = ray.get(handle.pid_and_node.remote())
    assert node != ray.get_runtime_context().get_node_id()
    # The task's return (and the creator's handle in it) are gone: the driver's copy keeps it.
    for _ in range(3):
        assert ray.get(handle.pid_and_node.remote()) == (pid, node)
    actor_hex = handle._actor_id.hex()
    del handle
    from oxray.util.state import get_actor

    wait_until("the actor to be DEAD", lambda: get_actor(id=actor_hex).state == "DEAD", timeout=60)


@ray.remote(num_cpus=1)
def sleeper(marker):
    open(marker, "w").close()
    time.sleep(120)
    return "finished"


@ray.remote(num_cpus=0, resources={"node_b": 0.1})
def submit_sleeper(marker):
    # The sleeper's ref leaves this task inside a list: the driver borrows it, and the task that
    # submitted it (on node b) owns it.
    return [sleeper.options(resources={"node_b": 0.1}).remote(marker)]


def test_cancel_of_a_ref_borrowed_from_a_task_on_another_node_cancels_it(local_cluster, tmp_path):
    # The head offers no CPU and no node_b: both tasks run on node b, and the driver's own agent
    # (the head's) never saw the sleeper.
    local_cluster.start_head(num_cpus=0)
    local_cluster.add_node(num_cpus=1, resources={"node_b": 1})
    ray.init()
    local_cluster.wait_nodes(2)
    marker = str(tmp_path / "sleeping")
    [ref] = ray.get(submit_sleeper.remote(marker))
    wait_until("the sleeper to start", lambda: os.path.exists(marker), timeout=60)
    ray.cancel(ref)
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(ref, timeout=60)
