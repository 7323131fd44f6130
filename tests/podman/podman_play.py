"""Running the operator's rendered pods under `podman kube play`, shared by
the podman test and bench/k8s_bench.py: `oxray-operator render` of a cluster
manifest, its Secret turned into the podman secret that podman 4's kube play
reads for `secretKeyRef`, and the head's State API through the published
dashboard port."""

import base64
import json
import os
import socket
import subprocess
import urllib.error
import urllib.request

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OPERATOR = os.path.join(REPO, "target", "debug", "oxray-operator")
SAMPLE = os.path.join(REPO, "deploy", "examples", "oxray-cluster.yaml")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def podman(*args, check=True, timeout=900, **kwargs):
    done = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout, **kwargs)
    if check and done.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done


def render(image, port, manifest=SAMPLE, head_address="oxray-sample-head:6379"):
    """The pods the operator would make, for podman, and the cluster token; the podman secret is created."""
    rendered = subprocess.run(
        [OPERATOR, "render", "-f", manifest, "--image", image, "--publish-dashboard", str(port)]
        + ["--head-address", head_address],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    [secret] = [d for d in docs if d["kind"] == "Secret"]
    name = secret["metadata"]["name"]
    # podman 4's kube play reads a secretKeyRef from a podman secret holding the Secret's data (JSON).
    podman("secret", "rm", name, check=False)
    podman("secret", "create", name, "-", input=json.dumps(secret["data"]))
    token = base64.b64decode(secret["data"]["token"]).decode()
    return [d for d in docs if d["kind"] == "Pod"], token, name


def head_get(port, path, token):
    """(status, JSON body) of a GET on the published port; (None, None) while nothing answers."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, None
    except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
        return None, None


def alive_nodes(port, token):
    """The head's live nodes (Ray's State API row shape), or [] while it does not answer."""
    code, body = head_get(port, "/api/v0/nodes?limit=100", token)
    if code != 200:
        return []
    return [n for n in body["data"]["result"]["result"] if n["state"] == "ALIVE"]
