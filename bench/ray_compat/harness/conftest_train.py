"""conftest.py of the harness's copy of python/ray/train/v2/tests (run.sh puts it there).

Train v2's own conftest gives ``ray_start_4_cpus`` (init with 4 CPUs), ``shutdown_only``,
and autouse fixtures that set the ``ray.train`` logger to INFO and forget the cluster
address around each test; the GPU and multi-node fixtures are not provided (the filter
excludes their tests).
"""

import logging

import pytest
from ray_compat_fixtures import ray_start_4_cpus, reset_ray_address, shutdown_only  # noqa: F401


@pytest.fixture(autouse=True)
def setup_logging():
    logger = logging.getLogger("ray.train")
    level = logger.getEffectiveLevel()
    logger.setLevel(logging.INFO)
    yield
    logger.setLevel(level)


@pytest.fixture(autouse=True)
def reset_ray_address_around_test():
    reset_ray_address()
    yield
    reset_ray_address()
