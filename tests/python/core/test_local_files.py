"""What oxray leaves on the local disk is private to its user: a per-user temp
root whose owner and mode are checked, files created without following planted
links, 0700 dirs and 0600 files (the object arena, spill files, logs, the head's
tables), and leftovers of a SIGKILLed driver reaped by the next start. Also: a
second driver joins the cluster an `init()` started."""

import glob
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import oxray as ray
from oxray._private import node_files
from oxray._private.state import STATE
from oxray_testutil import wait_until

OXRAY = [sys.executable, "-m", "oxray.scripts.cli"]
MiB = 1024**2
NOBODY = 65534


def _cli(root, *args, umask=None):
    env = {**os.environ, "OXRAY_TEMP_DIR": str(root)}
    env.pop("OXRAY_TOKEN", None)
    return subprocess.run(
        OXRAY + list(args),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=(lambda: os.umask(umask)) if umask is not None else None,
    )


def _stop(root):
    _cli(root, "stop", "--force")


def _not_private(top):
    """Every dir/file under `top` (itself included) with a group/other bit."""
    bad = []
    for path in [top] + [os.path.join(d, n) for d, dirs, files in os.walk(top) for n in dirs + files]:
        try:
            st = os.lstat(path)
        except FileNotFoundError:  # removed while walking
            continue
        if stat.S_ISLNK(st.st_mode):
            continue
        if st.st_mode & 0o077:
            bad.append(f"{path} {stat.filemode(st.st_mode)}")
    return bad


@pytest.fixture
def no_cluster(monkeypatch):
    if ray.is_initialized():
        ray.shutdown()
    monkeypatch.delenv("OXRAY_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("OXRAY_TOKEN", raising=False)
    yield
    if ray.is_initialized():
        ray.shutdown()


def test_default_temp_root_is_per_user(monkeypatch, tmp_path):
    monkeypatch.delenv("OXRAY_TEMP_DIR", raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    assert node_files.temp_root() == f"/tmp/oxray-{os.getuid()}"
    runtime_dir = tmp_path / "run"
    runtime_dir.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime_dir))
    assert node_files.temp_root() == str(runtime_dir / "oxray")
    # A runtime dir others may write is not used.
    runtime_dir.chmod(0o777)
    assert node_files.temp_root() == f"/tmp/oxray-{os.getuid()}"
    monkeypatch.setenv("OXRAY_TEMP_DIR", str(tmp_path / "mine"))
    assert node_files.temp_root() == str(tmp_path / "mine")


@pytest.mark.parametrize("planted", ["root", "state"])
def test_a_world_writable_dir_is_refused(tmp_path, monkeypatch, no_cluster, planted):
    root = tmp_path / "oxray"
    root.mkdir(mode=0o700)
    bad = root if planted == "root" else root / "state"
    bad.mkdir(exist_ok=True)
    bad.chmod(0o777)
    try:
        started = _cli(root, "start", "--head", "--dashboard-port", "0", "--port", "0", "--num-cpus", "1")
        assert started.returncode == 1, started.stdout + started.stderr
        assert str(bad) in started.stderr and "chmod 700" in started.stderr, started.stderr
        assert "Traceback" not in started.stderr
    finally:
        _stop(root)
    if planted == "root":
        # The embedded cluster keeps its session under the same root, so it refuses too.
        monkeypatch.setenv("OXRAY_TEMP_DIR", str(root))
        with pytest.raises(node_files.InsecurePathError, match="chmod 700"):
            ray.init(num_cpus=1)


def test_a_planted_token_tmp_symlink_is_not_followed(tmp_path, no_cluster):
    root = tmp_path / "oxray"
    (root / "state").mkdir(parents=True, mode=0o700)
    root.chmod(0o700)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (root / "state" / "token.tmp").symlink_to(victim)
    try:
        started = _cli(root, "start", "--head", "--dashboard-port", "0", "--port", "0", "--num-cpus", "1")
        assert started.returncode == 0, started.stderr
        assert victim.read_text() == "precious\n"
        token = root / "state" / "token"
        assert not token.is_symlink() and stat.S_IMODE(token.stat().st_mode) == 0o600
    finally:
        _stop(root)


