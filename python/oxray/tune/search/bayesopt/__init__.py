"""`BayesOptSearch`: refused by name until oxray supports it."""

from oxray.tune.search._refused import refused

BayesOptSearch = refused("BayesOptSearch", "bayesian-optimization")

__all__ = ["BayesOptSearch"]
