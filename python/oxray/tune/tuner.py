"""`Tuner`: runs a trainable over a search space (Ray's `Tuner`), its
results in an experiment directory laid out as Ray's."""

from __future__ import annotations

import datetime
import functools
import inspect
import os
from typing import Any, Callable, Optional

from oxray import cloudpickle
from oxray.train._internal.storage import is_remote, resolve
from oxray.tune._internal.experiment_storage import ExperimentStorage
from oxray.tune._internal.files import write_atomically
from oxray.tune.callback import Callback, default_loggers
from oxray.tune.class_trainable import Trainable, is_class_trainable, run_class_trainable
from oxray.tune.result_grid import Result, ResultGrid
from oxray.tune.schedulers import FIFOScheduler, TrialScheduler, engine_spec
from oxray.tune.search.basic_variant import BasicVariantGenerator
from oxray.tune.search.searcher import ConcurrencyLimiter, Searcher
from oxray.tune.search.variant_generator import has_unresolved, is_grid
from oxray.tune.stopper import as_stopper
from oxray.tune.trainable import trial_resources
from oxray.tune.tune_config import RunConfig, TuneConfig

DEFAULT_STORAGE_PATH = "~/ray_results"


def _experiment_uri(path, filesystem, what: str) -> str:
    """A storage or experiment path as oxray opens it: a local one absolute, an s3:// one as it is
    (with pyarrow's S3 options, from a `?query` or an `S3FileSystem`, kept for later opens)."""
    root = resolve(path, filesystem, what)
    if is_remote(root):
        if not root.startswith("s3://"):
            raise NotImplementedError(
                f"{what}: {root!r}: oxray's Tune keeps experiments on a local or shared (NFS) path or on s3:// only"
            )
        return root.rstrip("/")
    return os.path.abspath(os.path.expanduser(root.removeprefix("file://")))


def _trainable_name(trainable) -> str:
    return getattr(trainable, "__name__", None) or type(trainable).__name__