def test_a_current_cluster_file_someone_else_owns_is_refused(tmp_path, monkeypatch, no_cluster):
    root = tmp_path / "oxray"
    root.mkdir(mode=0o700)
    monkeypatch.setenv("OXRAY_TEMP_DIR", str(root))
    planted = root / "oxray_current_cluster"
    planted.write_text(json.dumps({"address": "127.0.0.1:1", "token_file": "/dev/null", "pid": os.getpid()}))
    planted.chmod(0o644)
    if os.getuid() == 0:
        os.chown(planted, NOBODY, NOBODY)
    with pytest.raises(node_files.InsecurePathError) as raised:
        ray.init(address="auto")
    assert str(planted) in str(raised.value) and "owned by" in str(raised.value), raised.value
    # A world-readable one of ours is refused as well (someone could have swapped it in).
    if os.getuid() == 0:
        os.chown(planted, 0, 0)
    planted.chmod(0o666)
    with pytest.raises(node_files.InsecurePathError, match="0o666"):
        ray.init()


def _spill_and_print(n=6, size=16 * MiB):
    @ray.remote
    def say():
        print("a line for the worker log")
        return os.getpid()

    ray.get(say.remote())
    refs = [ray.put(np.full(size, i % 251, dtype=np.uint8)) for i in range(n)]
    return refs


def test_files_of_a_cli_cluster_are_private(tmp_path, monkeypatch, no_cluster):
    root = tmp_path / "oxray"
    monkeypatch.setenv("OXRAY_TEMP_DIR", str(root))
    # umask 0: the modes must not depend on the caller's umask.
    started = _cli(
        root,
        "start",
        "--head",
        "--dashboard-port",
        "0",
        "--port",
        "0",
        "--num-cpus",
        "1",
        "--object-store-memory",
        str(64 * MiB),
        umask=0,
    )
    try:
        assert started.returncode == 0, started.stderr
        (record,) = [json.loads(open(p).read()) for p in glob.glob(str(root / "nodes" / "*.json"))]
        ray.init(address="auto")
        refs = _spill_and_print()
        session = record["session_dir"]
        wait_until("spill files in the session", lambda: glob.glob(os.path.join(session, "spill", "*")), timeout=60)
        wait_until(
            "worker logs in the session", lambda: glob.glob(os.path.join(session, "logs", "worker-*")), timeout=60
        )
        shm = glob.glob(f"/dev/shm/oxray-{record['pid']}-*")
        assert shm, os.listdir("/dev/shm")
        assert (root / "state" / "head.redb").exists()
        bad = _not_private(str(root)) + [b for d in shm for b in _not_private(d)]
        assert not bad, "\n".join(bad)
        del refs
    finally:
        if ray.is_initialized():
            ray.shutdown()
        _stop(root)


def test_files_of_an_embedded_cluster_are_private(tmp_path, monkeypatch, no_cluster):
    root = tmp_path / "oxray"
    monkeypatch.setenv("OXRAY_TEMP_DIR", str(root))
    old = os.umask(0)
    try:
        ray.init(num_cpus=1, object_store_memory=64 * MiB)
        refs = _spill_and_print()
    finally:
        os.umask(old)
    try:
        session = STATE.address_info["session_dir"]
        shm = STATE.cluster.shm_dir
        assert session.startswith(str(root) + os.sep), session
        wait_until("spill files in the session", lambda: glob.glob(os.path.join(session, "spill", "*")), timeout=60)
        wait_until(
            "worker logs in the session", lambda: glob.glob(os.path.join(session, "logs", "worker-*")), timeout=60
        )
        bad = _not_private(str(root)) + _not_private(shm)
        assert not bad, "\n".join(bad)
        del refs
    finally:
        ray.shutdown()


