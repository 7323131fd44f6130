"""An OxrayService's cluster in real containers: `oxray-operator render` turns the
sample OxrayService (deploy/examples/oxray-service.yaml) into the ConfigMap,
Secret and pods of the first cluster the operator would make, `podman kube play`
runs them, the Serve config the operator would PUT (`--serve-config`) goes to the
head's Serve REST API through the published dashboard port, and once every
application is RUNNING, requests through the published Serve port reach the
application's replicas, which the ConfigMap's module defines. The moves between
clusters on an upgrade need the Kubernetes API (its Services): the emulated API
server's tests cover them (tests/python/k8s/test_service_emulated.py).

Run by `make k8s-test` (not `make test`): it needs podman and the image `make
image` builds."""

import base64
import json
import os
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

import yaml
from podman_play import OPERATOR, REPO, alive_nodes, free_port, head_get, play, pod_logs, podman

sys.path.insert(0, os.path.join(REPO, "tests", "python"))
from oxray_testutil import wait_until  # noqa: E402

SAMPLE = os.path.join(REPO, "deploy", "examples", "oxray-service.yaml")
IMAGE = os.environ.get("OXRAY_TEST_IMAGE", "localhost/oxray:latest")
NETWORK = "oxray-k8s-service-test"


def rendered(dashboard_port, serve_port, config_path, head_address):
    out = subprocess.run(
        [OPERATOR, "render", "-f", SAMPLE, "--image", IMAGE, "--publish-dashboard", str(dashboard_port)]
        + ["--publish-serve", str(serve_port), "--serve-config", config_path, "--head-address", head_address],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def serve_request(port, path, body):
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, None
    except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
        return None, None


def test_the_sample_service_serves_its_application_from_containers():
    dashboard_port, serve_port = free_port(), free_port()
    with tempfile.TemporaryDirectory() as tmp:
        config_path = os.path.join(tmp, "serve.json")
        # The cluster's name (and so its head's) comes from the spec's hash: render once to learn it.
        first = rendered(dashboard_port, serve_port, config_path, "unknown:6379")
        [head] = [d for d in first if d["kind"] == "Pod" and d["metadata"]["name"].endswith("-head")]
        docs = rendered(dashboard_port, serve_port, config_path, f"{head['metadata']['name']}:6379")
        config = json.load(open(config_path))
    assert config["http_options"]["host"] == "0.0.0.0", "the proxies listen on the pod's address"
    [secret] = [d for d in docs if d["kind"] == "Secret"]
    token = base64.b64decode(secret["data"]["token"]).decode()
    podman("secret", "rm", secret["metadata"]["name"], check=False)
    podman("secret", "create", secret["metadata"]["name"], "-", input=json.dumps(secret["data"]))
    playable = [d for d in docs if d["kind"] in ("ConfigMap", "Pod")]
    pods = [d["metadata"]["name"] for d in docs if d["kind"] == "Pod"]
    with play(playable, NETWORK, secret["metadata"]["name"]):
        try:
            wait_until("the head and its worker alive", lambda: len(alive_nodes(dashboard_port, token)) == 2, 180)
            # What the operator does once the cluster is ready: PUT the config to the head.
            body = json.dumps(config).encode()
            request = urllib.request.Request(
                f"http://127.0.0.1:{dashboard_port}/api/serve/applications/",
                data=body,
                method="PUT",
                headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            )
            with urllib.request.urlopen(request, timeout=30) as response:
                assert response.status == 200

            def running():
                code, details = head_get(dashboard_port, "/api/serve/applications/", token)
                app = (details or {}).get("applications", {}).get("echo") if code == 200 else None
                return app if app and app["status"] == "RUNNING" else None

            app = wait_until("the echo application RUNNING", running, timeout=300)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{pod_logs(pods)}") from None
        replicas = app["deployments"]["Echo"]["replicas"]
        assert len(replicas) == 2 and all(r["state"] == "RUNNING" for r in replicas), replicas
        reply = wait_until(
            "an answer through the published Serve port",
            lambda: serve_request(serve_port, "/echo/hello", b"from podman")[1],
            timeout=60,
        )
        assert reply == {"path": "/echo/hello", "body": "from podman"}
        # The token guards the REST API; the data plane is open, as Ray's.
        assert head_get(dashboard_port, "/api/serve/applications/", "wrong")[0] == 403
