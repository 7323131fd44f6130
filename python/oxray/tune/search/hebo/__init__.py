"""`HEBOSearch`: refused by name until oxray supports it."""

from oxray.tune.search._refused import refused

HEBOSearch = refused("HEBOSearch", "HEBO")

__all__ = ["HEBOSearch"]
