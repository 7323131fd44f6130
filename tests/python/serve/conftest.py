"""Fixtures shared by the Serve tests."""

import pytest

import oxray as ray
from oxray import serve


@pytest.fixture(scope="module")
def cluster():
    """An embedded 2-CPU cluster, as on this machine; Serve shut down after each test."""
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, object_store_memory=200 * 1024**2)
    yield
    ray.shutdown()


@pytest.fixture
def clean_serve(cluster):
    yield
    serve.shutdown()
