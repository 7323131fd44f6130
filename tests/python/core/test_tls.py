"""TLS between hosts: a CLI cluster started with `--tls-*` encrypts every
connection (checked on the wire through a recording TCP proxy), refuses
plaintext clients, and with `--tls-client-auth require` refuses clients that
have no certificate the CA signed. Certificates are generated here."""

import http.client
import os
import socket
import threading

import pytest

import oxray as ray
from cli_cluster import free_port, running_cluster
from pki_testutil import write_test_pki

TLS_VARS = ("OXRAY_TLS_CERT", "OXRAY_TLS_KEY", "OXRAY_TLS_CA", "OXRAY_TLS_CLIENT_AUTH")


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """A CA, and a certificate it signed for 127.0.0.1 that nodes and clients share."""
    return write_test_pki(tmp_path_factory.mktemp("certs"))


class RecordingProxy:
    """Forwards one TCP port to another and keeps every byte the client sent."""

    def __init__(self, target_port):
        self.target = ("127.0.0.1", target_port)
        self.sent = bytearray()
        self.lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, src, dst, record):
        try:
            while data := src.recv(65536):
                if record:
                    with self.lock:
                        self.sent += data
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.listener.close()


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    with running_cluster(tmp_path / "oxray", monkeypatch, unset=TLS_VARS + ("OXRAY_TOKEN",)) as local:
        yield local


def tls_flags(certs, client_auth=None):
    flags = ["--tls-cert", certs["cert"], "--tls-key", certs["key"], "--tls-ca", certs["ca"]]
    return flags + (["--tls-client-auth", client_auth] if client_auth else [])


def use_tls(monkeypatch, certs, *, identity=True, ca="ca"):
    monkeypatch.setenv("OXRAY_TLS_CA", certs[ca])
    if identity:
        monkeypatch.setenv("OXRAY_TLS_CERT", certs["cert"])
        monkeypatch.setenv("OXRAY_TLS_KEY", certs["key"])


@ray.remote
def node_of():
    return os.environ["OXRAY_NODE_ID"]


MARKER = b"cleartext-marker:" + b"0123456789" * 8


@ray.remote
def echo(value):
    return value


@ray.remote
def total(values):
    return sum(values)


def test_plaintext_cluster_shows_the_token_on_the_wire(cluster, monkeypatch):
    """The control case: without TLS the proxy sees a task's argument, so the TLS test below can fail."""
    cluster.start_head(num_cpus=1)
    proxy = RecordingProxy(cluster.port)
    monkeypatch.setenv("OXRAY_TOKEN", cluster.token)
    try:
        ray.init(address=proxy.address)
        assert ray.get(echo.remote(MARKER)) == MARKER
        ray.shutdown()
        assert MARKER in bytes(proxy.sent) and b"PRI * HTTP/2.0" in bytes(proxy.sent)
    finally:
        proxy.close()


def test_tls_cluster_encrypts_every_connection_and_refuses_plaintext(cluster, certs, monkeypatch):
    cluster.cli(*cluster_start_args(cluster), *tls_flags(certs))
    cluster.cli(
        "start", "--address", cluster.address, "--num-cpus", "1", "--resources", '{"node_b": 1}',
        *tls_flags(certs), env={**cluster.env, "OXRAY_TOKEN": cluster.token},
    )  # fmt: skip

    # A plaintext driver is refused with the fix named, not hung.
    with pytest.raises(ConnectionError, match="OXRAY_TLS_CA"):
        ray.init(address=cluster.address)
    assert not ray.is_initialized()

    use_tls(monkeypatch, certs)
    monkeypatch.setenv("OXRAY_TOKEN", cluster.token)
    proxy = RecordingProxy(cluster.port)
    try:
        ray.init(address=proxy.address)
        assert ray.get(echo.remote(MARKER)) == MARKER
        # Both nodes run work, so node-to-node and head links are TLS too.
        nodes = {ray.get(node_of.options(resources={"node_b": 1}).remote()), ray.get(node_of.remote())}
        assert len([n for n in ray.nodes() if n["Alive"]]) == 2 and len(nodes) >= 1
        big = ray.put(b"x" * (8 << 20))
        assert ray.get(total.options(resources={"node_b": 1}).remote([len(ray.get(big))])) == 8 << 20
        ray.shutdown()
        sent = bytes(proxy.sent)
        assert sent[:1] == b"\x16", "the first bytes are a TLS handshake record"
        assert MARKER not in sent
        assert b"PRI * HTTP/2.0" not in sent, "no cleartext HTTP/2 preface"
    finally:
        proxy.close()

    # A client that trusts another CA refuses the cluster's certificate.
    use_tls(monkeypatch, certs, identity=False, ca="other_ca")
    with pytest.raises(ConnectionError, match="UnknownIssuer"):
        ray.init(address=cluster.address)


