"""`TuneConfig`, and Tune's `RunConfig`, `CheckpointConfig` and
`FailureConfig` (Ray's names and defaults). Every option is either enforced
or refused with an error naming it."""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass
class TuneConfig:
    mode: Optional[str] = None
    metric: Optional[str] = None
    search_alg: Any = None
    scheduler: Any = None
    num_samples: int = 1
    max_concurrent_trials: Optional[int] = None
    time_budget_s: Union[int, float, datetime.timedelta, None] = None
    reuse_actors: Optional[bool] = None
    trial_name_creator: Optional[Callable] = None
    trial_dirname_creator: Optional[Callable] = None
    chdir_to_trial_dir: Any = "DEPRECATED"

    def __post_init__(self):
        if self.mode is not None and self.mode not in ("min", "max"):
            raise ValueError(f"TuneConfig(mode={self.mode!r}): expected 'min' or 'max'")
        if self.metric is not None and not isinstance(self.metric, str):
            raise ValueError(f"TuneConfig(metric={self.metric!r}): expected the name of a reported metric")
        if not _is_int(self.num_samples) or (self.num_samples < 1 and self.num_samples != -1):
            raise ValueError(
                f"TuneConfig(num_samples={self.num_samples!r}): expected an integer >= 1 (or -1 for no limit)"
            )
        if self.max_concurrent_trials is not None and (
            not _is_int(self.max_concurrent_trials) or self.max_concurrent_trials < 0
        ):
            raise ValueError(
                f"TuneConfig(max_concurrent_trials={self.max_concurrent_trials!r}): expected None or an integer >= 0"
            )
        if isinstance(self.time_budget_s, datetime.timedelta):
            self.time_budget_s = self.time_budget_s.total_seconds()
        if self.time_budget_s is not None and (
            isinstance(self.time_budget_s, bool)
            or not isinstance(self.time_budget_s, (int, float))
            or self.time_budget_s <= 0
        ):
            raise ValueError(
                f"TuneConfig(time_budget_s={self.time_budget_s!r}): expected seconds above 0 or a timedelta"
            )
        if self.reuse_actors not in (None, True, False):
            raise ValueError(f"TuneConfig(reuse_actors={self.reuse_actors!r}): expected None, True or False")
        if self.chdir_to_trial_dir != "DEPRECATED":
            raise DeprecationWarning(
                "TuneConfig(chdir_to_trial_dir=...) is deprecated; set RAY_CHDIR_TO_TRIAL_DIR=0 to keep the cwd"
            )
        for name in ("trial_name_creator", "trial_dirname_creator"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise ValueError(f"TuneConfig({name}={value!r}): expected a function of the trial")


@dataclass
class FailureConfig:
    max_failures: int = 0
    fail_fast: Union[bool, str] = False

    def __post_init__(self):
        if not _is_int(self.max_failures) or self.max_failures < -1:
            raise ValueError(
                f"FailureConfig(max_failures={self.max_failures!r}): expected an integer >= 0, or -1 for unlimited"
            )
        if self.fail_fast not in (False, True, "raise"):
            raise ValueError(f"FailureConfig(fail_fast={self.fail_fast!r}): expected False, True or 'raise'")
        if self.fail_fast and self.max_failures != 0:
            raise ValueError(
                "FailureConfig(fail_fast=...) needs max_failures=0: a failure cannot be both retried and fail fast"
            )


@dataclass
class CheckpointConfig:
    num_to_keep: Optional[int] = None
    checkpoint_score_attribute: Optional[str] = None
    checkpoint_score_order: str = "max"
    checkpoint_frequency: int = 0
    checkpoint_at_end: Optional[bool] = None

    def __post_init__(self):
        if self.num_to_keep is not None and (not _is_int(self.num_to_keep) or self.num_to_keep < 1):
            raise ValueError(
                f"CheckpointConfig(num_to_keep={self.num_to_keep!r}): expected None (keep all) or an integer >= 1"
            )
        if self.checkpoint_score_order not in ("max", "min"):
            raise ValueError(
                f"CheckpointConfig(checkpoint_score_order={self.checkpoint_score_order!r}): expected 'max' or 'min'"
            )
        if not _is_int(self.checkpoint_frequency) or self.checkpoint_frequency < 0:
            raise ValueError(
                f"CheckpointConfig(checkpoint_frequency={self.checkpoint_frequency!r}): expected an integer >= 0"
            )


@dataclass
class SyncConfig:
    """Ray's syncing of driver and trial files to storage. oxray uploads a remote experiment's driver
    files at every state write (every 10 s and at each trial's end) and its trials upload their
    checkpoints themselves, so only the defaults are accepted (anything else is refused by name)."""

    sync_period: int = 300
    sync_timeout: int = 1800
    sync_artifacts: bool = False
    sync_artifacts_on_checkpoint: bool = True


class ResumeType:
    RESUME = "RESUME"
    RESTART = "RESTART"
    SKIP = "SKIP"


@dataclass
class ResumeConfig:
    """What `Tuner.restore` does with finished, unfinished and errored trials (Ray's DeveloperAPI)."""

    finished: str = ResumeType.SKIP
    unfinished: str = ResumeType.RESUME
    errored: str = ResumeType.SKIP

    def __post_init__(self):
        if self.finished != ResumeType.SKIP:
            raise NotImplementedError(f"ResumeConfig(finished={self.finished!r}): finished trials are never rerun")
        if self.unfinished not in (ResumeType.RESUME, ResumeType.SKIP):
            raise ValueError(f"ResumeConfig(unfinished={self.unfinished!r}): expected RESUME or SKIP")
        if self.errored not in (ResumeType.RESUME, ResumeType.RESTART, ResumeType.SKIP):
            raise ValueError(f"ResumeConfig(errored={self.errored!r}): expected RESUME, RESTART or SKIP")


@dataclass
class RunConfig:
    name: Optional[str] = None
    storage_path: Optional[str] = None
    storage_filesystem: Any = None
    failure_config: Optional[FailureConfig] = None
    checkpoint_config: Optional[CheckpointConfig] = None
    sync_config: Any = None
    verbose: Any = None
    stop: Any = None
    callbacks: Optional[list] = None
    progress_reporter: Any = None
    log_to_file: Any = False

    def __post_init__(self):
        self.failure_config = self.failure_config or FailureConfig()
        self.checkpoint_config = self.checkpoint_config or CheckpointConfig()
        if not isinstance(self.failure_config, FailureConfig):
            raise ValueError(f"RunConfig(failure_config={self.failure_config!r}): expected a tune.FailureConfig")
        if not isinstance(self.checkpoint_config, CheckpointConfig):
            raise ValueError(
                f"RunConfig(checkpoint_config={self.checkpoint_config!r}): expected a tune.CheckpointConfig"
            )
        if self.storage_path is not None:
            if not isinstance(self.storage_path, (str, os.PathLike)):
                raise ValueError(
                    f"RunConfig(storage_path={self.storage_path!r}): expected a local path or an s3:// URI"
                )
            scheme = str(self.storage_path).partition("://")[0] if "://" in str(self.storage_path) else ""
            if scheme not in ("", "s3", "file"):
                raise NotImplementedError(
                    f"RunConfig(storage_path={self.storage_path!r}): oxray's Tune keeps experiments on a local "
                    "or shared (NFS) path or on s3:// only"
                )
        if self.sync_config is not None:
            if not isinstance(self.sync_config, SyncConfig):
                raise ValueError(f"RunConfig(sync_config={self.sync_config!r}): expected a tune.SyncConfig")
            if self.sync_config != SyncConfig():
                raise NotImplementedError(
                    f"RunConfig(sync_config={self.sync_config!r}): oxray uploads a remote experiment's files at "
                    "every state write and trials upload their own checkpoints; only the default SyncConfig() is taken"
                )
        if self.progress_reporter is not None and not (
            callable(getattr(self.progress_reporter, "should_report", None))
            and callable(getattr(self.progress_reporter, "report", None))
        ):
            raise ValueError(
                f"RunConfig(progress_reporter={self.progress_reporter!r}): expected a tune.ProgressReporter "
                "(tune.CLIReporter, tune.JupyterNotebookReporter, or a subclass with should_report and report)"
            )
        self.log_files()  # a bad log_to_file fails here, before any trial
        if self.verbose not in (None, 0, 1, 2, 3):
            raise ValueError(f"RunConfig(verbose={self.verbose!r}): expected 0, 1 or 2")
        if self.callbacks is not None and not isinstance(self.callbacks, (list, tuple)):
            raise ValueError(f"RunConfig(callbacks={self.callbacks!r}): expected a list of tune.Callback")
        if self.name is not None:
            from oxray.train._internal.storage import check_name

            check_name("RunConfig(name=...)", self.name)

    def log_files(self) -> tuple:
        """Where a trial's stdout and stderr go, as Ray's `log_to_file`: file names in the trial's
        directory, or None for the worker's log (and the driver's terminal). True is `stdout` and
        `stderr`; one name takes both; a pair names each (None leaves that stream alone)."""
        value = self.log_to_file
        if value is None or value is False:
            return (None, None)
        if value is True:
            return ("stdout", "stderr")
        if isinstance(value, str) and value:
            return (value, value)
        if (
            isinstance(value, (tuple, list))
            and len(value) == 2
            and all(v is None or (isinstance(v, str) and v) for v in value)
        ):
            return tuple(value)
        raise ValueError(
            f"RunConfig(log_to_file={value!r}): expected True, a file name, or a (stdout, stderr) pair of "
            "file names (or None) in the trial's directory"
        )