DRIVER = textwrap.dedent(
    """
    import json, os, signal, sys
    import numpy as np
    import oxray as ray
    from oxray._private.state import STATE
    ray.init(num_cpus=1, object_store_memory=64 * 1024**2)
    refs = [ray.put(np.full(16 * 1024**2, i, dtype=np.uint8)) for i in range(6)]
    print(json.dumps({"session": STATE.address_info["session_dir"], "shm": STATE.cluster.shm_dir}), flush=True)
    if sys.argv[1] == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    sys.stdin.readline()
    """
)


def _driver(root, mode):
    env = {**os.environ, "OXRAY_TEMP_DIR": str(root)}
    proc = subprocess.Popen(
        [sys.executable, "-c", DRIVER, mode], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    return proc, json.loads(proc.stdout.readline())


def test_leftovers_of_a_killed_driver_are_reaped_at_the_next_start(tmp_path, monkeypatch, no_cluster):
    root = tmp_path / "oxray"
    monkeypatch.setenv("OXRAY_TEMP_DIR", str(root))
    live, live_dirs = _driver(root, "wait")
    try:
        dead, dead_dirs = _driver(root, "die")
        assert dead.wait(60) == -signal.SIGKILL
        dead_spill = os.path.join(dead_dirs["session"], "spill")
        assert glob.glob(os.path.join(dead_spill, "*")) and os.path.isdir(dead_dirs["shm"])
        ray.init(num_cpus=1)
        assert not os.path.exists(dead_dirs["shm"]), "the dead driver's arena is still there"
        assert not os.path.exists(dead_spill), "the dead driver's spill files are still there"
        # Its logs stay for a post-mortem; the live driver keeps everything.
        assert os.path.isdir(os.path.join(dead_dirs["session"], "logs"))
        assert os.path.exists(os.path.join(live_dirs["shm"], "arena"))
        assert glob.glob(os.path.join(live_dirs["session"], "spill", "*"))
    finally:
        live.stdin.close()
        live.wait(60)


SECOND_DRIVER = textwrap.dedent(
    """
    import sys
    import oxray as ray
    ray.init(address=sys.argv[1] if sys.argv[1] != "none" else None, namespace="shared")
    @ray.remote
    def add(a, b):
        return a + b
    from oxray._private.state import STATE
    print("sum", ray.get(add.remote(2, 3)), STATE.address_info["address"], flush=True)
    if sys.argv[1] != "none":
        print("keeper", ray.get(ray.get_actor("keeper").get.remote()), flush=True)
    ray.shutdown()
    """
)


def test_a_second_driver_joins_a_cluster_started_by_init(tmp_path, monkeypatch, no_cluster):
    root = tmp_path / "oxray"
    monkeypatch.setenv("OXRAY_TEMP_DIR", str(root))
    ctx = ray.init(num_cpus=2, namespace="shared")
    address = ctx.address_info["address"]

    @ray.remote
    class Keeper:
        def get(self):
            return "kept"

    keeper = Keeper.options(name="keeper").remote()
    assert ray.get(keeper.get.remote()) == "kept"
    env = {**os.environ, "OXRAY_TEMP_DIR": str(root)}
    env.pop("OXRAY_TOKEN", None)

    def second(how):
        done = subprocess.run(
            [sys.executable, "-c", SECOND_DRIVER, how], env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    # "auto" and the printed address join this cluster (as in Ray) ...
    for how in ("auto", address):
        out = second(how)
        assert f"sum 5 {address}" in out and "keeper kept" in out, out
    # ... but a plain init() still starts a cluster of its own (Ray joins only `ray start` clusters then).
    out = second("none")
    assert "sum 5" in out and address not in out, out
    (record,) = glob.glob(str(root / "drivers" / "*.json"))
    assert stat.S_IMODE(os.stat(record).st_mode) == 0o600
    ray.shutdown()
    assert not os.path.exists(record), "shutdown() leaves the record of a cluster that is gone"
    with pytest.raises(ConnectionError):
        ray.init(address="auto")
