"""Fixtures shared by the Tune tests."""

import pytest

import oxray as ray


@pytest.fixture(scope="module")
def cluster():
    """An embedded 2-CPU cluster, as on this machine."""
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, object_store_memory=200 * 1024**2)
    yield
    ray.shutdown()
