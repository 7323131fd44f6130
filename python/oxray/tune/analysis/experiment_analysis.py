"""`oxray.tune.analysis.experiment_analysis`: Ray's module path of `ExperimentAnalysis`."""

from oxray.tune.run import ExperimentAnalysis

__all__ = ["ExperimentAnalysis"]
