"""`oxray.tune.schedulers`: which trials run on, stop early or pause. The
built-in schedulers' decisions are made in the engine's trial controller
(`oxray-tune`); these classes carry the settings, with Ray's names and
defaults. A `TrialScheduler` (or `FIFOScheduler`) subclass of the user's own
decides in the driver through Ray's hooks (`on_trial_result`,
`choose_trial_to_run`, ...), and the engine starts only what it chooses."""

from __future__ import annotations

from typing import Optional


class TrialScheduler:
    """Ray's base of schedulers. A subclass of your own implements Ray's hooks, which the driver
    loop calls with a view of the experiment (`get_trials()`, `get_live_trials()`,
    `has_resources_for_trial(trial)`, `pause_trial(trial)`, `stop_trial(trial)`) as Ray's
    `TuneController`. oxray's own schedulers decide in the engine instead."""

    CONTINUE = "CONTINUE"
    PAUSE = "PAUSE"
    STOP = "STOP"
    NOOP = "NOOP"

    def __init__(self, metric: Optional[str] = None, mode: Optional[str] = None):
        _check_mode(mode)
        self._metric, self._mode = metric, mode

    @property
    def metric(self):
        return self._metric

    def set_search_properties(self, metric, mode, **spec) -> bool:
        if self._metric is None:
            self._metric = metric
        if self._mode is None:
            self._mode = mode
        return True

    @property
    def supports_buffered_results(self) -> bool:
        return True

    def on_trial_add(self, tune_controller, trial) -> None:
        raise _unimplemented(self, "on_trial_add")

    def on_trial_error(self, tune_controller, trial) -> None:
        raise _unimplemented(self, "on_trial_error")

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        """`CONTINUE`, `PAUSE` or `STOP` (`NOOP`: the scheduler paused or stopped it itself)."""
        raise _unimplemented(self, "on_trial_result")

    def on_trial_complete(self, tune_controller, trial, result: dict) -> None:
        raise _unimplemented(self, "on_trial_complete")

    def on_trial_remove(self, tune_controller, trial) -> None:
        raise _unimplemented(self, "on_trial_remove")

    def choose_trial_to_run(self, tune_controller):
        """The PENDING or PAUSED trial to start next, or None."""
        raise _unimplemented(self, "choose_trial_to_run")

    def debug_string(self) -> str:
        raise _unimplemented(self, "debug_string")

    def save(self, checkpoint_path: str):
        raise _unimplemented(self, "save")

    def restore(self, checkpoint_path: str):
        raise _unimplemented(self, "restore")

    def _engine_spec(self) -> tuple:
        # A scheduler of the user's own: its hooks decide, in the driver.
        return ("driver",)


def _unimplemented(scheduler, hook: str) -> NotImplementedError:
    return NotImplementedError(
        f"{type(scheduler).__name__}.{hook}: a TrialScheduler subclass implements every hook, as in Ray "
        "(or subclass FIFOScheduler, which has them all)"
    )


_HOOKS = (
    "on_trial_add",
    "on_trial_error",
    "on_trial_result",
    "on_trial_complete",
    "on_trial_remove",
    "choose_trial_to_run",
)


def engine_spec(scheduler: TrialScheduler) -> tuple:
    """What the engine runs for `scheduler`: its own decisions for oxray's schedulers, `("driver",)`
    (the hooks decide) for a subclass of `TrialScheduler` or `FIFOScheduler` that implements them.
    A subclass of another built-in that overrides a hook is refused by name: the engine makes that
    scheduler's decisions, so the override would never run."""
    cls = type(scheduler)
    owner = next(c for c in cls.__mro__ if "_engine_spec" in c.__dict__)
    if owner is FIFOScheduler:
        own_hooks = any(getattr(cls, hook) is not getattr(FIFOScheduler, hook) for hook in _HOOKS)
        return ("driver",) if own_hooks else ("fifo",)
    overridden = [hook for hook in _HOOKS if getattr(cls, hook) is not getattr(owner, hook)]
    if owner is not TrialScheduler and overridden:
        raise NotImplementedError(
            f"{cls.__name__} overrides {', '.join(overridden)} of {owner.__name__}, whose decisions oxray makes "
            "in its engine, so the override would never run; subclass TrialScheduler or FIFOScheduler to decide "
            "in Python"
        )
    return scheduler._engine_spec()


