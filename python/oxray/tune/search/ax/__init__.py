"""`AxSearch`: refused by name until oxray supports it."""

from oxray.tune.search._refused import refused

AxSearch = refused("AxSearch", "ax-platform")

__all__ = ["AxSearch"]
