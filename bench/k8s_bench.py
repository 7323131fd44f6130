"""Kubernetes benchmark: image sizes, and the time from creating a cluster to
every node alive, for oxray and for Ray in one run.

- Image size: the oxray image (`make image`) and its -torch variant, beside the
  `rayproject/ray` figure published in ray-project/ray#52375 (the image
  KubeRay's samples use: 873.79 MB compressed, 2.21 GB uncompressed), and a
  Ray image built here the same way as oxray's (Debian base, `pip install
  "ray[default]==2.60.*"`), so both are measured by the same tool.
- Time to ready, real containers: a head and 2 workers under `podman kube play`
  (oxray: the operator's pods from `oxray-operator render`; Ray: the same pods
  running `ray start`), until the head's State API lists 3 live nodes.
- Time to ready, emulated: `OxrayCluster` created in the emulated API server
  (tests/python/k8s) until its status says ready with 2 workers, the pods run
  as processes by the fake kubelet (oxray only: Ray has no operator here).

Needs podman (`make podman-ready`), `make image` and the operator binary. Run:
    CONTAINERS_CONF=build/containers.conf python bench/k8s_bench.py [--rounds 3]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "podman"))
sys.path.insert(0, os.path.join(REPO, "tests", "python", "k8s"))
from fake_kubelet import FakeKubelet  # noqa: E402
from kube_emulator import EmulatedApiServer, Kube, wait_for  # noqa: E402
from podman_play import OPERATOR, SAMPLE, alive_nodes, free_port, play, podman, render  # noqa: E402

BASE = os.environ.get("K8S_BASE_IMAGE", "localhost/oxray-debian:bookworm")
NETWORK = "oxray-k8s-bench"
RAY_IMAGE = "localhost/ray-bench:2.60"
RAY_PUBLISHED = {
    "compressed_mb": 873.79,
    "uncompressed_mb": 2210.0,
    "source": "https://github.com/ray-project/ray/issues/52375",
}

RAY_CONTAINERFILE = """
ARG BASE
FROM ${BASE}
RUN --mount=type=bind,source=wheels,target=/tmp/wheels \\
    python3 -m venv /opt/ray \\
    && /opt/ray/bin/pip install --no-cache-dir --no-index --find-links /tmp/wheels "ray[default]" \\
    && useradd --create-home --uid 1000 ray
