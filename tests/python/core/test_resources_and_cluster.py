"""Resources and cluster state: totals/availability, fractional and custom
resources, infeasible requests, nodes(), init/shutdown lifecycle, GPUs."""

import os
import time

import pytest

import oxray as ray
from oxray_testutil import file_barrier, max_overlap, wait_until

TIMEOUT = 60


@ray.remote
def hold_until(gate, started):
    open(started, "w").close()
    return wait_until("the gate to open", lambda: os.path.exists(gate), timeout=60)


@ray.remote
def interval_with_barrier(barrier_dir, parties, hold):
    """Records (start, end); waits until `parties` tasks are running at once."""
    start = time.time()
    met = file_barrier(barrier_dir, parties, timeout=60)
    time.sleep(hold)
    return start, time.time(), met


@ray.remote
def noop():
    return 1


@ray.remote
class Idle:
    def ping(self):
        return "pong"


@ray.remote
def gpu_view():
    return os.environ.get("CUDA_VISIBLE_DEVICES"), list(ray.get_gpu_ids())


def test_cluster_resources(ray_cluster):
    total = ray.cluster_resources()
    assert total["CPU"] == 2.0
    assert total["custom_a"] == 2.0
    assert "GPU" not in total or total["GPU"] == 0
    assert total["memory"] > 0
    assert total["object_store_memory"] > 0
    avail = ray.available_resources()
    assert set(avail) <= set(total)
    assert avail.get("custom_a") == 2.0


def _available(key):
    return ray.available_resources().get(key, 0.0)


def _wait_available(key, amount):
    wait_until(
        lambda: f"{amount} {key} available ({ray.available_resources()})",
        lambda: _available(key) == amount,
        timeout=30,
    )


def test_available_resources_track_running_tasks(ray_cluster, tmp_path):
    _wait_available("CPU", 2.0)
    gate, started = str(tmp_path / "gate"), str(tmp_path / "started")
    ref = hold_until.options(num_cpus=1, resources={"custom_a": 0.5}).remote(gate, started)
    try:
        wait_until("the task to start", lambda: os.path.exists(started), timeout=60)
        _wait_available("CPU", 1.0)
        assert _available("custom_a") == 1.5
        assert ray.cluster_resources()["CPU"] == 2.0  # totals do not change
    finally:
        open(gate, "w").close()
    assert ray.get(ref, timeout=TIMEOUT) is True
    _wait_available("CPU", 2.0)
    _wait_available("custom_a", 2.0)


def test_fractional_cpus_run_concurrently(ray_cluster, tmp_path):
    refs = [interval_with_barrier.options(num_cpus=0.5).remote(str(tmp_path / "b"), 4, 0.2) for _ in range(4)]
    results = ray.get(refs, timeout=TIMEOUT)
    assert all(met for _, _, met in results), "4 half-CPU tasks did not run at once on 2 CPUs"
    assert max_overlap([(s, e) for s, e, _ in results]) >= 3


def test_custom_resource_limits_concurrency(ray_cluster, tmp_path):
    # num_cpus=0 so that only custom_a (2 in the cluster) limits concurrency.
    task = interval_with_barrier.options(num_cpus=0, resources={"custom_a": 1})
    refs = [task.remote(str(tmp_path / "b"), 2, 0.5) for _ in range(5)]
    results = ray.get(refs, timeout=TIMEOUT)
    assert all(met for _, _, met in results)
    assert max_overlap([(s, e) for s, e, _ in results]) == 2


def _assert_infeasible_error(exc, *names):
    assert not isinstance(exc, ray.exceptions.GetTimeoutError), "an unsatisfiable request must fail, not hang: %r" % exc
    assert isinstance(exc, ray.exceptions.RayError), repr(exc)
    text = str(exc)
    for name in names:
        assert name in text, f"{name!r} not in error message: {text}"


# oxray's contract (stricter than Ray, which leaves infeasible work pending and
# only logs an autoscaler warning): on a lone embedded cluster, which no node can
# join, a request that no node can ever satisfy fails promptly with an error
# naming the resource and what the cluster has, instead of hanging. (On a CLI
# cluster it waits for a node: test_multinode.py.)


def test_infeasible_task_fails_instead_of_hanging(ray_cluster):
    # The get's own timeout is never what ends it (`_assert_infeasible_error`): the task fails.
    with pytest.raises(Exception) as ei:
        ray.get(noop.options(num_cpus=64).remote(), timeout=TIMEOUT)
    # Names what was asked for and what the cluster has.
    _assert_infeasible_error(ei.value, "CPU", "64")
    assert "2" in str(ei.value)

    with pytest.raises(Exception) as ei:
        ray.get(noop.options(resources={"nonexistent": 1}).remote(), timeout=TIMEOUT)
    _assert_infeasible_error(ei.value, "nonexistent")
    if hasattr(ray.exceptions, "TaskUnschedulableError"):
        assert isinstance(ei.value, (ray.exceptions.TaskUnschedulableError, ray.exceptions.RayError))
    # The cluster is unaffected.
    assert ray.get(noop.remote(), timeout=TIMEOUT) == 1


