"""`oxray.tune`: Ray Tune's API. Trials run as actors; the engine's trial
controller (`oxray-tune`) decides which start, what they hold, retries and
the schedulers' verdicts. See README, Tune, for what differs from Ray."""

from oxray.train._checkpoint import Checkpoint
from oxray.tune._internal.runner import TuneError
from oxray.tune.callback import Callback
from oxray.tune.class_trainable import Trainable
from oxray.tune.experiment import Experiment
from oxray.tune.progress_reporter import CLIReporter, JupyterNotebookReporter, ProgressReporter
from oxray.tune.registry import register_env, register_trainable
from oxray.tune.result_grid import Result, ResultGrid
from oxray.tune.run import ExperimentAnalysis, create_scheduler, create_searcher, run, run_experiments
from oxray.tune.search.sample import (
    choice,
    grid_search,
    lograndint,
    loguniform,
    qlograndint,
    qloguniform,
    qrandint,
    qrandn,
    quniform,
    randint,
    randn,
    sample_from,
    uniform,
)
from oxray.tune.session import TuneContext, get_checkpoint, get_context, report
from oxray.tune.stopper import Stopper
from oxray.tune.trainable import PlacementGroupFactory, with_parameters, with_resources
from oxray.tune.tune_config import CheckpointConfig, FailureConfig, ResumeConfig, RunConfig, SyncConfig, TuneConfig
from oxray.tune.tuner import Tuner

__all__ = [
    "CLIReporter",
    "Callback",
    "Checkpoint",
    "CheckpointConfig",
    "Experiment",
    "ExperimentAnalysis",
    "ResumeConfig",
    "SyncConfig",
    "create_scheduler",
    "create_searcher",
    "register_env",
    "register_trainable",
    "run",
    "run_experiments",
    "FailureConfig",
    "JupyterNotebookReporter",
    "PlacementGroupFactory",
    "ProgressReporter",
    "Result",
    "ResultGrid",
    "RunConfig",
    "Stopper",
    "Trainable",
    "TuneConfig",
    "TuneContext",
    "TuneError",
    "Tuner",
    "choice",
    "get_checkpoint",
    "get_context",
    "grid_search",
    "lograndint",
    "loguniform",
    "qlograndint",
    "qloguniform",
    "qrandint",
    "qrandn",
    "quniform",
    "randint",
    "randn",
    "report",
    "sample_from",
    "uniform",
    "with_parameters",
    "with_resources",
]