ENV PATH=/opt/ray/bin:$PATH
USER ray
"""


def image_sizes(image):
    """Uncompressed (podman's Size) and compressed (the OCI archive's gzip layers), in MB."""
    if podman("image", "exists", image, check=False).returncode != 0:
        return None
    size = int(podman("image", "inspect", "--format", "{{.Size}}", image).stdout.strip())
    with tempfile.TemporaryDirectory() as tmp:
        archive = os.path.join(tmp, "image.tar")
        podman("save", "-q", "--format", "oci-archive", "-o", archive, image)
        compressed = os.path.getsize(archive)
    return {"uncompressed_mb": size / 1e6, "compressed_mb": compressed / 1e6}


def build_ray_image(python):
    if podman("image", "exists", RAY_IMAGE, check=False).returncode == 0:
        return
    with tempfile.TemporaryDirectory() as context:
        wheels = os.path.join(context, "wheels")
        subprocess.run([python, "-m", "pip", "download", "--quiet", "-d", wheels, "ray[default]==2.60.*"], check=True)
        with open(os.path.join(context, "Containerfile"), "w") as f:
            f.write(RAY_CONTAINERFILE)
        podman("build", "-q", "--pull=missing", "--build-arg", f"BASE={BASE}", "-t", RAY_IMAGE, context)


def play_until_ready(pods, port, token, secret=None, timeout=300):
    """Seconds from `podman kube play` to 3 live nodes; the pods (and `secret`) are removed after."""
    with play(pods, NETWORK, secret) as started:
        wait_for("3 live nodes", lambda: len(alive_nodes(port, token)) >= 3, timeout=timeout)
        return time.monotonic() - started


def ray_pods(port):
    def pod(name, command, host_port=None):
        container = {"name": "ray", "image": RAY_IMAGE, "command": ["/bin/sh", "-c", command]}
        if host_port:
            container["ports"] = [{"containerPort": 8265, "hostPort": host_port}]
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": [container]}}

    head = "exec ray start --head --block --port=6379 --dashboard-host=0.0.0.0 --num-cpus=0 --disable-usage-stats"
    worker = "exec ray start --address=ray-bench-head:6379 --block --num-cpus=1 --disable-usage-stats"
    return [pod("ray-bench-head", head, port), pod("ray-bench-worker-0", worker), pod("ray-bench-worker-1", worker)]


def emulated_ready(rounds):
    """Seconds from creating the sample OxrayCluster to ready with 2 workers, in the emulator."""
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o700)
        with EmulatedApiServer() as api, FakeKubelet(Kube(api.url), tmp):
            env = {**os.environ, "KUBECONFIG": api.kubeconfig(os.path.join(tmp, "kubeconfig"))}
            operator = subprocess.Popen(
                [OPERATOR, "run", "--head-via", "pod-ip", "--poll-seconds", "0.5"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            kube = Kube(api.url)
            with open(SAMPLE) as f:
                manifest = yaml.safe_load(f)
            try:
                for _ in range(rounds):
                    started = time.monotonic()
                    kube.create("oxrayclusters", manifest)

                    def ready():
                        status = (kube.get("oxrayclusters", "oxray-sample") or {}).get("status") or {}
                        return status.get("state") == "ready" and status.get("readyWorkerReplicas") == 2

                    wait_for("ready", ready, timeout=120, interval=0.05)
                    times.append(time.monotonic() - started)
                    kube.delete("oxrayclusters", "oxray-sample")
                    wait_for("gone", lambda: kube.get("oxrayclusters", "oxray-sample") is None, timeout=60)
                    wait_for("no pods", lambda: kube.names("pods") == [], timeout=60)
            finally:
                operator.terminate()
                operator.wait(10)
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--image", default="localhost/oxray:latest")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    if shutil.which("podman") is None:
        sys.exit("podman is missing: run `make podman-ready` first")

    results = {"ray_published": RAY_PUBLISHED, "rounds": args.rounds}
    build_ray_image(sys.executable)
    results["images"] = {
        "oxray": image_sizes(args.image),
        "oxray-torch": image_sizes(f"{args.image}-torch"),
        "ray (built here)": image_sizes(RAY_IMAGE),
    }
    oxray_times, ray_times = [], []
    for _ in range(args.rounds):
        port = free_port()
        pods, token, secret = render(args.image, port)
        oxray_times.append(play_until_ready(pods, port, token, secret))
        port = free_port()
        ray_times.append(play_until_ready(ray_pods(port), port, None))
    results["podman_play_to_ready_s"] = {"oxray": oxray_times, "ray": ray_times}
    results["emulated_apply_to_ready_s"] = {"oxray": emulated_ready(args.rounds)}

    if args.json:
        print(json.dumps(results, indent=2))
        return
    print("image sizes (MB)                 uncompressed   compressed")
    for name, sizes in results["images"].items():
        if sizes:
            print(f"  {name:<30} {sizes['uncompressed_mb']:>10.0f} {sizes['compressed_mb']:>12.0f}")
    published = RAY_PUBLISHED
    name = "rayproject/ray (published)"
    print(f"  {name:<30} {published['uncompressed_mb']:>10.0f} {published['compressed_mb']:>12.0f}")
    print(f"    source: {published['source']}")
    oxray_size = results["images"]["oxray"]
    if oxray_size:
        raw = oxray_size["uncompressed_mb"] / published["uncompressed_mb"]
        packed = oxray_size["compressed_mb"] / published["compressed_mb"]
        print(f"  oxray / rayproject/ray: {raw:.3f} uncompressed, {packed:.3f} compressed")
    o, r = statistics.median(oxray_times), statistics.median(ray_times)
    print(
        f"podman kube play to 3 live nodes (median of {args.rounds}): oxray {o:.2f} s, ray {r:.2f} s, ratio {o / r:.3f}"
    )
    e = statistics.median(results["emulated_apply_to_ready_s"]["oxray"])
    print(f"emulated API: OxrayCluster created to ready with 2 workers (median of {args.rounds}): {e:.2f} s")


if __name__ == "__main__":
    main()
