"""The operator's pods in real containers: `oxray-operator render` turns the
sample OxrayCluster (deploy/examples/oxray-cluster.yaml) into the Secret and
pods the operator would create, `podman kube play` runs them from the oxray
image, the workers join the head over container networking with the Secret's
token, and a TorchTrainer job submitted through the published dashboard port
trains across the worker containers and SUCCEEDS, its logs coming back.

Run by `make k8s-test` (not `make test`): it needs podman and the image `make
image` builds. Torch comes from this venv, hard-linked and mounted into the
pods (`podman_play.with_host_torch`), unless $OXRAY_TEST_IMAGE names a -torch
image (`make image-torch`), which then runs as it is. The times it measures go
to $OXRAY_K8S_BENCH_OUT."""

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from podman_play import (
    REPO,
    alive_nodes,
    free_port,
    head_get,
    host_torch_site,
    play,
    pod_logs,
    render,
    with_host_torch,
)

sys.path.insert(0, os.path.join(REPO, "tests", "python"))
from oxray_testutil import wait_until  # noqa: E402

JOBS = os.path.join(REPO, "deploy", "examples", "jobs")
IMAGE = os.environ.get("OXRAY_TEST_IMAGE", "localhost/oxray:latest")
TORCH_IN_IMAGE = IMAGE.endswith("-torch")
NETWORK = "oxray-k8s-test"


@pytest.fixture
def played():
    """The sample cluster rendered and played; torn down after the test."""
    port = free_port()
    pods, token, secret = render(IMAGE, port)
    assert len(token) == 64, "render generates a token as the operator does"
    if not TORCH_IN_IMAGE:
        pods = with_host_torch(pods, host_torch_site())
    with play(pods, NETWORK, secret) as started:
        yield {"port": port, "token": token, "pods": [p["metadata"]["name"] for p in pods], "started": started}


def test_the_sample_cluster_runs_a_torch_trainer_job_across_containers(played):
    port, token = played["port"], played["token"]

    def three_alive():
        nodes = alive_nodes(port, token)
        return nodes if len(nodes) == 3 else None

    try:
        nodes = wait_until("the head and 2 workers alive", three_alive, timeout=180)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{pod_logs(played['pods'])}") from None
    ready_s = time.monotonic() - played["started"]
    workers = [n for n in nodes if not n["is_head_node"]]
    assert sorted(n["resources_total"].get("CPU") for n in workers) == [1.0, 1.0], "num-cpus from the CPU limit"
    assert len({n["node_ip"] for n in nodes}) == 3, "each pod on its own address"

    # Without the token, or with another, the published port refuses.
    assert head_get(port, "/api/v0/nodes", token="wrong")[0] == 403
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/v0/nodes")
    with pytest.raises(urllib.error.HTTPError, match="401"):
        urllib.request.urlopen(request, timeout=5)

    env = {**os.environ, "OXRAY_TOKEN": token}
    address = f"http://127.0.0.1:{port}"
    submitted = subprocess.run(
        [sys.executable, "-m", "oxray.scripts.cli", "job", "submit", "--address", address, "--no-wait"]
        + ["--working-dir", JOBS, "--", "python", "train_torch.py"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    job_id = re.search(r"raysubmit_\w+", submitted.stdout).group(0)
    started = time.monotonic()

    def finished():
        code, body = head_get(port, f"/api/jobs/{job_id}", token)
        return body if code == 200 and body["status"] in ("SUCCEEDED", "FAILED", "STOPPED") else None

    try:
        job = wait_until(f"job {job_id} to end", finished, timeout=600)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{pod_logs(played['pods'])}") from None
    job_s = time.monotonic() - started
    code, logs = head_get(port, f"/api/jobs/{job_id}/logs", token)
    assert code == 200
    assert job["status"] == "SUCCEEDED", f"{job}\n{logs['logs']}"
    hosts_line = next(line for line in logs["logs"].splitlines() if "training hosts:" in line)
    hosts = hosts_line.split("training hosts:", 1)[1].strip().split(", ")
    assert sorted(hosts) == sorted(p for p in played["pods"] if "worker" in p), hosts_line
    assert "training nodes: 2" in logs["logs"]
    assert "final loss:" in logs["logs"] and "training finished: no error" in logs["logs"]

    out = os.environ.get("OXRAY_K8S_BENCH_OUT")
    if out:
        with open(out, "w") as f:
            json.dump(
                {"play_to_ready_s": ready_s, "torch_job_s": job_s, "image": IMAGE, "torch_in_image": TORCH_IN_IMAGE}, f
            )
    print(f"podman kube play to 3 live nodes: {ready_s:.1f} s; TorchTrainer job: {job_s:.1f} s")
