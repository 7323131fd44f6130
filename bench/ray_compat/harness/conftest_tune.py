"""conftest.py of the harness's copy of python/ray/tune/tests (run.sh puts it there).

Ray Tune's conftest gives ``mock_s3_bucket_uri`` (a fresh bucket on a moto S3 server) and
re-exports ``propagate_logs`` from Ray's core conftest; Tune's test files define their
clusters themselves (``ray_start_2_cpus``, ``ray_start_4_cpus``, ``shutdown_only``... in
each file, which pytest prefers to a conftest's). The Core fixtures (ray_compat_fixtures)
are here too, for the test files that request one without defining it, and as the
``ray.tests.conftest`` those files import from.

Tune writes experiments without a ``storage_path`` under ``~/ray_results``, and Tune's tests
make temporary directories they do not remove: ``HOME`` and ``TMPDIR`` are the work
directory's ``tune_home`` and ``tune_tmp`` for the run, so that nothing is left in the user's
home or in /tmp.
``unittest.mock`` is imported, as Ray's own modules import it: a test of
``test_tuner_restore.py`` calls ``unittest.mock.patch`` having imported only ``unittest``.
``test_searchers.py`` writes ``/tmp/my_test_study.log`` at a fixed path: removed after the
session when the session created it.
"""

import os
import tempfile
import unittest.mock  # noqa: F401 - Ray's own imports load it; test_tuner_restore.py uses it without importing it

import pytest
from ray_compat_fixtures import *  # noqa: F401,F403
from ray_compat_fixtures import _ray_start, call_ray_start_context, reset_ray_address  # noqa: F401

if os.environ.get("RAY_COMPAT_WORK"):
    _home = os.path.join(os.environ["RAY_COMPAT_WORK"], "tune_home")
    _tmp = os.path.join(os.environ["RAY_COMPAT_WORK"], "tune_tmp")
    os.makedirs(_home, exist_ok=True)
    os.makedirs(_tmp, exist_ok=True)
    os.environ["HOME"] = _home
    os.environ["TMPDIR"] = _tmp
    tempfile.tempdir = None  # computed again from TMPDIR (pytest's tmp_path too)


@pytest.fixture
def mock_s3_bucket_uri():
    """An ``s3://`` URI (with pyarrow's query options) of a fresh bucket on a moto server: the
    harness's ``ray.train.tests.test_new_persistence.mock_s3_bucket_uri``, as a string."""
    from ray.train.tests.test_new_persistence import mock_s3_bucket_uri as s3_bucket

    with s3_bucket() as uri:
        yield str(uri)


# Files Tune's tests write at a fixed path outside the work directory (test_searchers.py's
# Optuna journal), removed after the session when it created them.
FIXED_TMP_FILES = ["/tmp/my_test_study.log"]


@pytest.fixture(scope="session", autouse=True)
def remove_fixed_tmp_files():
    existing = {path for path in FIXED_TMP_FILES if os.path.exists(path)}
    yield
    for path in FIXED_TMP_FILES:
        if path not in existing and os.path.exists(path):
            os.remove(path)


@pytest.fixture(autouse=True)
def reset_ray_address_around_test():
    """Forgets the address a cluster published to the environment, before and after each
    test: Tune's fixtures and unittest set-ups call ``ray.init()`` and ``ray.shutdown()``
    themselves, and a later ``ray.init()`` must start a new cluster, not look for that one."""
    reset_ray_address()
    yield
    reset_ray_address()
