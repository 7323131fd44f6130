"""`ZOOptSearch`: refused by name until oxray supports it."""

from oxray.tune.search._refused import refused

ZOOptSearch = refused("ZOOptSearch", "zoopt")

__all__ = ["ZOOptSearch"]
