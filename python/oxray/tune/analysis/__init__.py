"""`oxray.tune.analysis`: where Ray keeps `ExperimentAnalysis`."""

from oxray.tune.analysis.experiment_analysis import ExperimentAnalysis

__all__ = ["ExperimentAnalysis"]
