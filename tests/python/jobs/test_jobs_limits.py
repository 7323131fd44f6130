"""The Jobs API's guards over a real socket: the token on every route (the log
WebSocket included), uploads checked before they are stored (zip-slip,
symlinks, garbage, size), `env_vars` redacted for browsers, and a head whose
memory stays flat over 1,000 jobs."""

import io
import json
import socket
import zipfile

import psutil
import pytest

from oxray_testutil import http_call, wait_until

pytestmark = pytest.mark.timeout(240)


def call(head, method, path, token=None, body=None, headers=None):
    return http_call(method, head.dashboard_url + path, token=token, body=body, headers=headers)


def raw(head, text: bytes) -> bytes:
    """One raw HTTP exchange (for upgrades and bodies urllib would not send as given)."""
    with socket.create_connection(("127.0.0.1", head.dashboard_port), timeout=60) as s:
        s.sendall(text)
        return s.recv(65536)


ROUTES = [
    ("GET", "/api/version"),
    ("GET", "/api/jobs/"),
    ("POST", "/api/jobs/"),
    ("GET", "/api/jobs/x"),
    ("DELETE", "/api/jobs/x"),
    ("GET", "/api/jobs/x/logs"),
    ("POST", "/api/jobs/x/stop"),
    ("GET", "/api/packages/gcs/x.zip"),
    ("PUT", "/api/packages/gcs/x.zip"),
]


def test_every_route_refuses_a_missing_or_wrong_token(head):
    for method, path in ROUTES:
        body = b"{}" if method in ("POST", "PUT") else None
        assert call(head, method, path, body=body)[0] == 401, (method, path)
        assert call(head, method, path, token="bad", body=body)[0] == 403, (method, path)
    upgrade = (
        "GET /api/jobs/x/logs/tail HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
        "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n{auth}\r\n"
    )
    assert raw(head, upgrade.format(auth="").encode()).startswith(b"HTTP/1.1 401")
    assert raw(head, upgrade.format(auth="Authorization: Bearer bad\r\n").encode()).startswith(b"HTTP/1.1 403")
    good = upgrade.format(auth=f"Authorization: Bearer {head.token}\r\n").encode()
    assert raw(head, good).startswith(b"HTTP/1.1 404"), "a missing job is a 404 before the upgrade"


def _zip(entries) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in entries:
            archive.writestr(name, data)
    return buffer.getvalue()


def test_uploads_that_escape_or_are_not_zips_are_400(head):
    put = lambda name, data: call(head, "PUT", f"/api/packages/gcs/{name}", head.token, data)  # noqa: E731
    assert put("_ray_pkg_good.zip", _zip([("a.py", "print(1)")])) == (200, "")
    assert call(head, "GET", "/api/packages/gcs/_ray_pkg_good.zip", head.token)[0] == 200
    status, text = put("_ray_pkg_slip.zip", _zip([("../../escape.py", "x")]))
    assert status == 400 and "outside the working_dir" in text
    link = zipfile.ZipInfo("link")
    link.external_attr = 0o120777 << 16  # a symlink entry
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(link, "/etc/passwd")
    status, text = put("_ray_pkg_link.zip", buffer.getvalue())
    assert status == 400 and "symlink" in text
    status, text = put("_ray_pkg_junk.zip", b"not a zip at all")
    assert status == 400 and "not a valid zip" in text
    assert call(head, "GET", "/api/packages/gcs/_ray_pkg_slip.zip", head.token)[0] == 404
    assert put("../evil", b"x")[0] in (400, 404)


def test_an_upload_over_the_limit_is_refused_without_buffering_it(head):
    head_process = psutil.Process(int(next(r for r in head.records() if r["head"])["pid"]))
    before = head_process.memory_info().rss
    size = 200 << 20
    request = (
        f"PUT /api/packages/gcs/_ray_pkg_big.zip HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {head.token}\r\n"
        f"Content-Length: {size}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", head.dashboard_port), timeout=60) as s:
        s.sendall(request)
        chunk, sent = b"\0" * (1 << 20), 0
        try:
            while sent < size:
                s.sendall(chunk)
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the head answered and closed before taking it all
        reply = s.recv(65536)
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert head_process.memory_info().rss - before < 64 << 20


def test_browsers_see_env_vars_redacted_and_may_not_submit(head):
    body = json.dumps({"entrypoint": "true", "runtime_env": {"env_vars": {"SECRET": "hunter2"}}}).encode()
    status, reply = call(head, "POST", "/api/jobs/", head.token, body, {"Content-Type": "application/json"})
    assert status == 200
    job = json.loads(reply)["submission_id"]
    browser = {"User-Agent": "Mozilla/5.0 (X11; Linux x86_64)"}
    status, details = call(head, "GET", f"/api/jobs/{job}", head.token, headers=browser)
    assert status == 200 and json.loads(details)["runtime_env"]["env_vars"] == {"SECRET": "<redacted>"}
    status, details = call(head, "GET", f"/api/jobs/{job}", head.token)
    assert json.loads(details)["runtime_env"]["env_vars"] == {"SECRET": "hunter2"}
    assert call(head, "POST", "/api/jobs/", head.token, body, browser)[0] == 405


def test_head_memory_stays_flat_over_a_thousand_jobs(head):
    head_process = psutil.Process(int(next(r for r in head.records() if r["head"])["pid"]))
    headers = {"Content-Type": "application/json"}
    body = json.dumps({"entrypoint": "true"}).encode()

    def run_jobs(n):
        replies = [call(head, "POST", "/api/jobs/", head.token, body, headers) for _ in range(n)]
        ids = {json.loads(reply)["submission_id"] for _, reply in replies}

        def all_succeeded():
            jobs = json.loads(call(head, "GET", "/api/jobs/", head.token)[1])
            return sum(1 for j in jobs if j["submission_id"] in ids and j["status"] == "SUCCEEDED") == n

        wait_until(f"the {n} jobs to succeed", all_succeeded, timeout=180, interval=0.2)

    run_jobs(200)  # warm up: allocator pools, the store's first pages
    before = head_process.memory_info().rss
    run_jobs(1000)
    grown = head_process.memory_info().rss - before
    assert grown < 16 << 20, f"the head grew by {grown >> 20} MiB over 1,000 jobs"
    assert len(json.loads(call(head, "GET", "/api/jobs/", head.token)[1])) == 1200
