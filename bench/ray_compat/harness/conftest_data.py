"""conftest.py of the harness's copies of python/ray/data/tests (run.sh puts it there).

The fixtures Ray Data's test files request, written for the harness on oxray's public
API: the Ray Core ones (ray_compat_fixtures) and those of Ray Data's own conftest. The
semantics follow Ray's ``python/ray/data/tests/conftest.py``: module-shared clusters of 2
and 10 CPUs, fixtures that set a ``DataContext`` setting for one test and put it back
(``target_max_block_size*``, ``configure_shuffle_method``, ``use_polars_sort``...), the
``DataContext`` restored after every test, local and S3 (moto) paths and filesystems.

A ``DataContext`` setting is public API (Ray documents each one on ``DataContext``): the
fixtures set them with plain attribute assignment, so a setting oxray refuses fails the
test at setup, as it would fail a user's script. The fixtures that only reach Ray Data's
internals (physical operators, tensor extension formats, the core execution metrics
read from Ray's object store and task tables) are not provided: the filter excludes the
tests that use them.

``from ray.data.tests.conftest import *`` (and ``ray.tests.conftest``) in a test file
reaches this module.
"""

import os
import posixpath
import socket
import urllib.parse

import pandas as pd
import pyarrow.fs
import pytest
from ray_compat_fixtures import *  # noqa: F401,F403
from ray_compat_fixtures import _ray_start, _shared_cluster, call_ray_start_context, reset_ray_address  # noqa: F401

import oxray as ray

MiB = 1024 * 1024
# Ray Data's DEFAULT_TARGET_MAX_BLOCK_SIZE.
DEFAULT_TARGET_MAX_BLOCK_SIZE = 128 * MiB
# The values of Ray Data's ShuffleStrategy (ray.data.context), but the GPU one.
SHUFFLE_STRATEGIES = ["sort_shuffle_pull_based", "sort_shuffle_push_based", "hash_shuffle"]


def _context():
    return ray.data.DataContext.get_current()


# --- Clusters -------------------------------------------------------------------------


@pytest.fixture
def ray_start_2_cpus_shared(request, ray_compat_shared_module):
    return _shared_cluster({"num_cpus": 2, **(getattr(request, "param", None) or {})})


@pytest.fixture
def ray_start_10_cpus_shared(request, ray_compat_shared_module):
    return _shared_cluster({"num_cpus": 10, **(getattr(request, "param", None) or {})})


# --- DataContext ----------------------------------------------------------------------


def _snapshot(ctx):
    """The settings of ``ctx`` (its public attributes), deep-copied."""
    return ctx.copy()


def _restore(ctx, saved):
    """Puts back each setting of ``saved`` on ``ctx`` (in place: a test's reference to the
    current context keeps seeing the current one)."""
    for name, value in vars(saved).items():
        if not name.startswith("_") and getattr(ctx, name, None) is not value:
            setattr(ctx, name, value)


@pytest.fixture(autouse=True)
def ray_compat_restore_data_context():
    """Every test of Ray Data's suite gets the DataContext back as it found it (Ray's
    conftest has an autouse fixture that requests ``restore_data_context``)."""
    ctx = _context()
    saved = _snapshot(ctx)
    yield
    _restore(_context(), saved)


@pytest.fixture
def restore_data_context(request):
    ctx = _context()
    saved = _snapshot(ctx)
    yield ctx
    _restore(_context(), saved)


@pytest.fixture(scope="module")
def data_context_override(request):
    """``request.param``: DataContext settings for the module, put back after it."""
    ctx = _context()
    saved = _snapshot(ctx)
    for name, value in (getattr(request, "param", None) or {}).items():
        setattr(ctx, name, value)
    yield ctx
    _restore(_context(), saved)


def _set_for_test(name, value):
    """Sets DataContext ``name`` for one test; yields, then puts the old value back."""
    ctx = _context()
    original = getattr(ctx, name)
    setattr(ctx, name, value)
    try:
        yield value
    finally:
        setattr(ctx, name, original)


@pytest.fixture(params=[1024])
def target_max_block_size(request):
    yield from _set_for_test("target_max_block_size", request.param)


@pytest.fixture(params=[None, DEFAULT_TARGET_MAX_BLOCK_SIZE])
def target_max_block_size_infinite_or_default(request):
    for _ in _set_for_test("target_max_block_size", request.param):
        yield


@pytest.fixture(params=[None])
def target_max_block_size_infinite(request):
    for _ in _set_for_test("target_max_block_size", request.param):
        yield


@pytest.fixture
def disable_fallback_to_object_extension(request, restore_data_context):
    restore_data_context.enable_fallback_to_arrow_object_ext_type = False


@pytest.fixture(params=SHUFFLE_STRATEGIES)
def configure_shuffle_method(request):
    """Sets ``DataContext.shuffle_strategy`` (a ``ShuffleStrategy`` where ray.data.context
    has that enum, else its string value); hash shuffles get 8 partitions, as in Ray."""
    ctx = _context()
    strategy_type = getattr(ray.data.context, "ShuffleStrategy", None)
    strategy = strategy_type(request.param) if strategy_type is not None else request.param
    original_strategy = ctx.shuffle_strategy
    original_parallelism = getattr(ctx, "default_hash_shuffle_parallelism", None)
    ctx.shuffle_strategy = strategy
    if request.param == "hash_shuffle":
        ctx.default_hash_shuffle_parallelism = 8
    yield strategy
    ctx.shuffle_strategy = original_strategy
    if request.param == "hash_shuffle":
        ctx.default_hash_shuffle_parallelism = original_parallelism


