"""Tune's older entry points, as Ray keeps them: `tune.run(...)` (a Tuner
under the hood) returning an `ExperimentAnalysis`, and `create_scheduler` /
`create_searcher` by name."""

from __future__ import annotations

from typing import Any, Optional

from oxray.tune.analysis.experiment_analysis import ExperimentAnalysis


def run(
    run_or_experiment,
    name: Optional[str] = None,
    metric: Optional[str] = None,
    mode: Optional[str] = None,
    stop: Any = None,
    time_budget_s: Any = None,
    config: Optional[dict] = None,
    resources_per_trial: Any = None,
    num_samples: int = 1,
    storage_path: Optional[str] = None,
    search_alg: Any = None,
    scheduler: Any = None,
    checkpoint_config: Any = None,
    verbose: Any = None,
    progress_reporter: Any = None,
    log_to_file: Any = False,
    trial_name_creator: Any = None,
    trial_dirname_creator: Any = None,
    max_failures: int = 0,
    fail_fast: Any = False,
    restore: Optional[str] = None,
    resume: Any = None,
    reuse_actors: Optional[bool] = None,
    raise_on_failed_trial: bool = True,
    callbacks: Optional[list] = None,
    max_concurrent_trials: Optional[int] = None,
    **kwargs,
) -> ExperimentAnalysis:
    """Ray's `tune.run`: a `Tuner` with these settings; an `ExperimentAnalysis` back. A failed trial
    raises `TuneError` unless `raise_on_failed_trial=False`."""
    from oxray.tune._internal.runner import TuneError
    from oxray.tune.experiment import Experiment
    from oxray.tune.trainable import with_resources
    from oxray.tune.tune_config import FailureConfig, RunConfig, TuneConfig
    from oxray.tune.tuner import Tuner

    if isinstance(run_or_experiment, Experiment):
        settings = run_or_experiment.run_settings()
        return run(
            run_or_experiment.run,
            metric=metric,
            mode=mode,
            search_alg=search_alg,
            scheduler=scheduler,
            verbose=verbose,
            progress_reporter=progress_reporter,
            fail_fast=fail_fast,
            restore=restore,
            resume=resume,
            reuse_actors=reuse_actors,
            raise_on_failed_trial=raise_on_failed_trial,
            callbacks=callbacks,
            max_concurrent_trials=max_concurrent_trials,
            **settings,
            **kwargs,
        )
    if kwargs:
        raise TypeError(f"tune.run() got arguments oxray does not take: {sorted(kwargs)}")
    if restore is not None:
        raise NotImplementedError("tune.run(restore=...) (a trial from a checkpoint path) is not supported by oxray")
    trainable = run_or_experiment
    if resources_per_trial is not None:
        trainable = with_resources(trainable, resources_per_trial)
    run_config = RunConfig(
        name=name,
        storage_path=storage_path,
        stop=stop,
        callbacks=callbacks,
        verbose=verbose,
        progress_reporter=progress_reporter,
        log_to_file=log_to_file,
        failure_config=FailureConfig(max_failures=max_failures, fail_fast=fail_fast),
        checkpoint_config=checkpoint_config,
    )
    tune_config = TuneConfig(
        metric=metric,
        mode=mode,
        search_alg=search_alg,
        scheduler=scheduler,
        num_samples=num_samples,
        max_concurrent_trials=max_concurrent_trials,
        time_budget_s=time_budget_s,
        reuse_actors=reuse_actors,
        trial_name_creator=trial_name_creator,
        trial_dirname_creator=trial_dirname_creator,
    )
    tuner = None
    if resume not in (None, False):
        tuner = _resumed(resume, storage_path, name, trainable)
    if tuner is None:
        tuner = Tuner(trainable, param_space=config or {}, tune_config=tune_config, run_config=run_config)
    results = tuner.fit()
    trials = tuner._trials
    errored = [t for t in trials if t.status == "ERROR"]
    if errored and raise_on_failed_trial:
        raise TuneError(f"Trials did not complete: {[t.trial_name for t in errored]}")
    return ExperimentAnalysis._of(results, trials, default_metric=metric, default_mode=mode)


# Ray's `tune.run(resume=...)` modes: what becomes of unfinished and of errored trials.
_RESUME_MODES = {
    "": (True, False, False),
    "+ERRORED": (True, True, False),
    "+ERRORED_ONLY": (False, True, False),
    "+RESTART_ERRORED": (True, False, True),
    "+RESTART_ERRORED_ONLY": (False, False, True),
}


