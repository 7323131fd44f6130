"""`oxray start` clusters for tests: a head and node agents as separate processes
under a private temp root, and a context that starts from a clean driver state
and stops every process it started, even when the test fails."""

import contextlib
import glob
import json
import os
import signal
import socket
import subprocess
import sys

import oxray as ray
from oxray_testutil import wait_until

OXRAY = [sys.executable, "-m", "oxray.scripts.cli"]
MiB = 1024**2


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalCluster:
    """`oxray start` processes under a private temp root (so `oxray stop` and
    `ray.init()` see only this cluster)."""

    def __init__(self, root):
        self.root = str(root)
        self.env = {**os.environ, "OXRAY_TEMP_DIR": self.root}
        self.env.pop("OXRAY_TOKEN", None)
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.dashboard_port = free_port()
        self.dashboard_url = f"http://127.0.0.1:{self.dashboard_port}"

    def cli(self, *args, check=True, env=None):
        proc = subprocess.run(OXRAY + list(args), env=env or self.env, capture_output=True, text=True, timeout=120)
        if check and proc.returncode != 0:
            raise AssertionError(f"oxray {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
        return proc

    @property
    def token(self):
        with open(os.path.join(self.root, "state", "token")) as f:
            return f.read().strip()

    def start_head(self, num_cpus=1, resources=None):
        return self.cli(
            "start",
            "--head",
            "--dashboard-port",
            str(self.dashboard_port),
            "--port",
            str(self.port),
            "--num-cpus",
            str(num_cpus),
            "--object-store-memory",
            str(256 * MiB),
            "--resources",
            json.dumps(resources or {}),
        )

    def add_node(self, num_cpus=1, resources=None, labels=None, extra=()):
        self.cli(
            "start",
            "--address",
            self.address,
            "--num-cpus",
            str(num_cpus),
            "--object-store-memory",
            str(512 * MiB),
            "--resources",
            json.dumps(resources or {}),
            *(["--labels", labels] if labels else []),
            *extra,
            env={**self.env, "OXRAY_TOKEN": self.token},
        )

    def records(self):
        out = []
        for path in glob.glob(os.path.join(self.root, "nodes", "*.json")):
            with open(path) as f:
                out.append(json.load(f))
        return out

    def node_with(self, resource):
        """The node record whose agent offers `resource`."""
        nodes = {n["NodeID"]: n for n in ray.nodes()}
        for record in self.records():
            if resource in nodes.get(record["node_id"], {}).get("Resources", {}):
                return record
        raise AssertionError(f"no node offers {resource}")

    def node_with_pid_record(self, head):
        """The one node record of the head (or of a non-head node)."""
        [record] = [r for r in self.records() if bool(r["head"]) == head]
        return record

    def wait_nodes(self, n):
        wait_until(
            lambda: f"{n} live nodes ({ray.nodes()})",
            lambda: sum(1 for x in ray.nodes() if x["Alive"]) == n,
            timeout=60,
        )

    def status(self):
        return self.cli("status").stdout

    def metrics_text(self):
        """Every node's /metrics, as a Prometheus finds them (`/api/prometheus/sd`)."""
        from oxray_testutil import http_call

        _, body = http_call("GET", f"{self.dashboard_url}/api/prometheus/sd", token=self.token)
        targets = json.loads(body)[0]["targets"]
        return "".join(http_call("GET", f"http://{t}/metrics", token=self.token)[1] for t in targets)

    def stop(self):
        pids = [int(r["pid"]) for r in self.records()]
        self.cli("stop", "--force", check=False)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@contextlib.contextmanager
def running_cluster(root, monkeypatch, env=None, unset=()):
    """A `LocalCluster` under `root` that this driver's `ray.init()` finds (and no
    other); `env` goes to its processes, `unset` is removed from both."""
    if ray.is_initialized():
        ray.shutdown()
    cluster = LocalCluster(root)
    cluster.env.update(env or {})
    for var in unset:
        cluster.env.pop(var, None)
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OXRAY_TEMP_DIR", cluster.root)
    monkeypatch.delenv("OXRAY_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    try:
        yield cluster
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.stop()
