"""Objects: put/get, serialization of common types, numpy zero-copy, nested
references, pyarrow, spilling past the store size and bounded memory."""

import gc
import hashlib
import os
import shutil
import subprocess
import sys
import textwrap
import threading

import pytest

import oxray as ray
from oxray_testutil import oxray_shm_bytes, rss_bytes, session_shm_entries, wait_until

TIMEOUT = 60
MiB = 1024**2


class Point:
    """A user-defined class defined in the test module."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __eq__(self, other):
        return isinstance(other, Point) and (self.x, self.y) == (other.x, other.y)


@ray.remote
def echo(x):
    return x


@ray.remote
def resolve_nested(container):
    """Receives references nested in a container unresolved, and gets them."""
    refs = container["refs"] if isinstance(container, dict) else container
    kinds = [isinstance(r, ray.ObjectRef) for r in refs]
    return kinds, ray.get(refs, timeout=TIMEOUT)


@ray.remote
def make_inner_refs(n):
    """Returns references to objects created inside the task."""
    return [ray.put(i * 11) for i in range(n)]


@ray.remote
def array_info(arr):
    return str(arr.dtype), arr.shape, float(arr.sum())


@ray.remote
def make_array(n):
    import numpy as np

    return np.arange(n, dtype=np.int64)


@ray.remote
def sha256_of(arr):
    return hashlib.sha256(arr.tobytes()).hexdigest()


@ray.remote
def table_rows(table):
    return table.num_rows, table.column_names


@ray.remote
def make_table():
    import pyarrow as pa

    return pa.table({"k": [1, 2, 3], "v": ["a", "b", "c"]})


def test_put_get_round_trips_python_values(ray_cluster):
    values = [
        0,
        -(2**70),
        3.25,
        "text with ünïcode",
        None,
        True,
        b"\x00\x01binary\xff" * 100,
        [1, "two", 3.0, None],
        (1, (2, 3)),
        {"a": 1, "nested": {"b": [1, 2, {"c": b"x"}]}, 5: "int key"},
        {1, 2, 3},
        Point(1, 2),
    ]
    for value in values:
        ref = ray.put(value)
        assert isinstance(ref, ray.ObjectRef)
        got = ray.get(ref, timeout=TIMEOUT)
        assert got == value and type(got) is type(value)
    # The same values survive a trip through a worker process.
    assert ray.get([echo.remote(v) for v in values], timeout=TIMEOUT) == values


def test_get_list_returns_values_in_order(ray_cluster):
    refs = [echo.remote(i) for i in range(25)]
    refs.insert(3, ray.put("put-value"))
    expected = list(range(25))
    expected.insert(3, "put-value")
    assert ray.get(refs, timeout=TIMEOUT) == expected
    assert ray.get(list(reversed(refs)), timeout=TIMEOUT) == list(reversed(expected))
    assert ray.get([], timeout=TIMEOUT) == []
    # A reference may appear more than once.
    r = ray.put("dup")
    assert ray.get([r, r, r], timeout=TIMEOUT) == ["dup"] * 3


def test_numpy_round_trip(ray_cluster):
    np = pytest.importorskip("numpy")
    arrays = [
        np.arange(12, dtype=np.int64).reshape(3, 4),
        np.linspace(0, 1, 1000, dtype=np.float32),
        np.array([True, False, True]),
        np.array([1 + 2j, 3 - 4j], dtype=np.complex128),
        np.zeros((0, 5), dtype=np.uint8),
        np.arange(2 * MiB, dtype=np.float64).reshape(1024, -1),  # 16 MiB
        np.asfortranarray(np.arange(20, dtype=np.int16).reshape(4, 5)),
    ]
    for arr in arrays:
        got = ray.get(ray.put(arr), timeout=TIMEOUT)
        assert isinstance(got, np.ndarray)
        assert got.dtype == arr.dtype and got.shape == arr.shape
        assert np.array_equal(got, arr)
    # Arrays as task arguments and return values.
    big = arrays[5]
    assert ray.get(array_info.remote(big), timeout=TIMEOUT) == (
        "float64",
        big.shape,
        float(big.sum()),
    )
    out = ray.get(make_array.remote(3 * MiB), timeout=TIMEOUT)
    assert out.dtype == np.int64 and out.shape == (3 * MiB,)
    assert int(out[-1]) == 3 * MiB - 1 and int(out.sum()) == (3 * MiB - 1) * 3 * MiB // 2


def test_large_numpy_get_is_zero_copy_read_only(ray_cluster):
    np = pytest.importorskip("numpy")
    arr = np.random.default_rng(0).random(50 * MiB // 8)  # 50 MiB of float64
    ref = ray.put(arr)
    got = ray.get(ref, timeout=TIMEOUT)
    assert got.dtype == arr.dtype and got.shape == arr.shape
    assert np.array_equal(got, arr)
    # Backed by the shared-memory object, not a private copy.
    assert got.flags.writeable is False
    with pytest.raises(ValueError):
        got[0] = 1.0
    # A second get sees the same bytes; the driver's own array is untouched.
    again = ray.get(ref, timeout=TIMEOUT)
    assert np.array_equal(again, arr)
    assert arr.flags.writeable is True


def test_nested_refs_are_passed_unresolved(ray_cluster):
    refs = [ray.put(i) for i in range(3)] + [echo.remote("from-task")]
    kinds, values = ray.get(resolve_nested.remote(refs), timeout=TIMEOUT)
    assert kinds == [True, True, True, True]
    assert values == [0, 1, 2, "from-task"]

    kinds, values = ray.get(resolve_nested.remote({"refs": refs[:2]}), timeout=TIMEOUT)
    assert kinds == [True, True] and values == [0, 1]

    # A reference nested in a put object stays a reference.
    outer = ray.put([refs[0], refs[3]])
    inner = ray.get(outer, timeout=TIMEOUT)
    assert all(isinstance(r, ray.ObjectRef) for r in inner)
    assert ray.get(inner, timeout=TIMEOUT) == [0, "from-task"]


def test_refs_returned_from_a_task(ray_cluster):
    inner = ray.get(make_inner_refs.remote(3), timeout=TIMEOUT)
    assert len(inner) == 3 and all(isinstance(r, ray.ObjectRef) for r in inner)
    assert ray.get(inner, timeout=TIMEOUT) == [0, 11, 22]


def test_pyarrow_table_round_trip(ray_cluster):
    pa = pytest.importorskip("pyarrow")
    table = pa.table(
        {
            "id": pa.array(range(1000), type=pa.int64()),
            "name": [f"row-{i}" for i in range(1000)],
            "score": pa.array([i / 7 for i in range(1000)], type=pa.float64()),
        }
    )
    got = ray.get(ray.put(table), timeout=TIMEOUT)
    assert isinstance(got, pa.Table)
    assert got.schema == table.schema
    assert got.equals(table)
    assert ray.get(table_rows.remote(table), timeout=TIMEOUT) == (1000, ["id", "name", "score"])
    made = ray.get(make_table.remote(), timeout=TIMEOUT)
    assert made.to_pydict() == {"k": [1, 2, 3], "v": ["a", "b", "c"]}


def test_objects_larger_than_the_store_spill(fresh_cluster):
    np = pytest.importorskip("numpy")
    fresh_cluster(num_cpus=2, object_store_memory=100 * MiB)
    n = 40 * MiB // 8
    refs, digests = [], []
    for i in range(6):  # 240 MiB in all, 2.4x the store
        arr = np.arange(n, dtype=np.int64) * (i + 3) + i
        digests.append(hashlib.sha256(arr.tobytes()).hexdigest())
        refs.append(ray.put(arr))
        del arr
    for i, ref in enumerate(refs):
        got = ray.get(ref, timeout=120)
        assert got.shape == (n,) and got.dtype == np.int64
        assert hashlib.sha256(got.tobytes()).hexdigest() == digests[i], f"object {i}"
        del got
    # Spilled objects can also be read by a worker, in any order.
    assert ray.get(sha256_of.remote(refs[0]), timeout=120) == digests[0]
    assert ray.get(sha256_of.remote(refs[4]), timeout=120) == digests[4]


def _churn_put_get(iterations):
    np = pytest.importorskip("numpy")
    arr = np.ones(10 * MiB // 8)  # 10 MiB
    limit = 300 * MiB
    # Only this cluster's /dev/shm/oxray* entries are measured (another oxray
    # cluster may run on the same machine): those its processes map or open.
    ours = set()

    def one_round(i, sample=False):
        ref = ray.put(arr)
        out = ray.get(ref, timeout=TIMEOUT)
        assert out.nbytes == arr.nbytes and out[i % out.size] == 1.0
        if sample:
            ours.update(session_shm_entries())
        del out, ref

    for i in range(20):  # warm up: let pools and mappings settle
        one_round(i, sample=(i == 0))
    gc.collect()
    rss0, shm0 = rss_bytes(), oxray_shm_bytes(ours)
    peak_rss = peak_shm = 0
    for i in range(iterations):
        one_round(i, sample=(i % 100 == 0))
        if i % 25 == 0:
            peak_rss = max(peak_rss, rss_bytes() - rss0)
            peak_shm = max(peak_shm, oxray_shm_bytes(ours) - shm0)
    gc.collect()
    # Freed objects may be reclaimed asynchronously: allow a short settle.
    wait_until(
        lambda: (
            f"RSS and /dev/shm/oxray* to settle after {iterations} put/get of 10 MiB: RSS grew "
            f"{(rss_bytes() - rss0) / MiB:.0f} MiB, /dev/shm/oxray* grew {(oxray_shm_bytes(ours) - shm0) / MiB:.0f} MiB"
        ),
        lambda: rss_bytes() - rss0 < limit and oxray_shm_bytes(ours) - shm0 < limit,
        timeout=30,
        interval=0.2,
    )
    # Bounded throughout, not only at the end (10 GiB passed through in all).
    assert peak_rss < 2 * limit, f"RSS peaked {peak_rss / MiB:.0f} MiB above start"
    assert peak_shm < 2 * limit, f"/dev/shm/oxray* peaked {peak_shm / MiB:.0f} MiB above start"


def test_put_get_loop_memory_is_bounded(ray_cluster):
    _churn_put_get(1000)


@pytest.mark.slow
def test_put_get_loop_memory_is_bounded_long(ray_cluster):
    _churn_put_get(10_000)


def test_held_view_keeps_its_bytes_while_memory_is_reused(ray_cluster):
    """An array from get() stays intact after its ref is dropped, however many
    new objects of the same size are put: the arena never reuses a range that a
    reader still views."""
    np = pytest.importorskip("numpy")
    ref = ray.put(np.full(4 * MiB // 8, 7.0))
    held = ray.get(ref)
    del ref
    for i in range(20):
        other = ray.get(ray.put(np.full(4 * MiB // 8, float(i))))
        assert other[0] == float(i) and other[-1] == float(i)
        del other
    assert held[0] == 7.0 and held[-1] == 7.0
    assert float(held.sum()) == 7.0 * held.size


def test_arena_memory_is_reused_after_release(ray_cluster):
    """Dropping both the ref and the array frees the range for the next put."""
    np = pytest.importorskip("numpy")
    from oxray._private.state import STATE

    stats = STATE.cluster.store_stats
    first = ray.put(np.ones(8 * MiB // 8))
    arr = ray.get(first)
    used_with_one = stats().shm_used
    del first, arr
    for _ in range(10):
        ref = ray.put(np.ones(8 * MiB // 8))
        assert ray.get(ref)[0] == 1.0
        del ref
    # Give the background reference flush a moment, then check nothing accumulated.
    wait_until(
        lambda: f"the store back to one object's use ({stats().shm_used} > {used_with_one})",
        lambda: stats().shm_used <= used_with_one,
        timeout=30,
    )


def test_numpy_and_arrow_reads_are_zero_copy(ray_cluster):
    """Two gets of one object view the same shared-memory bytes: same address."""
    np = pytest.importorskip("numpy")
    pa = pytest.importorskip("pyarrow")
    arr_ref = ray.put(np.arange(2 * MiB, dtype=np.int64))
    a1, a2 = ray.get(arr_ref), ray.get(arr_ref)
    assert a1.__array_interface__["data"][0] == a2.__array_interface__["data"][0]
    assert not a1.flags.writeable

    table_ref = ray.put(pa.table({"x": np.arange(2 * MiB, dtype=np.int64)}))
    t1, t2 = ray.get(table_ref), ray.get(table_ref)
    b1 = t1.column("x").chunks[0].buffers()[1]
    b2 = t2.column("x").chunks[0].buffers()[1]
    assert b1.address == b2.address
    assert t1.column("x")[12345].as_py() == 12345


@ray.remote
def loaded_modules(names):
    import sys

    return [name in sys.modules for name in names]


def test_workers_preload_numpy_so_a_first_array_read_is_cheap(fresh_cluster):
    # A worker's first numpy argument used to pay numpy's import (~100 ms) inside the
    # task; idle workers import it between tasks instead (polled slowly: only an idle one does).
    fresh_cluster(num_cpus=1)
    loaded = lambda: ray.get(loaded_modules.remote(["numpy"]), timeout=TIMEOUT) == [True]  # noqa: E731
    wait_until("numpy preloaded in the idle worker", loaded, timeout=60, interval=1.0)


def test_worker_preload_list_is_configurable(fresh_cluster, monkeypatch):
    monkeypatch.setenv("OXRAY_WORKER_PRELOAD", "wave")
    fresh_cluster(num_cpus=1)
    loaded = lambda: ray.get(loaded_modules.remote(["wave"]), timeout=TIMEOUT) == [True]  # noqa: E731
    wait_until("wave preloaded in the idle worker", loaded, timeout=60, interval=1.0)
    assert ray.get(loaded_modules.remote(["numpy"]), timeout=TIMEOUT) == [False]


_SHM_FILLED_AFTER_START = textwrap.dedent(
    """
    import numpy as np
    import oxray as ray
    from oxray.exceptions import ObjectStoreFullError

    ray.init(num_cpus=1, object_store_memory=48 * 2**20)
    # Another program fills /dev/shm after the cluster checked it at startup.
    with open("/dev/shm/filler", "wb") as f:
        f.write(b"x" * (40 * 2**20))
    arr = np.ones(24 * 2**20 // 8)
    try:
        print("got", int(ray.get(ray.put(arr)).sum()))
    except ObjectStoreFullError as e:
        print("full", e)
    ray.shutdown()
    """
)


def _in_small_tmpfs(extra_mounts="", env=None):
    script = (
        "mount -t tmpfs -o size=64m tmpfs /dev/shm && "
        + extra_mounts
        + f"exec {sys.executable} -c '{_SHM_FILLED_AFTER_START}'"
    )
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=120, env=env or os.environ
    )


needs_mount_namespace = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="mounts a small private /dev/shm: needs root and unshare",
)


@needs_mount_namespace
def test_a_full_dev_shm_sends_puts_to_disk_instead_of_sigbus():
    # The arena used to be a sparse file checked only at startup: the writer got SIGBUS.
    out = _in_small_tmpfs()
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
    assert f"got {24 * 2**20 // 8}" in out.stdout, out.stdout + out.stderr[-2000:]


@needs_mount_namespace
def test_no_room_in_memory_nor_on_disk_is_object_store_full_error(tmp_path):
    # The spill directory (under the session root) is a full filesystem too.
    root = tmp_path / "oxray"
    root.mkdir(mode=0o700)
    out = _in_small_tmpfs(
        f"mount -t tmpfs -o size=8m,mode=0700 tmpfs {root} && ", env={**os.environ, "OXRAY_TEMP_DIR": str(root)}
    )
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
    assert "full no room for a" in out.stdout, out.stdout + out.stderr[-2000:]


def _threads_blocked_opening_a_fifo():
    blocked = 0
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/wchan") as f:
                blocked += f.read() in ("wait_for_partner", "fifo_open")
        except OSError:
            continue
    return blocked


@ray.remote
def put_and_hold(n):
    import numpy as np

    ref = ray.put(np.ones(n, dtype=np.uint8))
    return ref.hex()


def test_spilling_does_not_hold_up_other_calls(fresh_cluster):
    # The spill of the first object is made to block: its spill file is a FIFO that
    # nobody reads yet. Meanwhile other calls to the node must go through.
    import numpy as np

    info = fresh_cluster(num_cpus=2, object_store_memory=64 * MiB)
    first = ray.put(np.ones(40 * MiB, dtype=np.uint8))
    spill_dir = os.path.join(info["session_dir"], "spill")
    os.makedirs(spill_dir, exist_ok=True)
    fifo = os.path.join(spill_dir, first.hex())
    os.mkfifo(fifo)
    # A worker's put needs the room: the agent (in this process) spills `first`.
    second = put_and_hold.remote(40 * MiB)
    answers = []

    def small_calls():
        answers.append(ray.get(echo.remote("small"), timeout=30))
        answers.append(ray.get(ray.put(b"x" * 1000), timeout=30))
        answers.append(ray.wait([second], timeout=0)[0])

    try:
        wait_until("the spill to start", _threads_blocked_opening_a_fifo, timeout=60)
        # In a thread: if they block, the FIFO is still drained below and the test fails cleanly.
        caller = threading.Thread(target=small_calls, daemon=True)
        caller.start()
        caller.join(timeout=30)
        assert answers == ["small", b"x" * 1000, []], "calls waited for the spill"
    finally:
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # lets the spill's open go on
        os.set_blocking(reader, True)
        while os.read(reader, 1 << 20):
            pass
        os.close(reader)
    assert len(ray.get(second, timeout=60)) == 32
    del first