def _resumed(resume, storage_path: Optional[str], name: Optional[str], trainable):
    """`Tuner.restore` of the experiment `tune.run(resume=...)` names, or None for a fresh run
    (`"AUTO"` when there is nothing to resume)."""
    import os

    from oxray.tune.tuner import DEFAULT_STORAGE_PATH, Tuner

    text = "LOCAL" if resume is True else str(resume).upper()
    base = next((b for b in ("AUTO", "LOCAL", "REMOTE", "PROMPT") if text.startswith(b)), None)
    if base is None or text[len(base) :] not in _RESUME_MODES or base == "PROMPT":
        raise ValueError(
            f"tune.run(resume={resume!r}): expected True, 'AUTO', 'LOCAL' or 'REMOTE', optionally with "
            "'+ERRORED', '+ERRORED_ONLY', '+RESTART_ERRORED' or '+RESTART_ERRORED_ONLY'"
        )
    if not name:
        raise ValueError(f"tune.run(resume={resume!r}) needs name= to find the experiment to resume")
    root = storage_path or DEFAULT_STORAGE_PATH
    path = root.rstrip("/") + "/" + name if "://" in root else os.path.join(os.path.expanduser(root), name)
    if not Tuner.can_restore(path):
        if base == "AUTO":
            return None
        raise ValueError(f"tune.run(resume={resume!r}): there is no experiment to resume at {path}")
    unfinished, resume_errored, restart_errored = _RESUME_MODES[text[len(base) :]]
    return Tuner.restore(
        path,
        trainable,
        resume_unfinished=unfinished,
        resume_errored=resume_errored,
        restart_errored=restart_errored,
    )


def run_experiments(
    experiments,
    scheduler: Any = None,
    server_port: Optional[int] = None,
    verbose: Any = 2,
    progress_reporter: Any = None,
    resume: Any = None,
    reuse_actors: Optional[bool] = None,
    raise_on_failed_trial: bool = True,
    concurrent: bool = True,
    callbacks: Optional[list] = None,
) -> list:
    """Ray's `tune.run_experiments`: runs each `Experiment` (or `{name: spec}` entry) through `tune.run`
    and returns all their trials. oxray runs several experiments one after another, so it takes
    several only with `concurrent=False`."""
    from oxray.tune.experiment import Experiment

    if server_port is not None:
        raise NotImplementedError("run_experiments(server_port=...): oxray has no Tune server")
    if isinstance(experiments, Experiment):
        experiments = [experiments]
    elif isinstance(experiments, dict):
        experiments = [Experiment.from_json(name, spec) for name, spec in experiments.items()]
    elif not isinstance(experiments, (list, tuple)) or not all(isinstance(e, Experiment) for e in experiments):
        raise ValueError(
            f"run_experiments({experiments!r}): expected an Experiment, a list of them, or a dict of name to spec"
        )
    if len(experiments) > 1 and concurrent:
        raise NotImplementedError(
            "run_experiments with several experiments runs them one after another in oxray; pass concurrent=False"
        )
    trials = []
    for experiment in experiments:
        analysis = run(
            experiment,
            scheduler=scheduler,
            verbose=verbose,
            progress_reporter=progress_reporter,
            resume=resume,
            reuse_actors=reuse_actors,
            raise_on_failed_trial=raise_on_failed_trial,
            callbacks=callbacks,
        )
        trials.extend(analysis.trials)
    return trials


def create_scheduler(scheduler: str, **kwargs):
    """A scheduler by Ray's name (`fifo`, `async_hyperband`/`asynchyperband`, `median_stopping_rule`/
    `medianstopping`, `pbt`, ...)."""
    from oxray.tune import schedulers

    names = {
        "fifo": schedulers.FIFOScheduler,
        "async_hyperband": schedulers.AsyncHyperBandScheduler,
        "asynchyperband": schedulers.AsyncHyperBandScheduler,
        "median_stopping_rule": schedulers.MedianStoppingRule,
        "medianstopping": schedulers.MedianStoppingRule,
        "hyperband": schedulers.HyperBandScheduler,
        "hb_bohb": schedulers.HyperBandForBOHB,
        "pbt": schedulers.PopulationBasedTraining,
        "pbt_replay": schedulers.PopulationBasedTrainingReplay,
        "pb2": schedulers.PB2,
        "resource_changing": schedulers.ResourceChangingScheduler,
    }
    if scheduler not in names:
        raise ValueError(f"create_scheduler({scheduler!r}): expected one of {sorted(names)}")
    return names[scheduler](**kwargs)


def create_searcher(search_alg: str, **kwargs):
    """A search algorithm by Ray's name (`variant_generator`/`random`, `optuna`, ...)."""
    import importlib

    modules = {
        "variant_generator": ("oxray.tune.search.basic_variant", "BasicVariantGenerator"),
        "random": ("oxray.tune.search.basic_variant", "BasicVariantGenerator"),
        "optuna": ("oxray.tune.search.optuna", "OptunaSearch"),
        "hyperopt": ("oxray.tune.search.hyperopt", "HyperOptSearch"),
        "ax": ("oxray.tune.search.ax", "AxSearch"),
        "bayesopt": ("oxray.tune.search.bayesopt", "BayesOptSearch"),
        "bohb": ("oxray.tune.search.bohb", "TuneBOHB"),
        "nevergrad": ("oxray.tune.search.nevergrad", "NevergradSearch"),
        "zoopt": ("oxray.tune.search.zoopt", "ZOOptSearch"),
        "hebo": ("oxray.tune.search.hebo", "HEBOSearch"),
    }
    if search_alg not in modules:
        raise ValueError(f"create_searcher({search_alg!r}): expected one of {sorted(modules)}")
    module, cls = modules[search_alg]
    return getattr(importlib.import_module(module), cls)(**kwargs)
