"""Serve's HTTP proxies on a real multi-node cluster (`oxray start` processes on this host):
with `EveryNode` each node agent listens (sharing the port through SO_REUSEPORT, as Ray's
proxies do) and serves a replica on another node; with `HeadOnly` only the head's does."""

import os

import pytest

import oxray as ray
from cli_cluster import free_port, running_cluster
from oxray import serve
from oxray_testutil import http_get_local as fetch
from oxray_testutil import listening_pids, wait_until


def test_every_node_runs_a_proxy_and_head_only_runs_one(tmp_path, monkeypatch):
    with running_cluster(tmp_path / "oxray", monkeypatch) as cluster:
        cluster.start_head(num_cpus=1)
        cluster.add_node(num_cpus=1, resources={"node_b": 1})
        ray.init()
        cluster.wait_nodes(2)
        head_pid = int(cluster.node_with_pid_record(head=True)["pid"])
        node_pid = int(cluster.node_with_pid_record(head=False)["pid"])

        @serve.deployment(ray_actor_options={"num_cpus": 0, "resources": {"node_b": 0.1}})
        def where(request):
            return os.environ["OXRAY_NODE_ID"]

        port = free_port()
        serve.start(http_options={"port": port})
        serve.run(where.bind(), name="where", route_prefix="/where")
        wait_until(
            lambda: f"proxies listening on {port}: {listening_pids(port)}",
            lambda: listening_pids(port) == {head_pid, node_pid},
            timeout=30,
        )
        replica_node = cluster.node_with("node_b")["node_id"]
        # New connections go to either proxy; each reaches the replica on node_b.
        for _ in range(20):
            assert fetch(port, "/where") == (200, replica_node.encode())
        serve.shutdown()
        wait_until(lambda: f"still listening: {listening_pids(port)}", lambda: not listening_pids(port), timeout=30)

        serve.start(http_options={"port": port}, proxy_location="HeadOnly")
        serve.run(where.bind(), name="where", route_prefix="/where")
        wait_until(
            lambda: f"proxies listening on {port}: {listening_pids(port)}",
            lambda: listening_pids(port) == {head_pid},
            timeout=30,
        )
        assert fetch(port, "/where") == (200, replica_node.encode())
        serve.shutdown()


def test_max_replicas_per_node_spreads_the_replicas_and_waits_for_a_node(tmp_path, monkeypatch):
    import threading

    with running_cluster(tmp_path / "oxray", monkeypatch) as cluster:
        cluster.start_head(num_cpus=1)
        ray.init()

        @serve.deployment(num_replicas=2, max_replicas_per_node=1, ray_actor_options={"num_cpus": 0.1})
        def node(_):
            return os.environ["OXRAY_NODE_ID"]

        handles = []
        deploying = threading.Thread(
            target=lambda: handles.append(serve.run(node.bind(), name="spread", route_prefix=None))
        )
        deploying.start()

        def replica_states():
            app = serve.status().applications.get("spread")
            return app and app.deployments["node"].replica_states

        # One node: both replicas would fit its CPU, but only one may run there; the other waits.
        wait_until(
            lambda: f"one replica running and one waiting: {replica_states()}",
            lambda: replica_states() == {"RUNNING": 1, "STARTING": 1},
            timeout=60,
        )
        cluster.add_node(num_cpus=1)
        deploying.join(120)
        [handle] = handles
        nodes = wait_until(
            "calls answered by both replicas",
            lambda: len(seen := {handle.remote(None).result() for _ in range(20)}) == 2 and seen,
            timeout=30,
        )
        assert nodes == {n["NodeID"] for n in ray.nodes() if n["Alive"]}, "each on a node of its own"
        serve.shutdown()

    with pytest.raises(ValueError, match="max_replicas_per_node=0"):
        serve.deployment(max_replicas_per_node=0)(node.func_or_class)
    with pytest.raises(ValueError, match="at the same time is not allowed"):
        serve.deployment(max_replicas_per_node=1, placement_group_bundles=[{"CPU": 1}])(node.func_or_class)
