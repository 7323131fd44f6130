"""Prometheus and the head's samples: every node serves its own `/metrics`
behind the token, the head serves the whole cluster's (Ray's metric names) and
lists the nodes for service discovery, the object store's bytes show a `put`,
and the head keeps only the configured window of samples."""

import json
import re

import numpy as np
import pytest

import oxray as ray
from oxray_testutil import http_call, wait_until

pytestmark = pytest.mark.timeout(180)


def metric(text, name, **labels):
    """The value of the first `name` sample whose labels include `labels`."""
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_every_node_and_the_head_serve_prometheus_metrics(head):
    head.add_node(num_cpus=1)
    ray.init(address=head.address)
    wait_until("2 live nodes", lambda: len([n for n in ray.nodes() if n["Alive"]]) == 2, timeout=60)
    node_ids = {n["NodeID"] for n in ray.nodes()}
    url, token = head.dashboard_url, head.token

    status, body = http_call("GET", f"{url}/api/prometheus/sd", token=token)
    [group] = json.loads(body)
    assert status == 200 and group["labels"] == {"job": "ray"} and len(group["targets"]) == 2
    seen = set()
    for target in group["targets"]:
        assert http_call("GET", f"http://{target}/metrics")[0] == 401
        assert http_call("GET", f"http://{target}/metrics", token="wrong")[0] == 403
        text = wait_until(
            f"{target} to serve samples",
            lambda t=target: (lambda r: r[0] == 200 and "ray_node_cpu_utilization" in r[1] and r[1])(
                http_call("GET", f"http://{t}/metrics", token=token)
            ),
            timeout=60,
        )
        node = re.search(r'ray_node_cpu_utilization\{NodeId="(\w+)"', text).group(1)
        seen.add(node)
        assert metric(text, "ray_node_mem_total", NodeId=node) > 0
    assert seen == node_ids, "each target is a different node"

    big = np.ones(8 * 1024 * 1024, dtype=np.uint8)
    ref = ray.put(big)  # noqa: F841 - held, so the bytes stay in the head node's store

    def store_bytes():
        _, text = http_call("GET", f"{url}/metrics", token=token)
        used = [metric(text, "ray_object_store_memory", NodeId=n, Location="MMAP_SHM") or 0 for n in node_ids]
        return sum(used) >= big.nbytes and text

    text = wait_until("the put's bytes to show in ray_object_store_memory", store_bytes, timeout=60)
    assert metric(text, "oxray_nodes", State="ALIVE") == 2
    assert metric(text, "ray_resources", Name="CPU", State="AVAILABLE") is not None
    assert "# TYPE ray_node_network_received counter" in text
    assert http_call("GET", f"{url}/metrics")[0] == 401


@ray.remote
class Idle:
    def ping(self):
        return 1


def test_the_head_keeps_only_the_window_of_samples(fresh_cluster, monkeypatch):
    monkeypatch.setenv("OXRAY_METRICS_WINDOW_S", "2")
    ctx = fresh_cluster(num_cpus=1, include_dashboard=True, dashboard_port=0)
    actor = Idle.remote()
    ray.get(actor.ping.remote())
    from oxray._private.api import STATE

    url, token = f"http://{ctx.dashboard_url}", STATE.cluster.token

    def series():
        _, body = http_call("GET", f"{url}/api/oxray/metrics?since_ms=0", token=token)
        return json.loads(body)

    # Samples arrive every second; after five, at most the last two seconds' are kept.
    wait_until(
        "a sample with the finished task",
        lambda: series()[0]["samples"] and series()[0]["samples"][-1]["tasks_finished"] >= 1,
        timeout=60,
    )
    first = series()[0]["samples"][0]["time_ms"]
    wait_until(
        "the first sample to be dropped for newer ones",
        lambda: series()[0]["samples"][0]["time_ms"] > first + 2000,
        timeout=60,
    )
    samples = series()[0]["samples"]
    assert samples and samples[-1]["time_ms"] - samples[0]["time_ms"] <= 2000, "older samples are dropped"
    newest = samples[-1]["time_ms"]
    _, body = http_call("GET", f"{url}/api/oxray/metrics?since_ms={newest}", token=token)
    assert all(s["time_ms"] > newest for s in json.loads(body)[0]["samples"])


GPU_METRICS = {"ray_node_gpus_utilization", "ray_node_gram_used", "ray_node_gram_available"}


def test_the_grafana_dashboard_queries_metrics_the_cluster_serves(head):
    import os

    ray.init(address=head.address)
    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "grafana", "oxray-cluster.json")
    with open(path) as f:
        dashboard = json.load(f)
    queried = set()
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            queried |= set(re.findall(r"\b(?:ray|oxray)_[a-z_]+", target["expr"]))
    assert len(queried) >= 15
    text = wait_until(
        "the head to serve samples",
        lambda: (lambda r: "ray_node_cpu_utilization" in r[1] and r[1])(
            http_call("GET", f"{head.dashboard_url}/metrics", token=head.token)
        ),
        timeout=60,
    )
    served = set(re.findall(r"^# TYPE (\S+)", text, re.M))
    # GPU metrics appear only on nodes with GPUs (this machine has none).
    assert queried - GPU_METRICS <= served, sorted(queried - GPU_METRICS - served)
    assert queried & GPU_METRICS == GPU_METRICS
