"""Fixtures for the ``oxray.data`` tests: one 2-CPU cluster per test module.

The module under test (``oxray`` or, for validation, real ``ray``) comes from
:mod:`data_testutil`.
"""

import pytest
from data_testutil import ray, start_cluster


@pytest.fixture(scope="module")
def data_cluster():
    """A 2-CPU cluster with a 200 MiB object store, shared by a test module."""
    info = start_cluster()
    try:
        yield info
    finally:
        if ray.is_initialized():
            ray.shutdown()


@pytest.fixture(autouse=True)
def _data_cluster_alive(request):
    """Start the module's cluster again if a test shut it down."""
    if "data_cluster" in request.fixturenames and not ray.is_initialized():
        start_cluster()
    yield


@pytest.fixture
def preserve_order(data_cluster):
    """``DataContext.execution_options.preserve_order = True`` for one test."""
    ctx = ray.data.DataContext.get_current()
    before = ctx.execution_options.preserve_order
    ctx.execution_options.preserve_order = True
    try:
        yield ctx
    finally:
        ctx.execution_options.preserve_order = before
