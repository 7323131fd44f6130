"""Fixtures for the operator's tests: the operator binary, an emulated API
server with a fake kubelet that runs the pods as real `oxray start`
processes, and the operator running against it."""

import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from fake_kubelet import FakeKubelet  # noqa: E402
from k8s_paths import OPERATOR, REPO  # noqa: E402
from kube_emulator import EmulatedApiServer, Kube  # noqa: E402


@pytest.fixture(scope="session")
def operator_binary():
    """Builds the operator (debug, sharing `cargo test`'s artifacts)."""
    subprocess.run(["cargo", "build", "--quiet", "-p", "oxray-operator"], cwd=REPO, check=True, timeout=1800)
    return OPERATOR


class Emulated:
    """The API server, the kubelet, the operator and a client, together."""

    def __init__(self, api, kubelet, operator, log_path):
        self.api = api
        self.kube = Kube(api.url)
        self.kubelet = kubelet
        self.operator = operator
        self.log_path = log_path

    def operator_log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def diagnostics(self):
        """What to show when a wait fails: the operator's log, the pods' logs, the kubelet's errors."""
        pods = "\n".join(f"--- {name}\n{self.kubelet.log_of(name)[-2000:]}" for name in self.kubelet.pods)
        return f"operator log:\n{self.operator_log()[-4000:]}\npods:\n{pods}\nkubelet errors: {self.kubelet.errors[:5]}"


@pytest.fixture
def emulated(operator_binary, tmp_path):
    pods_root = tmp_path / "pods"
    pods_root.mkdir(mode=0o700)
    log_path = tmp_path / "operator.log"
    with EmulatedApiServer() as api, FakeKubelet(Kube(api.url), pods_root) as kubelet:
        config = api.kubeconfig(tmp_path / "kubeconfig")
        env = {**os.environ, "KUBECONFIG": config, "RUST_LOG": "info,kube=warn"}
        with open(log_path, "w") as log:
            operator = subprocess.Popen(
                [operator_binary, "run", "--head-via", "pod-ip", "--poll-seconds", "0.5"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            yield Emulated(api, kubelet, operator, log_path)
        finally:
            operator.terminate()
            try:
                operator.wait(10)
            except subprocess.TimeoutExpired:
                operator.kill()