def _check_mode(mode):
    if mode is not None and mode not in ("min", "max"):
        raise ValueError(f"mode is {mode!r}; expected 'min' or 'max'")


class FIFOScheduler(TrialScheduler):
    """Runs every trial to its end, in the order they were added. Its hooks are Ray's, for
    subclasses that override some of them; FIFOScheduler itself runs in the engine."""

    def __init__(self):
        super().__init__()

    def on_trial_add(self, tune_controller, trial) -> None:
        pass

    def on_trial_error(self, tune_controller, trial) -> None:
        pass

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        return TrialScheduler.CONTINUE

    def on_trial_complete(self, tune_controller, trial, result: dict) -> None:
        pass

    def on_trial_remove(self, tune_controller, trial) -> None:
        pass

    def choose_trial_to_run(self, tune_controller):
        for status in ("PENDING", "PAUSED"):
            for trial in tune_controller.get_trials():
                if trial.status == status and tune_controller.has_resources_for_trial(trial):
                    return trial
        return None

    def debug_string(self) -> str:
        return "Using FIFO scheduling algorithm."

    def _engine_spec(self) -> tuple:
        return ("fifo",)


class AsyncHyperBandScheduler(TrialScheduler):
    """Asynchronous successive halving: at each rung (`grace_period * reduction_factor**k` of
    `time_attr`), a trial whose metric falls below the rung's top `1/reduction_factor` stops."""

    def __init__(
        self,
        time_attr: str = "training_iteration",
        metric: Optional[str] = None,
        mode: Optional[str] = None,
        max_t: float = 100,
        grace_period: float = 1,
        reduction_factor: float = 4,
        brackets: int = 1,
        stop_last_trials: bool = True,
    ):
        super().__init__(metric, mode)
        for name, value in (("max_t", max_t), ("grace_period", grace_period), ("reduction_factor", reduction_factor)):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"ASHAScheduler({name}={value!r}): expected a number")
        if grace_period <= 0:
            raise ValueError(f"ASHAScheduler(grace_period={grace_period!r}): expected a number above 0")
        if max_t < grace_period:
            raise ValueError(f"ASHAScheduler(max_t={max_t!r}): expected at least grace_period ({grace_period!r})")
        if reduction_factor <= 1:
            raise ValueError(f"ASHAScheduler(reduction_factor={reduction_factor!r}): expected a number above 1")
        if isinstance(brackets, bool) or not isinstance(brackets, int) or brackets < 1:
            raise ValueError(f"ASHAScheduler(brackets={brackets!r}): expected an integer >= 1")
        self.time_attr = time_attr
        self.max_t, self.grace_period, self.reduction_factor = max_t, grace_period, reduction_factor
        self.brackets, self.stop_last_trials = brackets, bool(stop_last_trials)

    def _engine_spec(self) -> tuple:
        return (
            "asha",
            float(self.max_t),
            float(self.grace_period),
            float(self.reduction_factor),
            self.brackets,
            self.stop_last_trials,
        )


ASHAScheduler = AsyncHyperBandScheduler


class HyperBandScheduler(TrialScheduler):
    """Synchronous HyperBand: trials are dealt into brackets; a trial pauses at its bracket's
    milestone (a multiple of `time_attr`) until the whole bracket is there, then the best
    `1/reduction_factor` go on to the next milestone and the rest stop. A paused trial restarts
    from its latest checkpoint (a function trainable that never checkpoints starts over)."""

    def __init__(
        self,
        time_attr: str = "training_iteration",
        metric: Optional[str] = None,
        mode: Optional[str] = None,
        max_t: float = 81,
        reduction_factor: float = 3,
        stop_last_trials: bool = True,
    ):
        super().__init__(metric, mode)
        for name, value in (("max_t", max_t), ("reduction_factor", reduction_factor)):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"HyperBandScheduler({name}={value!r}): expected a number")
        if max_t < 1:
            raise ValueError(f"HyperBandScheduler(max_t={max_t!r}): expected a number of 1 or more")
        if reduction_factor <= 1:
            raise ValueError(f"HyperBandScheduler(reduction_factor={reduction_factor!r}): expected a number above 1")
        self.time_attr = time_attr
        self.max_t, self.reduction_factor = max_t, reduction_factor
        self.stop_last_trials = bool(stop_last_trials)

    def _engine_spec(self) -> tuple:
        return ("hyperband", float(self.max_t), float(self.reduction_factor), self.stop_last_trials)


