"""The Jobs API under the audit's attacks and faults (issue 30), over a real socket to an
`oxray start --head`: submission ids that could break out of a URL or a file name, two
submits racing with one id, commands and variables that could never run, a reused id
inheriting a deleted job's log, and a 300 MiB log read whole, tailed and summed up with
the head's memory bounded."""

import base64
import concurrent.futures
import http.client
import json
import os
import shlex
import socket
import struct
import sys
import threading

import psutil
import pytest

from oxray.job_submission import JobStatus, JobSubmissionClient
from oxray_testutil import RecordingServer, http_call, wait_job_terminal, wait_until

pytestmark = pytest.mark.timeout(240)


def submit(head, body: dict):
    return http_call(
        "POST", f"{head.dashboard_url}/api/jobs/", token=head.token, body=json.dumps(body).encode(), headers={}
    )


def jobs_client(head):

    return JobSubmissionClient(head.dashboard_url, headers={"Authorization": f"Bearer {head.token}"})


def test_ids_that_could_leave_a_url_or_a_file_name_are_400(head):
    # The stored XSS's id (backslashes are slashes to a browser), NUL, an id too long to ever
    # delete (414 on DELETE), markup: each is refused before anything is stored.
    for bad in [r"x\..\..\..\api\v0\logs\file?submission_id=other", "nul\0id", "y" * 100_000, "<b>x</b>", "a b"]:
        status, text = submit(head, {"entrypoint": "true", "submission_id": bad})
        assert status == 400 and "not a valid id" in text, (bad[:40], status, text[:300])
    status, text = http_call("GET", f"{head.dashboard_url}/api/jobs/", token=head.token)
    assert status == 200 and json.loads(text) == [], "nothing was recorded"
    status, text = submit(head, {"entrypoint": "true", "submission_id": "raysubmit_Ok-1.2"})
    assert status == 200 and json.loads(text)["submission_id"] == "raysubmit_Ok-1.2", text


def test_commands_and_variables_that_could_never_run_are_400_naming_the_field(head):
    status, text = submit(head, {"entrypoint": "echo " + "x" * 1_900_000})
    assert status == 400 and "entrypoint is" in text and "bytes" in text, text[:300]
    status, text = submit(head, {"entrypoint": "true", "runtime_env": {"env_vars": {"A=B": "1"}}})
    assert status == 400 and "env_vars" in text and "A=B" in text, text


def test_two_submits_with_one_id_never_both_run_and_no_reservation_leaks(head):
    rounds, winners = 40, []
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for i in range(rounds):
            body = {"entrypoint": "true", "submission_id": f"race-{i}", "entrypoint_num_cpus": 1}
            replies = list(pool.map(lambda b: submit(head, b), [body, body]))
            accepted = [r for r in replies if r[0] == 200]
            refused = [r for r in replies if r[0] != 200]
            assert len(accepted) == 1 and "already exists" in refused[0][1], (i, replies)
            winners.append(f"race-{i}")
    client = jobs_client(head)
    for job_id in winners:
        assert wait_job_terminal(client, job_id) == JobStatus.SUCCEEDED, client.get_job_info(job_id)
    # Every reservation was given back: a job that needs both of the head's CPUs still starts.
    whole = client.submit_job(entrypoint="true", entrypoint_num_cpus=2)
    assert wait_job_terminal(client, whole) == JobStatus.SUCCEEDED


def test_a_reused_id_starts_a_log_of_its_own(head):
    client = jobs_client(head)
    first = client.submit_job(entrypoint="echo from-the-first-job", submission_id="reused")
    assert wait_job_terminal(client, first) == JobStatus.SUCCEEDED
    assert "from-the-first-job" in client.get_job_logs(first)
    client.delete_job(first)
    again = client.submit_job(entrypoint="echo from-the-second-job", submission_id="reused")
    assert wait_job_terminal(client, again) == JobStatus.SUCCEEDED
    logs = wait_until("the second job's output", lambda: client.get_job_logs(again) or None)
    assert "from-the-second-job" in logs and "from-the-first-job" not in logs, logs


