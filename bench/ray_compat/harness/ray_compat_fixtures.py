"""The fixtures Ray's test files request, written for the harness on oxray's public API.

The semantics follow Ray's ``python/ray/tests/conftest.py`` (the defaults of ``_ray_start``,
indirect ``request.param`` dicts of ``ray.init`` keywords, ``call_ray_start``'s command
strings), without what only configures Ray's internals (``_system_config``, external
redis, multi-node ``cluster_utils``): the tests that need those are excluded by the filter.
"""

import logging
import os
import re
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest

import oxray as ray

MiB = 1024 * 1024


def reset_ray_address():
    """Forgets the address a test's cluster published to the environment (Ray's ``reset_ray_address``)."""
    for name in ("RAY_ADDRESS", "OXRAY_ADDRESS"):
        os.environ.pop(name, None)


def default_init_kwargs():
    """Ray's fixture defaults, less ``_system_config`` (Ray's internal tuning)."""
    return {
        "num_cpus": 1,
        "object_store_memory": 150 * MiB,
        "dashboard_port": None,
        "namespace": "default_test_namespace",
    }


def _param(request, default=None):
    param = getattr(request, "param", default if default is not None else {})
    return dict(param) if isinstance(param, dict) else param


def _shutdown_leftover():
    """Shuts down a cluster an earlier test left running (a module-scoped one, most often).

    Ray's test files rely on their order: a test that starts its own cluster runs after
    one that shut the shared cluster down. The filter deselects some tests, which may be
    the very ones that shut it down, so each fixture that starts a cluster of its own
    first stops one left running."""
    if ray.is_initialized():
        ray.shutdown()
        reset_ray_address()


@contextmanager
def _ray_start(**kwargs):
    _shutdown_leftover()
    init_kwargs = default_init_kwargs()
    init_kwargs.update(kwargs)
    address_info = ray.init("local", **init_kwargs)
    try:
        yield address_info
    finally:
        ray.shutdown()
        reset_ray_address()


@pytest.fixture
def shutdown_only():
    _shutdown_leftover()
    yield None
    ray.shutdown()
    reset_ray_address()


@pytest.fixture
def propagate_logs():
    logging.getLogger("ray").propagate = True
    logging.getLogger("ray.data").propagate = True
    yield
    logging.getLogger("ray").propagate = False
    logging.getLogger("ray.data").propagate = False


@pytest.fixture(scope="class")
def class_ray_instance():
    _shutdown_leftover()
    yield ray.init()
    ray.shutdown()
    reset_ray_address()


@pytest.fixture
def ray_start_no_cpu(request):
    with _ray_start(num_cpus=0, **_param(request)) as info:
        yield info


@pytest.fixture
def ray_start_regular(request):
    with _ray_start(**_param(request)) as info:
        yield info


# The shared clusters: one per module and set of init keywords, as with Ray's
# module-scoped fixtures. A test of the module that shut it down (its own
# ray.shutdown(), or a test with a cluster of its own in between) gets it started
# again with the same keywords, where Ray would auto-start a default cluster.
_SHARED = {"kwargs": None, "info": None}


def _shared_cluster(kwargs):
    init_kwargs = default_init_kwargs()
    init_kwargs.update(kwargs)
    if ray.is_initialized() and _SHARED["kwargs"] == init_kwargs:
        return _SHARED["info"]
    _shutdown_leftover()
    _SHARED["info"] = ray.init("local", **init_kwargs)
    _SHARED["kwargs"] = init_kwargs
    return _SHARED["info"]


@pytest.fixture(scope="module")
def ray_compat_shared_module():
    yield
    if _SHARED["kwargs"] is not None:
        _SHARED.update(kwargs=None, info=None)
        ray.shutdown()
        reset_ray_address()


@pytest.fixture
def ray_start_regular_shared(request, ray_compat_shared_module):
    return _shared_cluster(_param(request))


@pytest.fixture
def ray_start_regular_shared_2_cpus(request, ray_compat_shared_module):
    return _shared_cluster({"num_cpus": 2, **_param(request)})


@pytest.fixture
def ray_start_shared_local_modes(request, ray_compat_shared_module):
    """Older Ray's fixture: ``request.param`` is local_mode (a bool) or init keywords."""
    param = _param(request)
    kwargs = {"num_cpus": 4}
    if isinstance(param, dict):
        kwargs.update(param)
    elif param:
        kwargs["local_mode"] = True  # oxray refuses local mode: the test fails, naming it
    return _shared_cluster(kwargs)


@pytest.fixture
def ray_start_2_cpus(request):
    with _ray_start(num_cpus=2, **_param(request)) as info:
        yield info


@pytest.fixture
def ray_start_10_cpus(request):
    with _ray_start(num_cpus=10, **_param(request)) as info:
        yield info


@pytest.fixture
def ray_start_object_store_memory(request):
    _shutdown_leftover()
    store_size = request.param
    ray.init("local", num_cpus=1, object_store_memory=store_size)
    yield store_size
    ray.shutdown()
    reset_ray_address()


_DEFAULT_START = "ray start --head --num-cpus=1 --min-worker-port=0 --max-worker-port=0 --port 0"


@contextmanager
def call_ray_start_context(request):
    """Runs ``ray start ...`` (``request.param``: the command, or {"cmd", "env"}); yields the
    head's address. The ``ray`` on the harness's PATH is oxray's CLI."""
    _shutdown_leftover()
    parameter = getattr(request, "param", _DEFAULT_START)
    env = None
    if isinstance(parameter, dict):
        if "env" in parameter:
            env = {**os.environ, **parameter["env"]}
        parameter = parameter.get("cmd", _DEFAULT_START)
    try:
        out = subprocess.check_output(parameter.split(" "), stderr=subprocess.STDOUT, env=env).decode()
    except subprocess.CalledProcessError as e:
        print(f"ray start failed ({e.returncode}): {' '.join(e.cmd)}\n{e.output.decode(errors='replace')}")
        raise
    match = re.search(r"--address='([^']*)'", out)
    address = match.group(1) if match else None
    try:
        yield address
    finally:
        ray.shutdown()
        subprocess.check_call(["ray", "stop"], env=env)
        reset_ray_address()


@pytest.fixture
def call_ray_start(request):
    with call_ray_start_context(request) as address:
        yield address


@pytest.fixture
def call_ray_stop_only():
    yield
    subprocess.check_call(["ray", "stop"])
    reset_ray_address()


@pytest.fixture
def tmp_working_dir():
    """A directory with a file ``hello``, a module ``file_module`` and a package ``test_module``."""
    with tempfile.TemporaryDirectory() as tmp_dir:
        path = Path(tmp_dir)
        (path / "hello").write_text("world")
        (path / "file_module.py").write_text("def hello():\n    return 'hello'\n")
        (path / "test_module").mkdir()
        (path / "test_module" / "test.py").write_text("def one():\n    return 1\n")
        (path / "test_module" / "__init__.py").write_text("from test_module.test import one\n")
        yield tmp_dir


@pytest.fixture
def temp_file(request):
    with tempfile.NamedTemporaryFile("r+b") as fp:
        yield fp


@pytest.fixture
def temp_dir(request):
    with tempfile.TemporaryDirectory("r+b") as d:
        yield d


# Train v2's conftest (python/ray/train/v2/tests/conftest.py).


@pytest.fixture
def ray_start_4_cpus():
    _shutdown_leftover()
    ray.init(num_cpus=4)
    yield
    ray.shutdown()
