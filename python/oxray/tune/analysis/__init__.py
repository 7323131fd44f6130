"""`oxray.tune.analysis`: where Ray keeps `ExperimentAnalysis`."""

from oxray.tune.run import ExperimentAnalysis

__all__ = ["ExperimentAnalysis"]
