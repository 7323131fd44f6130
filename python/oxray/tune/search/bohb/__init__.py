"""`TuneBOHB`: refused by name until oxray supports it."""

from oxray.tune.search._refused import refused

TuneBOHB = refused("TuneBOHB", "hpbandster")

__all__ = ["TuneBOHB"]