@pytest.fixture(params=[True, False])
def use_polars_sort(request):
    yield from _set_for_test("use_polars_sort", request.param)


@pytest.fixture(params=[True, False])
def enable_automatic_tensor_extension_cast(request):
    yield from _set_for_test("enable_tensor_extension_casting", request.param)


@pytest.fixture(params=[True, False])
def enable_auto_log_stats(request):
    yield from _set_for_test("enable_auto_log_stats", request.param)


# --- Paths and filesystems ------------------------------------------------------------


@pytest.fixture
def data_dir():
    yield "test_data"


@pytest.fixture
def data_dir_with_space():
    yield "test data"


@pytest.fixture
def data_dir_with_special_chars():
    yield "test data#fragment?query=test/"


@pytest.fixture
def local_path(tmp_path, data_dir):
    path = os.path.join(tmp_path, data_dir)
    os.mkdir(path)
    yield path


@pytest.fixture
def local_fs():
    yield pyarrow.fs.LocalFileSystem()


@pytest.fixture
def aws_credentials(monkeypatch):
    """Fake AWS credentials in the environment (and as S3FileSystem keywords)."""
    credentials = {"access_key": "testing", "secret_key": "testing", "session_token": "testing"}
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", credentials["access_key"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", credentials["secret_key"])
    monkeypatch.setenv("AWS_SECURITY_TOKEN", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", credentials["session_token"])
    yield credentials


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3_server():
    """A moto S3 server on loopback (its endpoint URL); needs ``moto[server]``."""
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def _s3_path(tmp_path, data_dir, prefix="s3://"):
    return prefix + posixpath.join(str(tmp_path), data_dir).strip("/")


@pytest.fixture
def s3_path(tmp_path, data_dir):
    yield _s3_path(tmp_path, data_dir)


@pytest.fixture
def s3_path_with_space(tmp_path, data_dir_with_space):
    yield _s3_path(tmp_path, data_dir_with_space)


@pytest.fixture
def s3_path_with_special_chars(tmp_path, data_dir_with_special_chars):
    yield "s3://" + posixpath.join(str(tmp_path), data_dir_with_special_chars).lstrip("/")


@pytest.fixture
def s3_path_with_anonymous_crendential(tmp_path, data_dir):
    yield _s3_path(tmp_path, data_dir, prefix="s3://anonymous@")


def _s3_fs(credentials, endpoint, path):
    """A pyarrow S3FileSystem on the moto server, with the directory of ``path`` made."""
    fs = pyarrow.fs.S3FileSystem(
        region="us-west-2",
        endpoint_override=endpoint,
        allow_bucket_creation=True,
        allow_bucket_deletion=True,
        **credentials,
    )
    bare = path.split("://", 1)[-1].split("@")[-1]
    bare = urllib.parse.quote(bare)
    fs.create_dir(bare)
    try:
        yield fs
    finally:
        try:
            if fs.get_file_info(bare).type != pyarrow.fs.FileType.NotFound:
                fs.delete_dir(bare)
        except OSError:
            pass


@pytest.fixture
def s3_fs(aws_credentials, s3_server, s3_path):
    yield from _s3_fs(aws_credentials, s3_server, s3_path)


@pytest.fixture
def s3_fs_with_space(aws_credentials, s3_server, s3_path_with_space):
    yield from _s3_fs(aws_credentials, s3_server, s3_path_with_space)


@pytest.fixture
def s3_fs_with_special_chars(aws_credentials, s3_server, s3_path_with_special_chars):
    yield from _s3_fs(aws_credentials, s3_server, s3_path_with_special_chars)


@pytest.fixture
def s3_fs_with_anonymous_crendential(aws_credentials, s3_server, s3_path_with_anonymous_crendential):
    yield from _s3_fs(aws_credentials, s3_server, s3_path_with_anonymous_crendential)


# --- Data ----------------------------------------------------------------------------


@pytest.fixture
def base_partitioned_df():
    yield pd.DataFrame({"one": [1, 1, 1, 3, 3, 3], "two": ["a", "b", "c", "e", "f", "g"]})


@pytest.fixture
def write_partitioned_df():
    """``write(df, partition_keys, partition_path_encoder, file_writer_fn, suffix)``: writes
    one file per partition of ``df`` under the directories the encoder names; returns
    their paths."""

    def write(df, partition_keys, partition_path_encoder, file_writer_fn, file_name_suffix="_1"):
        paths = []
        for _, part in df.groupby(partition_keys, as_index=False):
            directory = partition_path_encoder([str(part[key].iloc[0]) for key in partition_keys])
            partition_path_encoder.scheme.resolved_filesystem.create_dir(directory)
            scheme = urllib.parse.urlparse(partition_path_encoder.scheme.base_dir).scheme
            name = f"test_{file_name_suffix}.tmp"
            path = posixpath.join(f"{scheme}://{directory}", name) if scheme else os.path.join(directory, name)
            file_writer_fn(part, path)
            paths.append(path)
        return paths

    yield write
