"""Small helpers shared by the oxray tests (used by the driver and by tasks).

Everything here is plain Python with no dependency on oxray, so that a
worker process can import it while running a task.
"""

import contextlib
import io
import os
import sys
import time
import uuid

SHM_DIR = "/dev/shm"


class WaitTimeout(AssertionError):
    """`wait_until` ran out of time: the message names what it waited for and the last value seen."""


def wait_until(what, check, timeout=60.0, interval=0.05):
    """Polls ``check`` until it returns a truthy value, and returns that value.

    Raises ``WaitTimeout`` (an AssertionError) naming ``what`` and the last value ``check``
    returned once ``timeout`` seconds pass. ``what`` is a description, or a callable that
    makes one (called only on a timeout, for details such as the cluster's state then).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            description = what() if callable(what) else what
            last = repr(value)
            if len(last) > 2000:
                last = last[:2000] + "..."
            raise WaitTimeout(f"timed out after {timeout:g} s waiting for {description}; last saw {last}")
        time.sleep(interval)


class _Kept(io.TextIOBase):
    """A `sys.stdout`/`sys.stderr` that keeps what is written and passes it on."""

    def __init__(self, original, parts):
        self._original = original
        self._parts = parts

    def write(self, text):
        self._parts.append(text)  # one append: whole under the GIL, whichever thread writes
        return self._original.write(text)

    def flush(self):
        self._original.flush()

    @property
    def encoding(self):
        return getattr(self._original, "encoding", "utf-8")


class PrintedOutput:
    """What was printed through `sys.stdout` and `sys.stderr` (see `printed_output`)."""

    def __init__(self):
        self.out_parts, self.err_parts = [], []

    @property
    def out(self):
        return "".join(self.out_parts)

    @property
    def err(self):
        return "".join(self.err_parts)


@contextlib.contextmanager
def printed_output():
    """Keeps everything printed through `sys.stdout` and `sys.stderr` inside the block, whole.

    For output printed by another thread (the runtime prints worker output from its own): polling
    pytest's `readouterr()` empties the capture each time, and a write that lands between its read
    and its truncate is lost. Use it inside the test body: pytest puts its own streams back between
    a test's setup and its call.
    """
    printed = PrintedOutput()
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Kept(sys.stdout, printed.out_parts), _Kept(sys.stderr, printed.err_parts)
    try:
        yield printed
    finally:
        sys.stdout, sys.stderr = saved


class RecordingServer:
    """A web server on another port of this host (as a second local user could run one): it keeps
    the headers of every GET, and answers each with `answer(path)`, a (content type, body bytes)."""

    def __init__(self, answer):
        import http.server
        import threading

        self.requests = []  # each request's headers
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.requests.append(self.headers)
                content_type, body = answer(self.path)
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def sent(self, header, default=None):
        """The value of `header` in each request so far."""
        return [headers.get(header, default) for headers in self.requests]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def file_barrier(directory, n, timeout=30.0):
    """A cross-process barrier on a shared directory.

    Each caller drops a unique file in ``directory`` and waits until at least
    ``n`` callers have arrived; True then. Raises ``WaitTimeout`` when fewer than
    ``n`` callers ran at the same time within ``timeout``.
    """
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, uuid.uuid4().hex), "w") as f:
        f.write(str(os.getpid()))
    return wait_until(
        f"{n} callers at the barrier in {directory}", lambda: len(os.listdir(directory)) >= n, timeout, 0.02
    )


def max_overlap(intervals):
    """Largest number of (start, end) intervals that contain a common instant."""
    events = []
    for start, end in intervals:
        events.append((start, 1))
        events.append((end, -1))
    # Ends sort before starts at the same instant: touching is not overlapping.
    events.sort(key=lambda e: (e[0], e[1]))
    best = cur = 0
    for _, delta in events:
        cur += delta
        best = max(best, cur)
    return best


def pid_alive(pid):
    """True if ``pid`` names a live (non-zombie) process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return False
    # Field 3 (after the parenthesised command name) is the state.
    state = stat[stat.rfind(")") + 2 :].split(" ", 1)[0]
    return state not in ("Z", "X")