def test_infeasible_actor_fails_instead_of_hanging(ray_cluster):
    actor = Idle.options(resources={"nonexistent": 1}).remote()
    with pytest.raises(Exception) as ei:
        ray.get(actor.ping.remote(), timeout=TIMEOUT)
    _assert_infeasible_error(ei.value, "nonexistent")

    actor = Idle.options(num_cpus=64).remote()
    with pytest.raises(Exception) as ei:
        ray.get(actor.ping.remote(), timeout=TIMEOUT)
    _assert_infeasible_error(ei.value, "CPU", "64")


def test_nodes(ray_cluster):
    nodes = ray.nodes()
    assert isinstance(nodes, list) and len(nodes) == 1
    node = nodes[0]
    for key in ("NodeID", "Alive", "NodeManagerAddress", "Resources"):
        assert key in node, key
    assert node["Alive"] is True
    assert isinstance(node["NodeID"], str) and node["NodeID"]
    int(node["NodeID"], 16)
    assert node["NodeID"] == ray.get_runtime_context().get_node_id()
    assert isinstance(node["NodeManagerAddress"], str) and node["NodeManagerAddress"]
    assert node["Resources"]["CPU"] == 2.0
    assert node["Resources"]["custom_a"] == 2.0


def test_init_shutdown_lifecycle(fresh_cluster):
    assert ray.is_initialized() is False
    fresh_cluster(num_cpus=1)
    assert ray.is_initialized() is True
    assert ray.cluster_resources()["CPU"] == 1.0
    # A second init is an error unless ignore_reinit_error=True.
    ray.init(ignore_reinit_error=True)
    assert ray.is_initialized() is True
    with pytest.raises(RuntimeError):
        ray.init()
    assert ray.get(noop.remote(), timeout=TIMEOUT) == 1
    ray.shutdown()
    assert ray.is_initialized() is False
    ray.shutdown()  # idempotent
    assert ray.is_initialized() is False
    # A new cluster can be started in the same process with new resources.
    fresh_cluster(num_cpus=2, resources={"after_restart": 3})
    assert ray.cluster_resources()["after_restart"] == 3.0
    assert ray.get(noop.remote(), timeout=TIMEOUT) == 1


def test_logical_gpu(fresh_cluster):
    fresh_cluster(num_cpus=2, num_gpus=1)
    assert ray.cluster_resources()["GPU"] == 1.0
    visible, ids = ray.get(gpu_view.options(num_gpus=1).remote(), timeout=TIMEOUT)
    assert visible == "0"
    assert ids == [0]
    # A task that asked for no GPU sees none.
    visible, ids = ray.get(gpu_view.remote(), timeout=TIMEOUT)
    assert ids == []
    assert visible in (None, "")


JOIN_SCRIPT = r"""
import sys
import numpy as np
import oxray as ray

ray.init(address=sys.argv[1])

@ray.remote
def add(x, y):
    return x + y

@ray.remote
class Acc:
    def __init__(self):
        self.total = 0
    def add(self, k):
        self.total += k
        return self.total

big = ray.put(np.ones(1 << 20))
assert ray.get(add.remote(big, 1)).sum() == 2 * (1 << 20)
acc = Acc.remote()
assert ray.get([acc.add.remote(i) for i in range(5)])[-1] == 10
print("JOINED", ray.get(add.remote(20, 22)), ray.cluster_resources()["CPU"])
ray.shutdown()
"""


def test_second_driver_joins_by_address_with_the_token(ray_cluster):
    """A driver in another process joins over gRPC with OXRAY_TOKEN, and is
    refused with a clear error without the right token."""
    import subprocess
    import sys

    from oxray._private.state import STATE

    address = STATE.cluster.agent_address
    env = {**os.environ, "OXRAY_TOKEN": STATE.cluster.token}
    env.pop("OXRAY_ADDRESS", None)
    ok = subprocess.run(
        [sys.executable, "-c", JOIN_SCRIPT, address], env=env, capture_output=True, text=True, timeout=120
    )
    assert ok.returncode == 0, ok.stderr
    assert "JOINED 42 2.0" in ok.stdout

    env["OXRAY_TOKEN"] = "0" * 64
    bad = subprocess.run(
        [sys.executable, "-c", JOIN_SCRIPT, address], env=env, capture_output=True, text=True, timeout=120
    )
    assert bad.returncode != 0
    assert "AuthenticationError" in bad.stderr and "OXRAY_TOKEN" in bad.stderr, bad.stderr[-2000:]
    # The cluster is unaffected.
    assert ray.cluster_resources()["CPU"] == 2.0


def test_gpus_are_named_by_the_nodes_own_cuda_visible_devices(fresh_cluster, monkeypatch):
    # As in Ray: a node started with CUDA_VISIBLE_DEVICES set counts those GPUs, and a task given
    # GPU i sees the i-th entry (a physical index or a UUID), not the index itself.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "uuid1,uuid2")
    fresh_cluster(num_gpus=2)
    visible, ids = ray.get(gpu_view.options(num_gpus=1).remote())
    assert visible in ("uuid1", "uuid2") and ids == [visible]
    assert ray.get(gpu_view.options(num_gpus=2).remote()) == ("uuid1,uuid2", ["uuid1", "uuid2"])