class MedianStoppingRule(TrialScheduler):
    """Past `grace_period` (of `time_attr`), a trial whose best result is worse than the median of
    the other trials' mean results up to the same time stops (with at least `min_samples_required`
    others to compare with)."""

    def __init__(
        self,
        time_attr: str = "time_total_s",
        metric: Optional[str] = None,
        mode: Optional[str] = None,
        grace_period: float = 60.0,
        min_samples_required: int = 3,
        min_time_slice: int = 0,
        hard_stop: bool = True,
    ):
        super().__init__(metric, mode)
        if isinstance(grace_period, bool) or not isinstance(grace_period, (int, float)) or grace_period < 0:
            raise ValueError(f"MedianStoppingRule(grace_period={grace_period!r}): expected a number of 0 or more")
        if (
            isinstance(min_samples_required, bool)
            or not isinstance(min_samples_required, int)
            or min_samples_required < 1
        ):
            raise ValueError(
                f"MedianStoppingRule(min_samples_required={min_samples_required!r}): expected an integer >= 1"
            )
        if not hard_stop:
            raise NotImplementedError(
                "MedianStoppingRule(hard_stop=False) pauses trials, which oxray's Tune does not yet"
            )
        if min_time_slice:
            raise NotImplementedError(
                "MedianStoppingRule(min_time_slice=...) is about pausing, which oxray's Tune does not yet"
            )
        self.time_attr = time_attr
        self.grace_period, self.min_samples_required = grace_period, min_samples_required

    def _engine_spec(self) -> tuple:
        return ("median", float(self.grace_period), self.min_samples_required)


def _not_yet(name: str):
    class NotYet(TrialScheduler):
        def __init__(self, *args, **kwargs):
            raise NotImplementedError(f"{name} is not supported by oxray yet; use ASHAScheduler or FIFOScheduler")

    NotYet.__name__ = NotYet.__qualname__ = name
    return NotYet


