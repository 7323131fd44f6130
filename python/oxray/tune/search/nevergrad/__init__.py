"""`NevergradSearch`: refused by name until oxray supports it."""

from oxray.tune.search._refused import refused

NevergradSearch = refused("NevergradSearch", "nevergrad")

__all__ = ["NevergradSearch"]
