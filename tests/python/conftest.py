"""Shared fixtures for the oxray Python test suite.

The tests are written against Ray's documented Python API; user code does
``import oxray as ray`` and everything else reads exactly as it would for Ray.

Fixtures:

* ``ray_cluster`` (module scope): one local cluster per test module, started
  with :data:`STANDARD_INIT_KWARGS`.  Tests that only need "a cluster" use it.
* ``moto_s3`` (function scope): a real S3 API server (moto) and a bucket in it.
* ``fresh_cluster`` (function scope): a factory for tests that need their own
  ``ray.init`` arguments.  It shuts down any running cluster first and always
  shuts down afterwards.  A later test of the same module that asks for
  ``ray_cluster`` gets the standard cluster back (see ``_standard_cluster_alive``).
"""

import os
import socket
import subprocess
import sys

import pytest

import oxray as ray
from oxray_testutil import wait_until

# Remote functions defined at module level in these test files are pickled by
# reference (module name + qualname), so worker processes must be able to
# import the test modules and ``oxray_testutil``.  The test directories
# (``core/``, ``train/``, ...) have no ``__init__.py``: pytest's default
# ``prepend`` import mode imports ``core/test_tasks.py`` as plain ``test_tasks``
# (so test file names must be unique across directories).  Workers, and the
# node processes ``oxray start`` runs, inherit the driver's environment, so put
# this directory and each test directory on sys.path and PYTHONPATH before any
# cluster starts (Ray itself only forwards the script directory and cwd).
_HERE = os.path.dirname(os.path.abspath(__file__))
_TEST_DIRS = [_HERE] + [
    path
    for path in (os.path.join(_HERE, name) for name in sorted(os.listdir(_HERE)))
    if os.path.isdir(path) and not os.path.basename(path).startswith(("_", "."))
]
for _dir in reversed(_TEST_DIRS):
    if _dir not in sys.path:
        sys.path.insert(0, _dir)
_pp = os.environ.get("PYTHONPATH", "")
_pp = _pp.split(os.pathsep) if _pp else []
os.environ["PYTHONPATH"] = os.pathsep.join([d for d in _TEST_DIRS if d not in _pp] + _pp)

# A cluster `oxray start` left running on this host must not capture the suite's
# `ray.init()` calls: give the suite its own temp root (multi-node tests set theirs).
if "OXRAY_TEMP_DIR" not in os.environ:
    import tempfile

    os.environ["OXRAY_TEMP_DIR"] = tempfile.mkdtemp(prefix="oxray-tests-")

# One pytest process imports torch early and inits hundreds of clusters: a torch template at each
# init (for scripts that imported torch first) would cost the suite ~2 s of CPU per init. The
# tests that want it set it back (test_worker_template.py).
os.environ.setdefault("OXRAY_TORCH_TEMPLATE_AT_INIT", "0")
os.environ.setdefault("OXRAY_TUNE_TEMPLATE_AT_INIT", "0")

MiB = 1024**2

STANDARD_INIT_KWARGS = dict(
    num_cpus=2,
    num_gpus=0,
    resources={"custom_a": 2},
    object_store_memory=200 * MiB,
)


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "slow: long-running test (deselect with -m 'not slow')",
    )


def _shutdown_if_initialized():
    if ray.is_initialized():
        ray.shutdown()


def start_standard_cluster():
    _shutdown_if_initialized()
    return ray.init(**STANDARD_INIT_KWARGS)


@pytest.fixture(scope="module")
def ray_cluster():
    """A 2-CPU, 0-GPU cluster with ``custom_a: 2`` and a 200 MiB object store."""
    info = start_standard_cluster()
    try:
        yield info
    finally:
        _shutdown_if_initialized()


@pytest.fixture(autouse=True)
def _standard_cluster_alive(request):
    """Re-start the module cluster if a ``fresh_cluster`` test shut it down."""
    if "ray_cluster" in request.fixturenames and not ray.is_initialized():
        start_standard_cluster()
    yield


@pytest.fixture
def fresh_cluster():
    """Factory: ``fresh_cluster(**init_kwargs)`` starts a brand-new cluster.

    Any running cluster is shut down before the test; the cluster is always
    shut down afterwards, whatever the test did.  ``num_cpus`` defaults to 2
    and ``object_store_memory`` to 200 MiB so that tests stay small.
    """
    _shutdown_if_initialized()

    def _start(**kwargs):
        kwargs.setdefault("num_cpus", 2)
        kwargs.setdefault("object_store_memory", 200 * MiB)
        return ray.init(**kwargs)

    try:
        yield _start
    finally:
        _shutdown_if_initialized()


@pytest.fixture
def moto_s3(monkeypatch):
    """A real S3 API server (moto) on a free local port, with the standard AWS
    variables pointing at it and a bucket ``oxray-test``; yields a boto3 client.
    Train's S3 storage tests and Data's S3 readers and writers use it."""
    pytest.importorskip("moto")
    boto3 = pytest.importorskip("boto3")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    env = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)

    def listening():
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            return False

    wait_until("the moto server to start", listening, timeout=60, interval=0.1)
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    client.create_bucket(Bucket="oxray-test")
    client.endpoint = endpoint
    try:
        yield client
    finally:
        server.kill()
        server.wait()


@pytest.fixture
def head(tmp_path, monkeypatch):
    """A head started with `oxray start --head` (2 CPUs, its own HTTP port) under
    a private temp root, stopped after the test."""
    from cli_cluster import running_cluster

    with running_cluster(tmp_path / "oxray", monkeypatch) as cluster:
        cluster.start_head(num_cpus=2)
        yield cluster