def _proc_table():
    """{pid: (ppid, state)} for every process visible in /proc."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        table[int(entry)] = (int(fields[1]), fields[0])
    return table


def live_children(pid=None):
    """Pids of the live (non-zombie) direct children of ``pid`` (default: self)."""
    pid = os.getpid() if pid is None else pid
    return {child for child, (ppid, state) in _proc_table().items() if ppid == pid and state not in ("Z", "X")}


def descendants(pid=None):
    """Pids of all live descendants of ``pid`` (default: self)."""
    pid = os.getpid() if pid is None else pid
    table = _proc_table()
    kids = {}
    for child, (ppid, state) in table.items():
        if state not in ("Z", "X"):
            kids.setdefault(ppid, []).append(child)
    found, todo = set(), [pid]
    while todo:
        for child in kids.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _top_level_shm_name(path):
    prefix = SHM_DIR + "/"
    if not path.startswith(prefix):
        return None
    name = path[len(prefix) :].split("/", 1)[0]
    return name if name.startswith("oxray") else None


def shm_entries_used_by(pids):
    """Top-level /dev/shm/oxray* entries that ``pids`` have mapped or open."""
    names = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps") as f:
                for line in f:
                    parts = line.split(None, 5)
                    if len(parts) == 6:
                        path = parts[5].strip()
                        if path.endswith(" (deleted)"):
                            path = path[: -len(" (deleted)")]
                        name = _top_level_shm_name(path)
                        if name:
                            names.add(name)
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            pass
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        for fd in fds:
            try:
                name = _top_level_shm_name(os.readlink(f"/proc/{pid}/fd/{fd}"))
            except OSError:
                continue
            if name:
                names.add(name)
    return names


def session_shm_entries(extra_pids=()):
    """/dev/shm/oxray* entries used by this process, its descendants and
    ``extra_pids``: the ones that belong to this test session's cluster (other
    oxray clusters on the same machine are left out)."""
    pids = {os.getpid()} | descendants() | set(extra_pids)
    return shm_entries_used_by(pids)


def oxray_shm_entries():
    """Names of the top-level /dev/shm entries that belong to oxray."""
    try:
        return {name for name in os.listdir(SHM_DIR) if name.startswith("oxray")}
    except FileNotFoundError:
        return set()


def oxray_shm_bytes(entries=None):
    """Bytes actually allocated by files under /dev/shm/<entry> (recursively),
    for the given top-level entries (default: every oxray* entry)."""
    total = 0
    for name in oxray_shm_entries() if entries is None else entries:
        top = os.path.join(SHM_DIR, name)
        paths = []
        if os.path.isdir(top) and not os.path.islink(top):
            for root, _dirs, files in os.walk(top):
                paths.extend(os.path.join(root, f) for f in files)
        else:
            paths.append(top)
        for p in paths:
            try:
                total += os.lstat(p).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def rss_bytes():
    """This process's resident set size (VmRSS) in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("VmRSS not found in /proc/self/status")


def http_call(method, url, token=None, body=None, headers=None):
    """One HTTP request: (status, body text), errors included; the token as a Bearer header."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, data=body, method=method, headers=dict(headers or {}))
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def wait_job_terminal(client, job_id, timeout=120):
    """Polls a Jobs client (Ray's or oxray's), as Ray's docs do, until the
    job's status is terminal; that status."""

    def terminal_status():
        status = client.get_job_status(job_id)
        return status if status.is_terminal() else None

    return wait_until(
        lambda: f"job {job_id} to end (still {client.get_job_status(job_id)})", terminal_status, timeout, 0.1
    )


def ray_jobs_client(cluster):
    """Ray's own `JobSubmissionClient` for a cluster started by `cli_cluster`, with its token."""
    from ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(cluster.dashboard_url, headers={"Authorization": f"Bearer {cluster.token}"})


def http_get_local(port, path, timeout=30, headers=None):
    """(status, body) of a GET to 127.0.0.1:`port` (Serve's proxy, say)."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def http_get_local_or_none(port, path, timeout=30):
    """`http_get_local`'s (status, body), or None while nothing listens on `port`."""
    try:
        return http_get_local(port, path, timeout=timeout)
    except ConnectionRefusedError:
        return None


def metric_samples(text, name, **labels):
    """The samples of Prometheus series `name` in `text` whose labels include `labels`: a list of
    (all labels as a dict, value)."""
    import re

    found = []
    for line in text.splitlines():
        match = re.fullmatch(rf"{re.escape(name)}\{{(.*)\}} (\S+)", line)
        if match is None:
            continue
        have = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match[1]))
        if all(have.get(k) == v for k, v in labels.items()):
            found.append((have, float(match[2])))
    return found


def metric_sum(text, name, **labels):
    """The sum of the values of `name`'s samples with `labels` (None when there is none)."""
    samples = metric_samples(text, name, **labels)
    return sum(v for _, v in samples) if samples else None


def listening_pids(port):
    """The processes listening on TCP `port` (Serve's proxies, say)."""
    import psutil

    return {
        c.pid
        for c in psutil.net_connections("tcp")
        if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN
    }