def _tail_handshake(head, job_id, timeout) -> socket.socket:
    """A socket that has sent a job's `/logs/tail` WebSocket handshake, with the token."""
    s = socket.create_connection(("127.0.0.1", head.dashboard_port), timeout=timeout)
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(
        (
            f"GET /api/jobs/{job_id}/logs/tail HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\n"
            f"Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {key}\r\n"
            f"Authorization: Bearer {head.token}\r\n\r\n"
        ).encode()
    )
    return s


def _tail_bytes(head, job_id) -> int:
    """Reads a job's `/logs/tail` WebSocket to its close (a client of a few lines: the frames of
    a server are not masked); the payload bytes it carried."""
    with _tail_handshake(head, job_id, timeout=120) as s:
        stream = s.makefile("rb")
        status = stream.readline()
        assert b" 101 " in status, status
        while stream.readline() not in (b"\r\n", b""):
            pass
        carried = 0
        while True:
            first, second = stream.read(2)
            length = second & 0x7F
            if length == 126:
                (length,) = struct.unpack("!H", stream.read(2))
            elif length == 127:
                (length,) = struct.unpack("!Q", stream.read(8))
            payload = stream.read(length)
            if first & 0x0F == 0x8:  # close
                return carried
            carried += len(payload)


def test_a_300_mib_log_is_read_tailed_and_summed_up_with_the_heads_memory_bounded(head):
    head_process = psutil.Process(int(next(r for r in head.records() if r["head"])["pid"]))
    client = jobs_client(head)
    script = (
        "import sys\n"
        "line = 'x' * 1023 + '\\n'\n"
        "for _ in range(300 * 1024): sys.stdout.write(line)\n"
        "print('the last line', flush=True)\n"
        "sys.exit(3)\n"
    )
    job_id = client.submit_job(entrypoint=f"{shlex.quote(sys.executable)} -c {shlex.quote(script)}")
    size = 300 * 1024 * 1024 + len("the last line\n")
    peak, done = [head_process.memory_info().rss], threading.Event()

    def sample():  # the head's resident memory while it reads the log (a reading, not a wait)
        while not done.is_set():
            peak.append(head_process.memory_info().rss)
            done.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        # The failed job's message holds its last lines, read from the end of the log.
        assert wait_job_terminal(client, job_id, timeout=180) == JobStatus.FAILED
        assert "the last line" in client.get_job_info(job_id).message
        baseline = head_process.memory_info().rss
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            tails = [pool.submit(_tail_bytes, head, job_id) for _ in range(3)]
            connection = http.client.HTTPConnection("127.0.0.1", head.dashboard_port, timeout=120)
            connection.request("GET", f"/api/jobs/{job_id}/logs", headers={"Authorization": f"Bearer {head.token}"})
            reply = connection.getresponse()
            assert reply.status == 200
            first = reply.read(64)
            prefix = first[: first.index(b"x")]
            assert prefix.replace(b" ", b"") == b'{"logs":"', first
            received, last = len(first), first
            while piece := reply.read(1 << 20):
                received, last = received + len(piece), piece
            assert last.endswith(b'the last line\\n"}'), last[-40:]
            newlines = 300 * 1024 + 1  # each escaped as two bytes
            assert received == len(prefix) + size + newlines + len('"}'), received
            assert [t.result() for t in tails] == [size] * 3
    finally:
        done.set()
        sampler.join()
    grown = max(peak) - baseline
    print(f"head RSS: {baseline >> 20} MiB before the reads, {max(peak) >> 20} MiB at the peak")
    assert grown < 64 << 20, f"the head grew by {grown >> 20} MiB reading a 300 MiB log four times at once"


def _open_tail(head, job_id):
    """A `/logs/tail` handshake left open: (the status line, the socket)."""
    s = _tail_handshake(head, job_id, timeout=60)
    return s.recv(4096).split(b"\r\n", 1)[0], s


