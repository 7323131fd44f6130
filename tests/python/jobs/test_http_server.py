"""The head's HTTP server that `oxray start --head` runs on --dashboard-port: the
cluster token on every route (Ray's 401/403), `/api/version` as Ray's own
`JobSubmissionClient` checks it, and `oxray get-auth-token`."""

import json
import os
import subprocess
import sys

import pytest

from cli_cluster import free_port, running_cluster
from oxray_testutil import http_call

pytestmark = pytest.mark.timeout(180)


def _get(url, token=None, headers=None):
    return http_call("GET", url, token=token, headers=headers)


def test_start_prints_the_address_and_get_auth_token_prints_the_token(tmp_path, monkeypatch):
    with running_cluster(tmp_path / "oxray", monkeypatch) as cluster:
        started = cluster.start_head(num_cpus=1)
        assert f"Jobs API (and dashboard) at {cluster.dashboard_url}" in started.stdout
        printed = cluster.cli("get-auth-token").stdout.strip()
        assert printed == cluster.token


def test_get_auth_token_without_a_cluster_names_the_fix(tmp_path, monkeypatch):
    with running_cluster(tmp_path / "oxray", monkeypatch) as cluster:
        missing = cluster.cli("get-auth-token", check=False)
        assert missing.returncode == 1
        assert "oxray start --head" in missing.stderr


def test_every_route_needs_the_token(head):
    url = head.dashboard_url
    assert _get(f"{url}/api/version") == (401, "Unauthorized: Missing authentication token")
    assert _get(f"{url}/api/version", token="wrong") == (403, "Forbidden: Invalid authentication token")
    for path in ("/api/jobs/", "/api/jobs/raysubmit_x", "/api/packages/gcs/x.zip", "/nowhere"):
        assert _get(url + path)[0] == 401, path
    status, body = _get(f"{url}/api/version", token=head.token)
    assert status == 200
    version = json.loads(body)
    assert version["version"] == "4" and version["ray_version"].startswith("2.")
    assert _get(f"{url}/api/healthz") == (200, "success")


def test_the_dashboard_port_in_use_is_a_clear_error(tmp_path, monkeypatch):
    import socket

    with socket.socket() as taken, running_cluster(tmp_path / "oxray", monkeypatch) as cluster:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = cluster.cli("start", "--head", "--port", str(free_port()), "--dashboard-port", str(port), check=False)
        assert started.returncode == 1
        assert f"port {port} on 127.0.0.1 is already in use" in started.stderr
        assert "--dashboard-port" in started.stderr


RAY_CLIENT = """
import sys
from ray.job_submission import JobSubmissionClient
try:
    client = JobSubmissionClient(sys.argv[1])
    print("version", client.get_version())
except Exception as e:
    print("refused", type(e).__name__, " ".join(str(e).split()))
"""


def _ray_client(url, env):
    pytest.importorskip("ray.job_submission")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "OXRAY_"))}
    proc = subprocess.run(
        [sys.executable, "-c", RAY_CLIENT, url], env={**base, **env}, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


def test_rays_own_job_submission_client_connects_with_the_token(head):
    """Ray 2.60's `JobSubmissionClient` checks `/api/version` in its constructor,
    sending the token from RAY_AUTH_TOKEN when RAY_AUTH_MODE=token."""
    ok = _ray_client(head.dashboard_url, {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": head.token})
    assert ok == "version 4"
    wrong = _ray_client(head.dashboard_url, {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "f" * 64})
    assert wrong.startswith("refused"), wrong
    assert "AuthenticationError" in wrong and "token is invalid" in wrong, wrong
    without = _ray_client(head.dashboard_url, {})
    assert without.startswith("refused AuthenticationError"), without
    assert "Missing authentication token" in without, without


def test_an_embedded_cluster_serves_http_only_when_asked():
    import oxray as ray

    if ray.is_initialized():
        ray.shutdown()
    context = ray.init(num_cpus=1)
    try:
        assert context.dashboard_url == ""
    finally:
        ray.shutdown()
    port = free_port()
    context = ray.init(num_cpus=1, dashboard_port=port)
    try:
        assert context.dashboard_url == f"127.0.0.1:{port}"
        from oxray._private.state import STATE

        status, body = _get(f"http://127.0.0.1:{port}/api/version", token=STATE.cluster.token)
        assert status == 200 and json.loads(body)["version"] == "4"
        # What init() returns (a notebook shows it) holds no token: the login link is asked for.
        token = STATE.cluster.token
        assert token not in repr(context) and all(token not in str(v) for v in vars(context).values())
        assert _get(f"http://127.0.0.1:{port}/api/version")[0] == 401
    finally:
        ray.shutdown()
    with pytest.raises(ValueError, match="include_dashboard=False"):
        ray.init(num_cpus=1, include_dashboard=False, dashboard_port=port)
    with pytest.raises(ValueError, match="dashboard_port='x'"):
        ray.init(num_cpus=1, dashboard_port="x")
    assert not ray.is_initialized()
