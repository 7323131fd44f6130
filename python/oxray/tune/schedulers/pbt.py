"""`oxray.tune.schedulers.pbt`: Ray's module path of `PopulationBasedTraining`."""

from oxray.tune.schedulers import PopulationBasedTraining

__all__ = ["PopulationBasedTraining"]