def test_mutual_tls_refuses_clients_without_a_certificate(cluster, certs, monkeypatch):
    cluster.cli(*cluster_start_args(cluster), *tls_flags(certs, client_auth="require"))
    use_tls(monkeypatch, certs, identity=False)
    # The server's refusal reaches the client as a TLS alert or, when it closes
    # the connection first, as a broken pipe: either way the driver is refused.
    with pytest.raises(ConnectionError, match=cluster.address):
        ray.init(address=cluster.address)
    assert not ray.is_initialized()
    use_tls(monkeypatch, certs, identity=True)
    ray.init(address=cluster.address)
    assert ray.get(total.remote([1, 2, 3])) == 6


def test_bad_tls_options_name_the_problem(cluster, certs):
    missing = cluster.cli(*cluster_start_args(cluster), "--tls-cert", "/nonexistent.pem", check=False)
    assert missing.returncode != 0 and "--tls-cert" in missing.stderr and "/nonexistent.pem" in missing.stderr
    half = cluster.cli(*cluster_start_args(cluster), "--tls-cert", certs["cert"], "--tls-ca", certs["ca"], check=False)
    assert half.returncode != 0 and "OXRAY_TLS_KEY" in half.stderr, half.stderr
    mismatched = cluster.cli(
        *cluster_start_args(cluster), "--tls-cert", certs["cert"], "--tls-key", certs["ca"], "--tls-ca", certs["ca"],
        check=False,
    )  # fmt: skip
    assert mismatched.returncode != 0 and "OXRAY_TLS" in mismatched.stderr, mismatched.stderr


def cluster_start_args(cluster):
    return [
        "start",
        "--head",
        "--dashboard-port",
        "0",
        "--port",
        str(cluster.port),
        "--num-cpus",
        "1",
        "--object-store-memory",
        str(256 << 20),
    ]


def test_a_tls_clusters_http_server_speaks_https_with_its_certificate(cluster, certs, monkeypatch):
    import ssl
    import urllib.error
    import urllib.request

    port = free_port()
    args = [a if a != "0" else str(port) for a in cluster_start_args(cluster)]  # the dashboard port
    cluster.cli(*args, *tls_flags(certs))
    verified = ssl.create_default_context(cafile=certs["ca"])
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/api/healthz", context=verified, timeout=30) as reply:
        assert reply.read() == b"success"
    # The token never crosses in the clear: plain HTTP is not answered.
    with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/api/healthz", timeout=30).read()
    # oxray's clients verify an https:// head against the cluster's CA: the SDK (given the CA, or
    # OXRAY_TLS_CA) and the State API, which find the head's https:// address on this host.
    from oxray.job_submission import JobSubmissionClient
    from oxray.util.state import list_nodes

    token = {"Authorization": f"Bearer {cluster.token}"}
    url = f"https://127.0.0.1:{port}"
    assert JobSubmissionClient(url, headers=token, verify=certs["ca"]).list_jobs() == []
    monkeypatch.setenv("OXRAY_TLS_CA", certs["ca"])
    monkeypatch.setenv("OXRAY_TOKEN", cluster.token)
    assert JobSubmissionClient().list_jobs() == []
    assert len(list_nodes()) == 1
    with pytest.raises(ValueError, match="verify=False"):
        JobSubmissionClient(url, verify=False)
    # A certificate no one the client trusts signed is refused by the client.
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(
            f"https://127.0.0.1:{port}/api/healthz", context=ssl.create_default_context(), timeout=30
        )