def test_log_tails_are_capped_and_a_closed_one_gives_its_place_back(head):
    client = jobs_client(head)
    job_id = client.submit_job(entrypoint="echo started && sleep 600")
    wait_until("the job to run", lambda: client.get_job_status(job_id) == JobStatus.RUNNING)
    opened = []
    try:
        for _ in range(64):
            status, s = _open_tail(head, job_id)
            opened.append(s)
            assert b" 101 " in status, status
        status, s = _open_tail(head, job_id)
        s.close()
        assert b" 503 " in status, status
        opened.pop().close()  # the client goes away: the server notices and frees the place

        def a_place_again():
            status, s = _open_tail(head, job_id)
            if b" 101 " in status:
                opened.append(s)
                return True
            s.close()
            return False

        wait_until("a tail's place after one closed", a_place_again, timeout=30, interval=0.1)
    finally:
        for s in opened:
            s.close()
        client.stop_job(job_id)


def _jobs_api_lookalike() -> RecordingServer:
    """Another HTTP server (not this host's cluster) answering as a Jobs API would."""
    version = b'{"version": "4", "ray_version": "2.60.0"}'
    return RecordingServer(lambda path: ("application/json", b"[]" if path.startswith("/api/jobs") else version))


def test_clients_send_this_hosts_token_only_to_this_hosts_cluster(head, monkeypatch):
    import subprocess

    for var in ("OXRAY_TOKEN", "RAY_AUTH_TOKEN", "RAY_ADDRESS", "RAY_API_SERVER_ADDRESS"):
        monkeypatch.delenv(var, raising=False)
    other = _jobs_api_lookalike()
    try:
        JobSubmissionClient(other.url).list_jobs()
        cli = [sys.executable, "-m", "oxray.scripts.cli", "job", "list", "--address", other.url]
        listed = subprocess.run(cli, env={**os.environ}, capture_output=True, text=True, timeout=120)
        assert listed.returncode == 0, listed.stderr
        sent = other.sent("Authorization")
        assert len(sent) >= 2 and not any(sent), sent
        # A token the caller gives goes where the caller sends it.
        JobSubmissionClient(other.url, headers={"Authorization": "Bearer given"}).list_jobs()
        assert other.sent("Authorization")[-1] == "Bearer given"
    finally:
        other.close()
    # This host's cluster, named by either loopback name, still gets its token without being told.
    for url in (head.dashboard_url, head.dashboard_url.replace("127.0.0.1", "localhost")):
        assert JobSubmissionClient(url).list_jobs() == []