class PopulationBasedTraining(TrialScheduler):
    """Asynchronous population based training: every `perturbation_interval` of `time_attr`, past
    `burn_in_period`, a trial in the bottom `quantile_fraction` restarts from the latest checkpoint of
    one in the top (exploit) with that trial's config explored: each of `hyperparam_mutations`
    resampled with `resample_probability`, else a number scaled by one of `perturbation_factors` or a
    list value moved to a neighbour; then `custom_explore_fn`. Trials must report checkpoints.
    The engine decides who exploits whom; the exploring happens here."""

    def __init__(
        self,
        time_attr: str = "time_total_s",
        metric: Optional[str] = None,
        mode: Optional[str] = None,
        perturbation_interval: float = 60.0,
        burn_in_period: float = 0.0,
        hyperparam_mutations: Optional[dict] = None,
        quantile_fraction: float = 0.25,
        resample_probability: float = 0.25,
        perturbation_factors: tuple = (1.2, 0.8),
        custom_explore_fn=None,
        log_config: bool = True,
        require_attrs: bool = True,
        synch: bool = False,
    ):
        super().__init__(metric, mode)
        if not hyperparam_mutations and custom_explore_fn is None:
            raise ValueError(
                "PopulationBasedTraining needs hyperparam_mutations or custom_explore_fn: with neither, nothing "
                "would be explored"
            )
        if hyperparam_mutations is not None and not isinstance(hyperparam_mutations, dict):
            raise ValueError(f"PopulationBasedTraining(hyperparam_mutations={hyperparam_mutations!r}): expected a dict")
        if not 0 <= quantile_fraction <= 0.5:
            raise ValueError(f"PopulationBasedTraining(quantile_fraction={quantile_fraction!r}): expected 0 to 0.5")
        if not 0 <= resample_probability <= 1:
            raise ValueError(f"PopulationBasedTraining(resample_probability={resample_probability!r}): expected 0 to 1")
        if (
            isinstance(perturbation_interval, bool)
            or not isinstance(perturbation_interval, (int, float))
            or (perturbation_interval <= 0)
        ):
            raise ValueError(
                f"PopulationBasedTraining(perturbation_interval={perturbation_interval!r}): expected a number above 0"
            )
        if len(perturbation_factors) != 2:
            raise ValueError(
                f"PopulationBasedTraining(perturbation_factors={perturbation_factors!r}): expected two factors"
            )
        if synch:
            raise NotImplementedError("PopulationBasedTraining(synch=True) is not supported by oxray's Tune yet")
        if not log_config:
            raise NotImplementedError(
                "PopulationBasedTraining(log_config=False) is not supported: oxray always writes pbt_global.txt"
            )
        self.time_attr = time_attr
        self.perturbation_interval, self.burn_in_period = perturbation_interval, burn_in_period
        self.hyperparam_mutations = dict(hyperparam_mutations or {})
        self.quantile_fraction, self.resample_probability = quantile_fraction, resample_probability
        self.perturbation_factors, self.custom_explore_fn = tuple(perturbation_factors), custom_explore_fn
        self.require_attrs = require_attrs
        import random

        self._rng = random.Random()

    def _engine_spec(self) -> tuple:
        return ("pbt", float(self.perturbation_interval), float(self.burn_in_period), float(self.quantile_fraction))

    def _explore(self, config: dict) -> dict:
        import copy

        new = copy.deepcopy(config)
        _explore_into(new, self.hyperparam_mutations, self, self._rng)
        if self.custom_explore_fn is not None:
            explored = self.custom_explore_fn(new)
            if not isinstance(explored, dict):
                raise ValueError(f"custom_explore_fn returned {explored!r}; expected the explored config (a dict)")
            new = explored
        return new


def _explore_into(config: dict, mutations: dict, pbt, rng) -> None:
    from oxray.tune.search.sample import Categorical, Domain

    for key, mutation in mutations.items():
        if isinstance(mutation, dict):
            config.setdefault(key, {})
            _explore_into(config[key], mutation, pbt, rng)
            continue
        current = config.get(key)
        resample = rng.random() < pbt.resample_probability
        if isinstance(mutation, Categorical):
            mutation = mutation.categories
        if isinstance(mutation, (list, tuple)):
            values = list(mutation)
            if resample or current not in values:
                config[key] = rng.choice(values)
            else:
                index = values.index(current) + rng.choice([-1, 1])
                config[key] = values[min(max(index, 0), len(values) - 1)]
        elif isinstance(mutation, Domain) or callable(mutation):
            if resample or not isinstance(current, (int, float)) or isinstance(current, bool):
                config[key] = mutation.sample(rng=rng) if isinstance(mutation, Domain) else mutation()
            else:
                scaled = current * rng.choice(pbt.perturbation_factors)
                config[key] = int(scaled) if isinstance(current, int) else scaled
        else:
            raise ValueError(
                f"hyperparam_mutations[{key!r}] is {mutation!r}; expected a list of values, a tune search space "
                "or a function"
            )


HyperBandForBOHB = _not_yet("HyperBandForBOHB")
PopulationBasedTrainingReplay = _not_yet("PopulationBasedTrainingReplay")
PB2 = _not_yet("PB2")
ResourceChangingScheduler = _not_yet("ResourceChangingScheduler")

__all__ = [
    "ASHAScheduler",
    "AsyncHyperBandScheduler",
    "FIFOScheduler",
    "HyperBandForBOHB",
    "HyperBandScheduler",
    "MedianStoppingRule",
    "PB2",
    "PopulationBasedTraining",
    "PopulationBasedTrainingReplay",
    "ResourceChangingScheduler",
    "TrialScheduler",
]
