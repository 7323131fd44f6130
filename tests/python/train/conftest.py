"""Fixtures shared by the Train tests."""

import pytest

import oxray as ray


@pytest.fixture(scope="module")
def cluster():
    """An embedded 3-CPU cluster for the module's training runs (2 workers and room to spare)."""
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=3, object_store_memory=200 * 1024**2)
    yield
    ray.shutdown()