def test_two_hundred_half_sent_requests_neither_block_others_nor_stay_open(head):
    slow = []
    try:
        for _ in range(200):
            s = socket.create_connection(("127.0.0.1", head.dashboard_port), timeout=60)
            s.sendall(b"GET /api/jobs/ HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # no token, never finished
            slow.append(s)
        assert http_call("GET", f"{head.dashboard_url}/api/version", token=head.token)[0] == 200
        for s in slow:
            s.setblocking(False)

        def closed(s):
            try:
                return s.recv(4096) == b""  # the server's FIN
            except BlockingIOError:
                return False  # still open
            except OSError:
                return True  # reset

        def all_closed():
            return sum(1 for s in slow if closed(s)) == len(slow) or None

        # The head's header timeout (10 s) closes every one of them.
        wait_until("the half-sent requests' connections to be closed", all_closed, timeout=90, interval=0.5)
    finally:
        for s in slow:
            s.close()


def _zipped_app(version: str) -> bytes:
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("app/main.py", f"print('running {version}')\n")
    return buffer.getvalue()


def test_a_new_version_or_another_buckets_archive_of_one_name_runs_its_own_code(moto_s3, tmp_path, monkeypatch):
    from cli_cluster import running_cluster

    moto_s3.create_bucket(Bucket="oxray-other")
    moto_s3.put_object(Bucket="oxray-test", Key="jobs/app.zip", Body=_zipped_app("v1"))
    with running_cluster(tmp_path / "oxray", monkeypatch) as cluster:
        cluster.start_head(num_cpus=1)
        client = jobs_client(cluster)

        def output(uri):
            job_id = client.submit_job(entrypoint="python main.py", runtime_env={"working_dir": uri})
            assert wait_job_terminal(client, job_id) == JobStatus.SUCCEEDED, client.get_job_info(job_id).message
            return client.get_job_logs(job_id)

        assert output("s3://oxray-test/jobs/app.zip") == "running v1\n"
        moto_s3.put_object(Bucket="oxray-test", Key="jobs/app.zip", Body=_zipped_app("v2"))  # a new version
        assert output("s3://oxray-test/jobs/app.zip") == "running v2\n"
        moto_s3.put_object(Bucket="oxray-other", Key="jobs/app.zip", Body=_zipped_app("v3"))  # another bucket's
        assert output("s3://oxray-other/jobs/app.zip") == "running v3\n"
        assert output("s3://oxray-test/jobs/app.zip") == "running v2\n"


class _SilentIndex:
    """A package index that takes connections and never answers: pip waits on it for as long as
    its own timeout allows (here 600 s), as a stuck mirror makes it."""

    def __init__(self):
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(64)
        self.port = self.server.getsockname()[1]
        self.held = []
        threading.Thread(target=self._hold, daemon=True).start()

    def _hold(self):
        while True:
            try:
                self.held.append(self.server.accept()[0])
            except OSError:
                return

    def pip_runtime_env(self, **config):
        options = ["--index-url", f"http://127.0.0.1:{self.port}/simple", "--timeout", "600", "--retries", "0"]
        env = {"pip": {"packages": ["oxray-never-answered"], "pip_install_options": options}}
        return {**env, "config": config} if config else env

    def pips(self):
        """The pip processes asking this index."""
        marker = f"127.0.0.1:{self.port}"
        found = []
        for proc in psutil.process_iter(["cmdline"]):
            try:
                if any(marker in part for part in proc.info["cmdline"] or []):
                    found.append(proc)
            except psutil.Error:
                continue
        return found

    def close(self):
        self.server.close()
        for s in self.held:
            s.close()


def test_runtime_env_setup_is_killed_by_stop_timeout_and_shutdown_and_a_stopped_job_stays_stopped(head):
    client = jobs_client(head)
    index = _SilentIndex()
    try:
        stuck = client.submit_job(entrypoint="echo never", runtime_env=index.pip_runtime_env())
        wait_until("pip to ask the silent index", index.pips, timeout=120)
        assert client.stop_job(stuck)
        assert wait_job_terminal(client, stuck, timeout=60) == JobStatus.STOPPED
        wait_until("the stopped job's pip to be gone", lambda: not index.pips(), timeout=60)
        # Its own deadline (Ray's runtime_env config) ends a setup too, as a failure that says so.
        late = client.submit_job(entrypoint="echo never", runtime_env=index.pip_runtime_env(setup_timeout_seconds=3))
        assert wait_job_terminal(client, late, timeout=120) == JobStatus.FAILED
        info = client.get_job_info(late)
        assert info.error_type == "RUNTIME_ENV_SETUP_FAILURE" and "timed out after 3 seconds" in info.message, info
        wait_until("the timed-out job's pip to be gone", lambda: not index.pips(), timeout=60)
        # The head's shutdown kills a setup under way, and a restarted head does not start the
        # stopped job again.
        pending = client.submit_job(entrypoint="echo never", runtime_env=index.pip_runtime_env())
        wait_until("pip to ask the silent index again", index.pips, timeout=120)
        head.cli("stop")
        wait_until("pip to be gone after oxray stop", lambda: not index.pips(), timeout=60)
        head.start_head(num_cpus=2)
        client = jobs_client(head)
        assert client.get_job_status(stuck) == JobStatus.STOPPED
        assert client.get_job_status(pending) == JobStatus.STOPPED, client.get_job_info(pending)
        assert not index.pips(), "a restarted head set a stopped job up again"
    finally:
        index.close()
