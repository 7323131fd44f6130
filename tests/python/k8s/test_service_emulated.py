"""`OxrayService` against the emulated API server, its clusters' pods run as real `oxray start`
processes by the fake kubelet: the operator deploys `serveConfigV2` through the head's Serve REST
API, reports each application's status, routes `<name>-serve-svc` to the cluster once everything
runs there, applies a config change in place, and on a cluster spec change brings up a new
cluster, moves the Service only once that cluster serves, and deletes the old one.

The emulated pods share this host's ports: every cluster's proxies bind 0.0.0.0 (the operator's
default for a serve config) on one port, with SO_REUSEPORT. Requests are therefore checked
while one cluster runs (before the upgrade and after the old cluster is gone); during the
upgrade, the test checks what Kubernetes routes by: the serve Service always selects a cluster
whose head reports every application RUNNING."""

import threading

import pytest
from test_operator_emulated import IMAGE, head_call, status, token_of

from cli_cluster import free_port
from oxray_testutil import http_get_local_or_none, wait_until

APP = """
import os

from oxray import serve


@serve.deployment(ray_actor_options={"num_cpus": 0})
class Version:
    def __call__(self, request):
        return os.environ["SHOP_VERSION"]


app = Version.bind()
"""


def container(version, apps_dir):
    env = [{"name": "SHOP_VERSION", "value": version}, {"name": "PYTHONPATH", "value": str(apps_dir)}]
    return {"spec": {"containers": [{"name": "oxray", "image": IMAGE, "env": env}]}}


def service_manifest(version, port, apps_dir, route="/shop"):
    serve_config = (
        f"http_options:\n  port: {port}\n"
        f"applications:\n  - name: shop\n    route_prefix: {route}\n    import_path: shop:app\n"
    )
    return {
        "apiVersion": "oxray.io/v1",
        "kind": "OxrayService",
        "metadata": {"name": "shop"},
        "spec": {
            "serveConfigV2": serve_config,
            "rayClusterDeletionDelaySeconds": 2,
            "rayClusterConfig": {
                "headGroupSpec": {
                    "rayStartParams": {"num-cpus": "1", "object-store-memory": str(256 * 1024**2)},
                    "template": container(version, apps_dir),
                },
                "workerGroupSpecs": [],
            },
        },
    }


def shop_running_on(kube, cluster):
    """Whether `cluster`'s head reports the shop application RUNNING (its own Serve REST API)."""
    head = (status(kube, "oxrayclusters", cluster).get("head") or {}).get("podIp")
    if head is None:
        return False
    code, details = head_call(head, "/api/serve/applications/", token_of(kube, cluster))
    return code == 200 and details["applications"].get("shop", {}).get("status") == "RUNNING"


def routed_cluster(kube):
    service = kube.get("services", "shop-serve-svc")
    return service and service["spec"]["selector"]["oxray.io/cluster"]


