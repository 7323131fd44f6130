"""conftest.py of the harness's copy of python/ray/tests (run.sh puts it there).

The fixtures are the harness's own (ray_compat_fixtures), on oxray's public API.
``from ray.tests.conftest import X`` in a test file reaches this module.
"""

from ray_compat_fixtures import *  # noqa: F401,F403
from ray_compat_fixtures import _ray_start, call_ray_start_context, reset_ray_address  # noqa: F401
