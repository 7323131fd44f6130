"""Nodes on hosts that are really separate: three network namespaces, each a host with its own
address on a veth link to a bridge (made by the test itself, as root, which CI is), a head in
one and a node in each of the others, TLS and the token on every link. Tasks run on the host
their resources name, a 512 MiB object crosses hosts, and a host whose link is cut
(`ip link set down`) is seen dead, then alive again once its link is back. Where namespaces
cannot be made (not root, no `ip`), the test says why and skips."""

import json
import os
import secrets
import shutil
import subprocess
import sys

import pytest

import oxray as ray
from oxray_testutil import wait_until
from pki_testutil import write_test_pki

MiB = 1024**2
TLS_VARS = ("OXRAY_TLS_CERT", "OXRAY_TLS_KEY", "OXRAY_TLS_CA", "OXRAY_TLS_CLIENT_AUTH")


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _namespaces_unavailable():
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    name = f"oxprobe{secrets.token_hex(3)}"
    made = _ip("netns", "add", name, check=False)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    _ip("netns", "del", name, check=False)
    return None


class Hosts:
    """A bridge on this host and `count` namespaces on it: `address(i)` is host i's address."""

    def __init__(self, count):
        tag = secrets.token_hex(2)
        self.subnet = f"10.{200 + int(tag[0], 16)}.{int(tag[1:], 16) % 250}"
        self.bridge = f"oxbr{tag}"
        self.names = [f"ox{tag}h{i}" for i in range(count)]
        self.links = [f"ox{tag}v{i}" for i in range(count)]
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.subnet}.254/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i, (ns, link) in enumerate(zip(self.names, self.links, strict=True)):
            _ip("netns", "add", ns)
            _ip("link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", link, "master", self.bridge)
            _ip("link", "set", link, "up")
            _ip("-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "route", "add", "default", "via", f"{self.subnet}.254")

    def address(self, i):
        return f"{self.subnet}.{i + 1}"

    def run(self, i, *command, env=None):
        return subprocess.run(
            ["ip", "netns", "exec", self.names[i], *command], capture_output=True, text=True, env=env, timeout=120
        )

    def cut(self, i, down=True):
        _ip("link", "set", self.links[i], "down" if down else "up")

    def remove(self):
        for ns in self.names:
            # Whatever still runs in a namespace (a node left behind by a failure) goes with it.
            pids = _ip("netns", "pids", ns, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), 9)
                except (ProcessLookupError, ValueError):
                    pass
            _ip("netns", "del", ns, check=False)
        for link in self.links:
            _ip("link", "del", link, check=False)
        _ip("link", "del", self.bridge, check=False)


@pytest.fixture
def hosts(tmp_path, monkeypatch):
    why = _namespaces_unavailable()
    if why:
        pytest.skip(f"separate hosts cannot be made here: {why}")
    made = Hosts(3)
    for var in TLS_VARS + ("OXRAY_ADDRESS", "RAY_ADDRESS"):
        monkeypatch.delenv(var, raising=False)
    try:
        yield made
    finally:
        if ray.is_initialized():
            ray.shutdown()
        made.remove()


# The driver runs on the head's host (a driver joins through its own host's node, as in Ray): it
# reports each step in a file and waits for the test's moves (cutting and restoring a link) in
# files too.
DRIVER = """
import json, os, sys, time
import numpy as np
import oxray as ray

steps, head, host1, host2 = sys.argv[1:5]
MiB = 1024**2


def step(name, value=None):
    with open(os.path.join(steps, name + ".tmp"), "w") as f:
        json.dump(value, f)
    os.rename(os.path.join(steps, name + ".tmp"), os.path.join(steps, name))


def until(what, check, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    step("failed", what)
    sys.exit(1)


@ray.remote(num_cpus=0.5)
def where():
    return os.environ["OXRAY_NODE_ID"], ray.util.get_node_ip_address()


@ray.remote(num_cpus=0.5)
def big(n):
    return np.ones(n, dtype=np.uint8)


@ray.remote(num_cpus=0.5)
def total(array):
    return int(array.sum()), len(array)


ray.init(address=head + ":6379")
until("3 live nodes", lambda: sum(n["Alive"] for n in ray.nodes()) == 3)
by_ip = {n["NodeManagerAddress"]: n["NodeID"] for n in ray.nodes()}
placed = {i: ray.get(where.options(resources={f"host{i}": 0.1}).remote()) for i in (1, 2)}
n = 512 * MiB
ref = big.options(resources={"host1": 0.1}).remote(n)
crossed = ray.get(total.options(resources={"host2": 0.1}).remote(ref))
del ref
step("placed", {"by_ip": by_ip, "placed": placed, "crossed": crossed})

host2_id = by_ip[host2]
until("the link cut", lambda: os.path.exists(os.path.join(steps, "cut")))
until("host 2 seen dead", lambda: not any(x["NodeID"] == host2_id and x["Alive"] for x in ray.nodes()))
step("dead")
until("the link back", lambda: os.path.exists(os.path.join(steps, "restored")))


def serves_again():
    if not any(x["Alive"] and x["NodeManagerAddress"] == host2 for x in ray.nodes()):
        return None
    try:
        return ray.get(where.options(resources={"host2": 0.1}).remote(), timeout=20)
    except ray.exceptions.RayError:
        return None


step("back", until("host 2 serving again", serves_again))
"""