class Tuner:
    def __init__(
        self,
        trainable: Optional[Callable] = None,
        *,
        param_space: Optional[dict] = None,
        tune_config: Optional[TuneConfig] = None,
        run_config: Optional[RunConfig] = None,
        _tuner_kwargs: Optional[dict] = None,
        _tuner_internal: Any = None,
    ):
        if trainable is None:
            raise ValueError("Tuner(trainable=None): expected a function trainable")
        if inspect.isclass(trainable) and not issubclass(trainable, Trainable):
            raise TypeError(f"Tuner({trainable!r}): a class trainable must subclass tune.Trainable")
        if isinstance(trainable, str):
            from oxray.tune.registry import get_trainable

            trainable = get_trainable(trainable)
        if not callable(trainable) or (hasattr(trainable, "fit") and not is_class_trainable(trainable)):
            raise TypeError(
                f"Tuner({trainable!r}): expected a function trainable; to tune a Trainer, call its fit() inside a "
                "function (Ray Train v2's pattern)"
            )
        try:
            cloudpickle.dumps(trainable)
        except Exception as e:
            raise TypeError(f"the trainable {_trainable_name(trainable)!r} cannot be serialized: {e}") from e
        if param_space is not None and not isinstance(param_space, dict):
            raise ValueError(f"Tuner(param_space={param_space!r}): expected a dict")
        if tune_config is not None and not isinstance(tune_config, TuneConfig):
            raise ValueError(f"Tuner(tune_config={tune_config!r}): expected a tune.TuneConfig")
        if run_config is not None and not isinstance(run_config, RunConfig):
            raise ValueError(
                f"Tuner(run_config={run_config!r}): expected a tune.RunConfig (ray.tune.RunConfig, not ray.train's)"
            )
        if _tuner_kwargs:
            raise NotImplementedError(f"Tuner(_tuner_kwargs={_tuner_kwargs!r}) is not supported by oxray")
        self._trainable = trainable
        self._param_space = dict(param_space or {})
        self._tune_config = tune_config or TuneConfig()
        self._run_config = run_config or RunConfig()
        self._results: Optional[ResultGrid] = None
        self._restore: Optional[dict] = None

    @classmethod
    def restore(
        cls,
        path: str,
        trainable: Callable,
        resume_unfinished: bool = True,
        resume_errored: bool = False,
        restart_errored: bool = False,
        param_space: Optional[dict] = None,
        storage_filesystem=None,
        _resume_config=None,
    ) -> "Tuner":
        """The experiment at `path` (a killed driver's, or a finished one), to finish with `fit()`.
        The state is pickled: restore only what you trust."""
        if _resume_config is not None:
            resume_unfinished = _resume_config.unfinished == "RESUME"
            resume_errored = _resume_config.errored == "RESUME"
            restart_errored = _resume_config.errored == "RESTART"
        path = _experiment_uri(path, storage_filesystem, "Tuner.restore(path=...)")
        if not cls.can_restore(path):
            raise ValueError(f"Tuner.restore({path!r}): there is no experiment there (no tuner.pkl)")
        if resume_errored and restart_errored:
            raise ValueError("Tuner.restore(): resume_errored and restart_errored are exclusive; pick one")
        parent, _, name = path.rstrip("/").rpartition("/")
        storage = ExperimentStorage(parent, name)
        if storage.remote:
            storage.download()
        with open(os.path.join(storage.local_path, "tuner.pkl"), "rb") as f:
            saved = cloudpickle.load(f)
        if param_space is not None and set(param_space) != set(saved["param_space"]):
            raise ValueError(
                "Tuner.restore(param_space=...) may only give the same keys again (to refresh object refs); "
                f"the experiment has {sorted(saved['param_space'])}"
            )
        tuner = cls(
            trainable,
            param_space=param_space if param_space is not None else saved["param_space"],
            tune_config=saved["tune_config"],
            run_config=saved["run_config"],
        )
        tuner._restore = {
            "storage": storage,
            "unfinished": bool(resume_unfinished),
            "resume_errored": bool(resume_errored),
            "restart_errored": bool(restart_errored),
        }
        return tuner

    @classmethod
    def can_restore(cls, path: str, storage_filesystem=None) -> bool:
        """Whether `path` (local, or s3:// as `RunConfig(storage_path=)` takes it) holds an experiment
        (its `tuner.pkl`)."""
        path = _experiment_uri(path, storage_filesystem, "Tuner.can_restore(path=...)")
        if is_remote(path):
            return ExperimentStorage.exists(path)
        return os.path.isfile(os.path.join(path, "tuner.pkl"))

    def get_results(self) -> ResultGrid:
        if self._results is None:
            raise RuntimeError("get_results(): this Tuner has not run yet; call fit()")
        return self._results

    def fit(self) -> ResultGrid:
        import oxray as ray

        if not ray.is_initialized():
            ray.init()
        from oxray.train._internal.worker_group import warm_torch_workers_if_imported
        from oxray.tune._internal.trial_template import trial_actor_env

        # Picked before torch's template is asked for here: one started now is cold, and would make
        # the first trials wait for it.
        trial_env = trial_actor_env()
        warm_torch_workers_if_imported()
        config, run = self._tune_config, self._run_config
        search = self._search_algorithm()
        scheduler = config.scheduler or FIFOScheduler()
        if not isinstance(scheduler, TrialScheduler):
            raise ValueError(f"TuneConfig(scheduler={scheduler!r}): expected a tune scheduler")
        scheduler.set_search_properties(config.metric, config.mode)
        metric = getattr(scheduler, "metric", None) or config.metric
        mode = getattr(scheduler, "_mode", None) or config.mode
        if engine_spec(scheduler)[0] not in ("fifo", "driver") and (metric is None or mode is None):
            raise ValueError(
                f"{type(scheduler).__name__} needs a metric and a mode: set TuneConfig(metric=..., mode=...) or "
                "pass them to the scheduler"
            )
        self._tune_config = config = TuneConfig(**{**config.__dict__, "metric": metric, "mode": mode})
        name = run.name or f"{_trainable_name(self._trainable)}_{datetime.datetime.now():%Y-%m-%d_%H-%M-%S}"
        if os.environ.get("TUNE_DISABLE_DATED_SUBDIR") == "1" and run.name is None:
            name = _trainable_name(self._trainable)
        if self._restore is not None:
            storage = self._restore["storage"]
            name = storage.name
        else:
            root = _experiment_uri(
                run.storage_path or DEFAULT_STORAGE_PATH, run.storage_filesystem, "RunConfig(storage_path=...)"
            )
            storage = ExperimentStorage(root, name)
        storage.prepare()
        self._write_tuner_pkl(storage.local_path)
        callbacks = list(run.callbacks or [])
        for callback in callbacks:
            if not isinstance(callback, Callback):
                raise ValueError(f"RunConfig(callbacks=[{callback!r}]): expected tune.Callback instances")
        callbacks = default_loggers() + callbacks
        stopper = as_stopper(run.stop)
        total = None
        for callback in callbacks:
            callback.setup(stop=run.stop, num_samples=config.num_samples, total_num_samples=total)
        from oxray.tune._internal.runner import Runner

        runner = Runner(
            trainable=self._trial_body(),
            trainable_name=_trainable_name(self._trainable),
            search=search,
            scheduler=scheduler,
            stopper=stopper,
            callbacks=callbacks,
            storage=storage,
            experiment_name=name,
            tune_config=config,
            run_config=run,
            resources=functools.partial(trial_resources, self._trainable),
            trial_env=trial_env,
        )
        if self._restore is not None:
            from oxray.tune._internal.runner import latest_state

            state, remaining = latest_state(storage.local_path)
            runner.restore(state, remaining, self._param_space, self._restore)
        trials = runner.run()
        self._trials = trials
        self._results = ResultGrid(
            [_result_of(t) for t in trials], storage.experiment_path, default_metric=metric, default_mode=mode
        )
        return self._results

    def _trial_body(self):
        """What a trial's actor runs: the function trainable, or a class trainable's driver."""
        checkpoints = self._run_config.checkpoint_config
        if not is_class_trainable(self._trainable):
            if checkpoints.checkpoint_frequency or checkpoints.checkpoint_at_end:
                raise ValueError(
                    "CheckpointConfig(checkpoint_frequency=, checkpoint_at_end=) only apply to class trainables; a "
                    "function trainable checkpoints by passing checkpoint= to tune.report()"
                )
            return self._trainable
        cls = self._trainable
        frequency = checkpoints.checkpoint_frequency
        at_end = True if checkpoints.checkpoint_at_end is None else bool(checkpoints.checkpoint_at_end)

        def class_trainable(config):
            run_class_trainable(cls, config, frequency, at_end)

        class_trainable.__name__ = cls.__name__
        class_trainable._oxray_tune_resources = getattr(cls, "_oxray_tune_resources", None)
        return class_trainable

    def _search_algorithm(self):
        config = self._tune_config
        search = config.search_alg
        if search is None:
            search = BasicVariantGenerator()
        if isinstance(search, BasicVariantGenerator):
            search.set_search_properties(config.metric, config.mode, self._param_space)
            search.start(self._param_space, config.num_samples)
            if config.max_concurrent_trials:
                search.max_concurrent = search.max_concurrent or 0
            return search
        if not isinstance(search, Searcher):
            raise ValueError(f"TuneConfig(search_alg={search!r}): expected a Searcher or BasicVariantGenerator")
        if config.max_concurrent_trials and isinstance(search, ConcurrencyLimiter):
            raise ValueError(
                "TuneConfig(max_concurrent_trials=...) and a ConcurrencyLimiter both limit concurrency; use one"
            )
        if any(is_grid(v) for v in _leaves(self._param_space)):
            raise ValueError(
                f"{type(search).__name__} cannot take grid_search in param_space; grid search needs the default "
                "search algorithm (BasicVariantGenerator)"
            )
        if not search.set_search_properties(config.metric, config.mode, self._param_space):
            raise ValueError(f"{type(search).__name__} cannot take this param_space, metric or mode")
        if has_unresolved(self._param_space) and not getattr(search, "_takes_space", False):
            raise ValueError(
                f"{type(search).__name__} does not take Tune's search space in param_space; give it its own space"
            )
        return _CountedSearch(search, config.num_samples)

    def _write_tuner_pkl(self, experiment_path: str) -> None:
        state = {
            "trainable": self._trainable,
            "param_space": self._param_space,
            "tune_config": self._tune_config,
            "run_config": self._run_config,
        }
        try:
            data = cloudpickle.dumps(state)
        except Exception as e:
            raise TypeError(f"the Tuner's settings cannot be serialized into tuner.pkl: {e}") from e
        write_atomically(os.path.join(experiment_path, "tuner.pkl"), data)


class _CountedSearch:
    """A `Searcher` asked for at most `num_samples` configs."""

    def __init__(self, searcher: Searcher, num_samples: int):
        self.searcher, self.left = searcher, num_samples

    def suggest(self, trial_id):
        if self.left == 0:
            return Searcher.FINISHED
        config = self.searcher.suggest(trial_id)
        if config is not None and config != Searcher.FINISHED:
            self.left -= 1
        return config

    def on_trial_result(self, trial_id, result):
        self.searcher.on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id, result=None, error=False):
        self.searcher.on_trial_complete(trial_id, result=result, error=error)


def _leaves(space):
    if isinstance(space, dict) and not is_grid(space):
        for value in space.values():
            yield from _leaves(value)
    else:
        yield space


def _result_of(trial) -> Result:
    return Result(
        metrics=trial.last_result or None,
        checkpoint=trial.checkpoint,
        error=trial.error,
        path=trial.path,
        best_checkpoints=list(trial.checkpoints),
        _metrics_history=list(trial.results),
    )
