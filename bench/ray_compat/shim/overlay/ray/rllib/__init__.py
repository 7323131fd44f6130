"""``ray.rllib``: oxray has no RLlib. Tune's test files call ``_register_all()`` after
``ray.shutdown()`` to register RLlib's algorithms again as trainables: with no RLlib
algorithms to register, it does nothing."""

from _ray_compat_shim import lenient_getattr

__getattr__ = lenient_getattr(__name__)


def _register_all() -> None:
    """RLlib's algorithms registered as Tune trainables again: there are none in oxray."""