def test_nodes_on_separate_hosts_share_work_and_objects_and_a_cut_host_comes_back(hosts, tmp_path):
    certs = write_test_pki(tmp_path, ips=tuple(hosts.address(i) for i in range(3)) + ("127.0.0.1",))
    token = secrets.token_hex(32)
    token_file = tmp_path / "token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    tls = ["--tls-cert", certs["cert"], "--tls-key", certs["key"], "--tls-ca", certs["ca"]]
    env = {k: v for k, v in os.environ.items() if k not in TLS_VARS}
    oxray = [sys.executable, "-m", "oxray.scripts.cli"]
    head = hosts.address(0)
    for i in range(3):
        root = tmp_path / f"host{i}"
        root.mkdir(mode=0o700)
        node_env = {**env, "OXRAY_TEMP_DIR": str(root)}
        where_flags = ["--node-ip-address", hosts.address(i), "--token-file", str(token_file)]
        store = ["--object-store-memory", str(1200 * MiB)]
        if i == 0:
            args = ["start", "--head", "--port", "6379", "--dashboard-port", "8265", "--num-cpus", "0"]
        else:
            resources = json.dumps({f"host{i}": 1})
            args = ["start", "--address", f"{head}:6379", "--num-cpus", "1", "--resources", resources]
        done = hosts.run(i, *oxray, *args, *where_flags, *store, *tls, env=node_env)
        assert done.returncode == 0, f"host {i}: {done.stdout}\n{done.stderr}"

    steps = tmp_path / "steps"
    steps.mkdir()
    driver_env = {
        **env,
        "OXRAY_TEMP_DIR": str(tmp_path / "host0"),
        "OXRAY_TOKEN": token,
        "OXRAY_TLS_CA": certs["ca"],
        "OXRAY_TLS_CERT": certs["cert"],
        "OXRAY_TLS_KEY": certs["key"],
    }
    script = [sys.executable, "-c", DRIVER, str(steps), head, hosts.address(1), hosts.address(2)]
    driver = subprocess.Popen(
        ["ip", "netns", "exec", hosts.names[0], *script],
        env=driver_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )

    def reached(name):
        def check():
            if (steps / "failed").exists():
                raise AssertionError(f"the driver gave up waiting for {json.loads((steps / 'failed').read_text())}")
            if driver.poll() is not None and not (steps / name).exists():
                raise AssertionError(f"the driver exited ({driver.returncode}):\n{driver.stdout.read()}")
            return (steps / name).exists() and json.loads((steps / name).read_text() or "null")

        return check

    try:
        placed = wait_until("tasks on each host and the object across", reached("placed"), timeout=180)
        assert set(placed["by_ip"]) == {hosts.address(i) for i in range(3)}, placed
        for i in (1, 2):
            # A task runs on the host its resource names, and sees that host's address.
            assert placed["placed"][str(i)] == [placed["by_ip"][hosts.address(i)], hosts.address(i)]
        assert placed["crossed"] == [512 * MiB, 512 * MiB]

        hosts.cut(2)
        (steps / "cut").touch()
        wait_until("host 2 seen dead", lambda: (steps / "dead").exists() or reached("dead")(), timeout=60)
        hosts.cut(2, down=False)
        (steps / "restored").touch()
        node, ip = wait_until("host 2 serving again", reached("back"), timeout=180)
        assert ip == hosts.address(2)
        assert driver.wait(60) == 0
    finally:
        if driver.poll() is None:
            driver.kill()
