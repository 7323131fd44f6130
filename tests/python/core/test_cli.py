"""The `oxray` command's handling of secrets and bad input: the token never
shows in any process's argv, out-of-range values and a shared state dir get a
clear one-line error, and `oxray stop` signals only the processes it started."""

import glob
import json
import os
import secrets
import socket
import subprocess
import sys

import psutil
import pytest

import oxray as ray
from oxray_testutil import wait_until

OXRAY = [sys.executable, "-m", "oxray.scripts.cli"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Host:
    def __init__(self, root):
        self.root = str(root)
        self.env = {**os.environ, "OXRAY_TEMP_DIR": self.root}
        self.env.pop("OXRAY_TOKEN", None)

    def cli(self, *args, env=None, input=None):
        return subprocess.run(
            OXRAY + list(args),
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=120,
            input=input,
        )

    def stop(self):
        for record in self.records():
            try:
                psutil.Process(record["pid"]).kill()
            except psutil.NoSuchProcess:
                pass
        self.cli("stop", "--force")

    def records(self):
        return [json.loads(open(p).read()) for p in glob.glob(os.path.join(self.root, "nodes", "*.json"))]


@pytest.fixture
def host(tmp_path, monkeypatch):
    if ray.is_initialized():
        ray.shutdown()
    monkeypatch.setenv("OXRAY_TEMP_DIR", str(tmp_path / "oxray"))
    monkeypatch.delenv("OXRAY_ADDRESS", raising=False)
    monkeypatch.delenv("OXRAY_TOKEN", raising=False)
    h = Host(tmp_path / "oxray")
    try:
        yield h
    finally:
        if ray.is_initialized():
            ray.shutdown()
        h.stop()


def _argv_with(text):
    """Every process whose command line contains `text`."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if text in cmdline:
            found.append((proc.info["pid"], cmdline))
    return found


def test_the_token_never_appears_in_argv(host, tmp_path, monkeypatch):
    token = secrets.token_hex(32)
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    port = free_port()
    head = host.cli(
        "start",
        "--head",
        "--dashboard-port",
        "0",
        "--port",
        str(port),
        "--num-cpus",
        "1",
        "--token-file",
        str(token_file),
    )
    assert head.returncode == 0, head.stderr
    assert "--token=" not in head.stdout and "--token-file" in head.stdout, head.stdout
    # A node that joins with the token on stdin, and one in the foreground (--block) with it in the environment.
    node = host.cli("start", "--address", f"127.0.0.1:{port}", "--num-cpus", "1", "--token-file", "-", input=token)
    assert node.returncode == 0, node.stderr
    blocking = subprocess.Popen(
        OXRAY + ["start", "--address", f"127.0.0.1:{port}", "--num-cpus", "1", "--block"],
        env={**host.env, "OXRAY_TOKEN": token},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(
            lambda: f"3 nodes recorded (the blocking start: {blocking.poll()})",
            lambda: len(host.records()) == 3,
            timeout=60,
        )
        monkeypatch.setenv("OXRAY_TOKEN", token)
        ray.init(address=f"127.0.0.1:{port}")

        @ray.remote(num_cpus=1)
        def pid():
            return os.getpid()

        assert len(ray.get([pid.remote() for _ in range(6)])) == 6
        assert _argv_with(token) == []
    finally:
        blocking.terminate()
        blocking.wait(60)


def test_a_token_on_the_command_line_warns(host):
    token = secrets.token_hex(32)
    started = host.cli(
        "start", "--head", "--dashboard-port", "0", "--port", str(free_port()), "--num-cpus", "1", "--token", token
    )
    assert started.returncode == 0, started.stderr
    assert "--token" in started.stderr and "ps" in started.stderr and "--token-file" in started.stderr, started.stderr
    assert token not in started.stdout


def test_a_missing_or_unsafe_token_file_is_an_error(host, tmp_path):
    missing = host.cli(
        "start", "--head", "--dashboard-port", "0", "--port", str(free_port()), "--token-file", str(tmp_path / "nope")
    )
    assert missing.returncode == 1 and str(tmp_path / "nope") in missing.stderr, missing.stderr
    shared = tmp_path / "shared-token"
    shared.write_text("x" * 64)
    shared.chmod(0o644)
    unsafe = host.cli(
        "start", "--head", "--dashboard-port", "0", "--port", str(free_port()), "--token-file", str(shared)
    )
    assert unsafe.returncode == 1 and str(shared) in unsafe.stderr and "chmod 600" in unsafe.stderr, unsafe.stderr


@pytest.mark.parametrize("port", ["99999", "-1", "http"])
def test_an_out_of_range_port_is_a_usage_error(host, port):
    started = host.cli("start", "--head", "--dashboard-port", "0", "--port", port)
    assert started.returncode == 2, started.stderr
    assert "Traceback" not in started.stderr
    assert port in started.stderr and "0-65535" in started.stderr, started.stderr
    assert host.records() == []


def test_a_second_head_on_the_same_state_dir_names_it(host):
    first = host.cli("start", "--head", "--dashboard-port", "0", "--port", str(free_port()), "--num-cpus", "1")
    assert first.returncode == 0, first.stderr
    second = host.cli("start", "--head", "--dashboard-port", "0", "--port", str(free_port()), "--num-cpus", "1")
    assert second.returncode == 1
    state_dir = os.path.join(host.root, "state")
    assert state_dir in second.stderr and "--state-dir" in second.stderr, second.stderr
    assert len(host.records()) == 1


def test_stop_does_not_signal_a_reused_pid(host):
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        os.makedirs(os.path.join(host.root, "nodes"), mode=0o700)
        os.chmod(host.root, 0o700)
        # A record of an oxray node that died, whose pid now belongs to another process.
        record = {"pid": stranger.pid, "create_time": psutil.Process(stranger.pid).create_time() - 100, "head": True}
        path = os.path.join(host.root, "nodes", f"{stranger.pid}.json")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            json.dump(record, f)
        stopped = host.cli("stop", "--grace-period", "1")
        assert stopped.returncode == 0, stopped.stderr
        assert stranger.poll() is None, "oxray stop killed a process it did not start"
        assert not os.path.exists(path), "the stale record is still there"
    finally:
        stranger.kill()
        stranger.wait()
