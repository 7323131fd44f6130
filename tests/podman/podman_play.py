"""Running the operator's rendered pods under `podman kube play`, shared by
the podman test and bench/k8s_bench.py: `oxray-operator render` of a cluster
manifest, its Secret turned into the podman secret that podman 4's kube play
reads for `secretKeyRef`, the pods played and taken down (`play`), the head's
State API through the published dashboard port, and this venv's torch mounted
into the pods, so that the TorchTrainer test runs on the base image
(`with_host_torch`)."""

import base64
import contextlib
import importlib.metadata
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import yaml
from packaging.requirements import Requirement

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OPERATOR = os.path.join(REPO, "target", "debug", "oxray-operator")
SAMPLE = os.path.join(REPO, "deploy", "examples", "oxray-cluster.yaml")
TORCH_SITE = os.path.join(REPO, "build", "torch-site")
TORCH_MOUNT = "/opt/torch-site"


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


@contextlib.contextmanager
def play(pods, network, secret=None):
    """`pods` run under `podman kube play` on `network`, yielding when the play began;
    afterwards the pods, the network and the podman `secret` (from `render`) are removed."""
    with tempfile.TemporaryDirectory() as tmp:
        manifest = os.path.join(tmp, "pods.yaml")
        with open(manifest, "w") as f:
            f.write(yaml.safe_dump_all(pods))
        podman("network", "create", network, check=False)
        started = time.monotonic()
        try:
            podman("kube", "play", "--network", network, manifest, timeout=600)
            yield started
        finally:
            podman("kube", "down", manifest, check=False)
            if secret:
                podman("secret", "rm", secret, check=False)
            podman("network", "rm", "-f", network, check=False)


def pod_logs(names):
    """The last output of each named pod's oxray container, for a failure's message."""
    out = []
    for name in names:
        for suffix in ("oxray-head", "oxray-worker"):
            done = podman("logs", f"{name}-{suffix}", check=False)
            if done.returncode == 0:
                out.append(f"--- {name}\n{(done.stdout + done.stderr)[-3000:]}")
    return "\n".join(out)


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


def _requirement_closure(name):
    """The installed distributions `name` needs on this platform, itself included,
    following the extras asked for (torch's CUDA libraries come as extras of cuda-toolkit)."""
    seen, done, todo = {}, set(), [(name, "")]
    while todo:
        wanted, extra = todo.pop()
        dist = importlib.metadata.distribution(wanted)
        key = dist.metadata["Name"].lower().replace("_", "-")
        if (key, extra) in done:
            continue
        done.add((key, extra))
        seen[key] = dist
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": extra}):
                todo.extend((req.name, e) for e in [""] + sorted(req.extras))
    return list(seen.values())


def host_torch_site(dest=TORCH_SITE):
    """torch and its requirements as installed in this venv, hard-linked into `dest`
    (no copy: torch with its CUDA libraries is about 5 GB, and a -torch image layer
    of that size ran CI's disk out of space)."""
    shutil.rmtree(dest, ignore_errors=True)
    for dist in _requirement_closure("torch"):
        root = os.path.realpath(dist.locate_file(""))
        for file in dist.files or []:
            source = os.path.realpath(dist.locate_file(file))
            if not source.startswith(root + os.sep) or not os.path.isfile(source):
                continue  # scripts under bin/ and the like
            target = os.path.join(dest, os.path.relpath(source, root))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            try:
                os.link(source, target)
            except OSError:
                shutil.copy2(source, target)
    return dest


def with_host_torch(pods, site):
    """The pods with `site` (from `host_torch_site`) mounted read-only on PYTHONPATH
    in their main containers: the base image plus this venv's torch, for a test."""
    for pod in pods:
        spec = pod["spec"]
        spec.setdefault("volumes", []).append({"name": "torch-site", "hostPath": {"path": site, "type": "Directory"}})
        for container in spec["containers"]:
            container.setdefault("volumeMounts", []).append(
                {"name": "torch-site", "mountPath": TORCH_MOUNT, "readOnly": True}
            )
            container.setdefault("env", []).append({"name": "PYTHONPATH", "value": TORCH_MOUNT})
    return pods
