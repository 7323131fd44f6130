"""`HyperOptSearch`: refused by name until oxray supports it."""

from oxray.tune.search._refused import refused

HyperOptSearch = refused("HyperOptSearch", "hyperopt")

__all__ = ["HyperOptSearch"]
