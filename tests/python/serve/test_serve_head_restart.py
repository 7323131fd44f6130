"""Serve across a head restart (`oxray start` processes on this host). The controller keeps its
checkpoint in the head's redb; a head that starts again with one runs a `recover` job, whose
controller adopts the replicas still running on other nodes and starts the rest. Meanwhile the
proxies of the other nodes keep serving."""

import json
import os
import signal
import urllib.request

import psutil
import pytest

import oxray as ray
from cli_cluster import free_port, running_cluster
from oxray import serve
from oxray_testutil import http_get_local as fetch
from oxray_testutil import http_get_local_or_none, listening_pids, wait_until

pytestmark = pytest.mark.timeout(600)


def kill_head(cluster):
    [head] = [r for r in cluster.records() if r["head"] and psutil.pid_exists(int(r["pid"]))]
    ray.shutdown()
    os.kill(int(head["pid"]), signal.SIGKILL)
    wait_until("the killed head to go", lambda: not psutil.pid_exists(int(head["pid"])), timeout=60)


def app_status(name):
    app = serve.status().applications.get(name)
    return app.status if app else None


def serve_recover_jobs(cluster):
    request = urllib.request.Request(
        f"{cluster.dashboard_url}/api/jobs/", headers={"Authorization": f"Bearer {cluster.token}"}
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        jobs = json.load(reply)
    return [j for j in jobs if (j.get("metadata") or {}).get("oxray_internal") == "serve recover"]


def counted(port, path):
    status, body = fetch(port, path)
    assert status == 200, (status, body)
    reply = json.loads(body)
    return reply["pid"], reply["count"]


def test_a_head_restart_keeps_the_replicas_on_other_nodes_serving_and_adopts_them(tmp_path, monkeypatch):
    with running_cluster(tmp_path / "oxray", monkeypatch) as cluster:
        cluster.start_head(num_cpus=1)
        cluster.add_node(num_cpus=1, resources={"node_b": 1})
        ray.init()
        cluster.wait_nodes(2)
        node_pid = int(cluster.node_with_pid_record(head=False)["pid"])

        @serve.deployment(num_replicas=2, ray_actor_options={"num_cpus": 0, "resources": {"node_b": 0.1}})
        class Counter:
            def __init__(self):
                self.count = 0

            def __call__(self, request):
                self.count += 1
                return {"pid": os.getpid(), "count": self.count}

        port = free_port()
        serve.start(http_options={"port": port})
        serve.run(Counter.bind(), name="counter", route_prefix="/count")
        replicas = set()
        wait_until(
            lambda: f"both replicas to answer (seen {replicas})",
            lambda: replicas.add(counted(port, "/count")[0]) or len(replicas) == 2,
            timeout=60,
        )
        kill_head(cluster)

        # The head is down: node b's proxy (the head's is gone with it) serves from its replicas.
        pid, _ = counted(port, "/count")
        assert pid in replicas

        cluster.start_head(num_cpus=1)
        ray.init()
        cluster.wait_nodes(2)
        wait_until(
            lambda: f"the application to run again: {serve.status()}",
            lambda: app_status("counter") == "RUNNING",
            timeout=120,
        )
        [new_head_pid] = [int(r["pid"]) for r in cluster.records() if r["head"] and psutil.pid_exists(int(r["pid"]))]
        wait_until(
            lambda: f"both proxies on {port}: {listening_pids(port)}",
            lambda: listening_pids(port) == {new_head_pid, node_pid},
            timeout=60,
        )
        # The same replica processes serve, with their state: adopted, not started again.
        counts = {}
        for _ in range(20):
            pid, count = counted(port, "/count")
            assert pid in replicas, f"a new replica {pid} answered; the adopted ones are {replicas}"
            counts.setdefault(pid, []).append(count)
        assert all(c == sorted(c) for c in counts.values()), counts
        details = serve.status().applications["counter"].deployments["Counter"]
        assert details.replica_states == {"RUNNING": 2}, details
        assert len(serve_recover_jobs(cluster)) == 1
        serve.shutdown()


def test_applications_come_back_after_a_head_restart_took_their_replicas_and_shutdown_ends_that(tmp_path, monkeypatch):
    with running_cluster(tmp_path / "oxray", monkeypatch) as cluster:
        cluster.start_head(num_cpus=2)
        ray.init()

        @serve.deployment(ray_actor_options={"num_cpus": 0})
        class Model:
            def __init__(self, weights):
                self.size = len(weights)

            def __call__(self, request):
                return f"{os.getpid()} {self.size}"

        # Bound arguments travel in the checkpoint: over gRPC's default 4 MiB message.
        weights = b"w" * (6 << 20)
        port = free_port()
        serve.start(http_options={"port": port})
        serve.run(Model.bind(weights), name="kept", route_prefix="/kept")
        serve.run(Model.bind(b""), name="deleted", route_prefix="/deleted")
        serve.delete("deleted")
        status, before = fetch(port, "/kept")
        assert status == 200
        kill_head(cluster)

        cluster.start_head(num_cpus=2)
        assert len(serve_recover_jobs(cluster)) == 1
        ray.init()
        wait_until(
            lambda: f"the application to run again: {serve.status()}",
            lambda: app_status("kept") == "RUNNING",
            timeout=120,
        )
        wait_until(
            lambda: f"the proxy on {port}",
            lambda: (http_get_local_or_none(port, "/kept") or (None,))[0] == 200,
            timeout=60,
        )
        status, after = fetch(port, "/kept")
        assert after.split()[1] == str(len(weights)).encode(), after
        assert after.split()[0] != before.split()[0], "the replica went down with the head: a new one serves"
        assert fetch(port, "/deleted")[0] == 404
        assert set(serve.status().applications) == {"kept"}

        # After a shutdown the head keeps nothing to take back: no recover job on the next start.
        serve.shutdown()
        kill_head(cluster)
        cluster.start_head(num_cpus=2)
        assert len(serve_recover_jobs(cluster)) == 1
        ray.init()
        assert serve.status().applications == {}