@pytest.mark.timeout(600)
def test_a_service_serves_changes_its_config_in_place_and_upgrades_its_cluster_without_downtime(emulated, tmp_path):
    kube = emulated.kube
    apps_dir = tmp_path / "apps"
    apps_dir.mkdir()
    (apps_dir / "shop.py").write_text(APP)
    port = free_port()
    kube.create("oxrayservices", service_manifest("v1", port, apps_dir))

    def running():
        s = status(kube, "oxrayservices", "shop")
        return s.get("serviceStatus") == "Running" and not s.get("pendingServiceStatus") and s

    try:
        first = wait_until("the service to run", running, timeout=240)
        old = first["activeServiceStatus"]["rayClusterName"]
        shop = first["activeServiceStatus"]["applicationStatuses"]["shop"]
        assert shop["status"] == "RUNNING" and shop["serveDeploymentStatuses"]["Version"]["status"] == "HEALTHY"
        assert first["numServeEndpoints"] == 1
        assert [c["status"] for c in first["conditions"] if c["type"] == "Ready"] == ["True"]
        cluster = kube.get("oxrayclusters", old)
        assert cluster["metadata"]["ownerReferences"][0]["kind"] == "OxrayService"
        service = kube.get("services", "shop-serve-svc")
        assert service["spec"]["selector"] == {"oxray.io/cluster": old}
        assert [(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [("serve", 8000, port)]
        assert http_get_local_or_none(port, "/shop") == (200, b"v1")

        # A new serveConfigV2 alone: deployed to the same cluster.
        kube.patch("oxrayservices", "shop", {"spec": service_manifest("v1", port, apps_dir, "/store")["spec"]})
        wait_until("the new route", lambda: http_get_local_or_none(port, "/store") == (200, b"v1"), timeout=120)
        # The application rolled its replica in place; RUNNING again once the old one stopped.
        wait_until("the update to finish", lambda: shop_running_on(kube, old), timeout=60)
        assert status(kube, "oxrayservices", "shop")["activeServiceStatus"]["rayClusterName"] == old
        assert kube.names("oxrayclusters") == [old]

        # A new cluster spec: a second cluster comes up; the Service moves only once it serves.
        routed_to_serving = []
        stop = threading.Event()

        def watch_routing():
            # One last look after `stop`: the routing once the new cluster took over is seen too.
            while True:
                stopping = stop.is_set()
                cluster = routed_cluster(kube)
                routed_to_serving.append((cluster, shop_running_on(kube, cluster)))
                if stopping:
                    return
                stop.wait(0.2)

        watcher = threading.Thread(target=watch_routing, daemon=True)
        watcher.start()
        kube.patch("oxrayservices", "shop", {"spec": service_manifest("v2", port, apps_dir, "/store")["spec"]})
        upgrading = wait_until(
            "the upgrade to start",
            lambda: (s := status(kube, "oxrayservices", "shop")).get("pendingServiceStatus") and s,
            timeout=60,
        )
        new = upgrading["pendingServiceStatus"]["rayClusterName"]
        assert new != old
        assert [c["status"] for c in upgrading["conditions"] if c["type"] == "UpgradeInProgress"] == ["True"]
        assert upgrading["activeServiceStatus"]["rayClusterName"] == old, "the old cluster serves meanwhile"
        done = wait_until(
            "the new cluster to take over",
            lambda: (s := running()) and s["activeServiceStatus"]["rayClusterName"] == new and s,
            timeout=240,
        )
        stop.set()
        watcher.join(30)
        assert routed_to_serving and all(serving for _, serving in routed_to_serving), routed_to_serving
        assert {cluster for cluster, _ in routed_to_serving} == {old, new}
        assert routed_cluster(kube) == new
        assert [c["status"] for c in done["conditions"] if c["type"] == "UpgradeInProgress"] == ["False"]

        wait_until("the old cluster to go", lambda: kube.names("oxrayclusters") == [new], timeout=60)
        wait_until("its pods to go", lambda: kube.names("pods", {"oxray.io/cluster": old}) == [], timeout=60)
        wait_until(
            "only the new cluster to answer", lambda: http_get_local_or_none(port, "/store") == (200, b"v2"), timeout=60
        )
        assert all(http_get_local_or_none(port, "/store") == (200, b"v2") for _ in range(10))
    except AssertionError as e:
        raise AssertionError(f"{e}\n{emulated.diagnostics()}") from None

    kube.delete("oxrayservices", "shop")
    wait_until("the service to go", lambda: kube.get("oxrayservices", "shop") is None, timeout=60)
    wait_until("its cluster to go", lambda: kube.names("oxrayclusters") == [], timeout=60)
    assert kube.get("services", "shop-serve-svc") is None


def test_a_bad_serve_config_is_refused_with_a_condition(emulated):
    kube = emulated.kube
    manifest = service_manifest("v1", 8000, "/nowhere")
    manifest["spec"]["upgradeStrategy"] = {"type": "NewClusterWithIncrementalUpgrade"}
    kube.create("oxrayservices", manifest)
    refused = wait_until(
        "the refusal",
        lambda: (s := status(kube, "oxrayservices", "shop")).get("message") and s,
        timeout=30,
    )
    assert "upgradeStrategy.type" in refused["message"] and "Gateway API" in refused["message"]
    [ready] = [c for c in refused["conditions"] if c["type"] == "Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert kube.names("oxrayclusters") == []
    assert emulated.operator.poll() is None
