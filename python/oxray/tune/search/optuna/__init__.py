"""`OptunaSearch`: Ray's wrapper of an Optuna study. Tune asks the study for
each trial's config (`study.ask`) and tells it the trial's result when the
trial ends (`study.tell`). The space is Tune's (`param_space`, converted to
Optuna distributions), Optuna's own distributions, or a define-by-run
function; `metric` and `mode` may be lists (multi-objective)."""

from __future__ import annotations

from typing import Any, Callable, Optional, Union

from oxray.tune.search.sample import Categorical, Float, Function, Integer, Normal
from oxray.tune.search.searcher import Searcher
from oxray.tune.search.variant_generator import domains_of, flatten, is_grid, unflatten


def _optuna():
    try:
        import optuna
    except ImportError as e:
        raise ImportError("OptunaSearch needs the optuna package: pip install optuna") from e
    return optuna


def _distribution(optuna, path: str, domain):
    d = optuna.distributions
    if isinstance(domain, Float):
        return d.FloatDistribution(
            domain.lower, domain.upper, log=domain.log, step=domain.q if not domain.log else None
        )
    if isinstance(domain, Integer):
        # Tune's upper bound is exclusive for q == 1, Optuna's inclusive.
        high = domain.upper if domain.q > 1 else domain.upper - 1
        return d.IntDistribution(domain.lower, high, log=domain.log, step=domain.q if not domain.log else 1)
    if isinstance(domain, Categorical):
        return d.CategoricalDistribution(domain.categories)
    if isinstance(domain, (Normal, Function)):
        raise ValueError(
            f"OptunaSearch cannot take {domain!r} at {path!r} (Optuna has no normal or sample_from distribution); "
            "use uniform, loguniform, randint or choice, or a define-by-run space"
        )
    raise ValueError(f"OptunaSearch cannot take {domain!r} at {path!r}")


class OptunaSearch(Searcher):
    _takes_space = True

    def __init__(
        self,
        space: Union[None, dict, Callable] = None,
        metric: Union[None, str, list] = None,
        mode: Union[None, str, list] = None,
        points_to_evaluate: Optional[list] = None,
        sampler: Any = None,
        study_name: Optional[str] = None,
        storage: Any = None,
        seed: Optional[int] = None,
        evaluated_rewards: Optional[list] = None,
    ):
        self._optuna_module = _optuna()
        multi = isinstance(metric, (list, tuple)) or isinstance(mode, (list, tuple))
        if multi:
            if not isinstance(metric, (list, tuple)) or not isinstance(mode, (list, tuple)) or len(metric) != len(mode):
                raise ValueError(
                    f"OptunaSearch(metric={metric!r}, mode={mode!r}): a multi-objective search needs lists of "
                    "metrics and modes of the same length"
                )
            for m in mode:
                if m not in ("min", "max"):
                    raise ValueError(f"OptunaSearch(mode={mode!r}): expected 'min' or 'max' each")
            self._metric, self._mode = list(metric), list(mode)
        else:
            super().__init__(metric, mode)
        if isinstance(space, dict) and any(is_grid(v) for v in flatten(space).values()):
            raise ValueError("OptunaSearch cannot take grid_search; use choice, or the default search algorithm")
        if evaluated_rewards is not None and (
            points_to_evaluate is None or len(evaluated_rewards) != len(points_to_evaluate)
        ):
            raise ValueError("OptunaSearch(evaluated_rewards=...) needs one reward per point in points_to_evaluate")
        self._space = space
        self._points = list(points_to_evaluate or [])
        self._rewards = evaluated_rewards
        self._sampler = sampler
        self._seed = seed
        self._study_name = study_name
        self._storage = storage
        self._study = None
        self._constants: dict = {}
        self._distributions: Optional[dict] = None
        self._live: dict = {}

    def set_search_properties(self, metric, mode, config: dict, **spec) -> bool:
        if self._metric is None and metric is not None:
            self._metric = metric
        if self._mode is None and mode is not None:
            self._mode = mode
        if self._space is None and config:
            self._space = config
        return True

    @staticmethod
    def convert_search_space(spec: dict) -> dict:
        """Tune's search space as Optuna distributions keyed by '/'-joined paths, as Ray's: what
        `OptunaSearch(space=...)` takes."""
        optuna = _optuna()
        return {path: _distribution(optuna, path, domain) for path, domain in domains_of(spec, "OptunaSearch")}

    def _setup(self) -> None:
        if self._study is not None:
            return
        optuna = self._optuna_module
        if self._metric is None or self._mode is None:
            raise ValueError("OptunaSearch needs a metric and a mode: pass them, or set TuneConfig(metric=, mode=)")
        if self._space is None:
            raise ValueError("OptunaSearch has no search space: pass space= or a param_space to the Tuner")
        if isinstance(self._space, dict):
            flat = flatten(self._space)
            self._distributions, self._constants = {}, {}
            for path, value in flat.items():
                if isinstance(value, (Float, Integer, Categorical, Normal, Function)):
                    self._distributions[path] = _distribution(optuna, path, value)
                elif isinstance(value, optuna.distributions.BaseDistribution):
                    self._distributions[path] = value
                else:
                    self._constants[path] = value
        elif not callable(self._space):
            raise ValueError(f"OptunaSearch(space={self._space!r}): expected a dict or a define-by-run function")
        modes = self._mode if isinstance(self._mode, list) else [self._mode]
        directions = ["maximize" if m == "max" else "minimize" for m in modes]
        sampler = self._sampler or optuna.samplers.TPESampler(seed=self._seed)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._study = optuna.create_study(
            directions=directions,
            sampler=sampler,
            study_name=self._study_name,
            storage=self._storage,
            load_if_exists=self._storage is not None,
        )
        for index, point in enumerate(self._points):
            flat_point = flatten(point)
            if self._rewards is not None and self._distributions is not None:
                values = self._rewards[index]
                self._study.add_trial(
                    optuna.trial.create_trial(
                        params=flat_point,
                        distributions={k: self._distributions[k] for k in flat_point},
                        values=values if isinstance(values, (list, tuple)) else [values],
                    )
                )
            else:
                self._study.enqueue_trial(flat_point)

    def suggest(self, trial_id: str):
        self._setup()
        if self._distributions is not None:
            ot = self._study.ask(fixed_distributions=self._distributions)
            flat = {**self._constants, **ot.params}
        else:
            ot = self._study.ask()
            returned = self._space(ot)
            if returned is not None and not isinstance(returned, dict):
                raise ValueError(
                    f"OptunaSearch's define-by-run space returned {returned!r}; expected None or a dict of constants"
                )
            flat = {**ot.params, **(returned or {})}
        self._live[trial_id] = ot
        return unflatten(flat)

    def on_trial_complete(self, trial_id: str, result: Optional[dict] = None, error: bool = False) -> None:
        ot = self._live.pop(trial_id, None)
        if ot is None:
            return
        state = self._optuna_module.trial.TrialState
        metrics = self._metric if isinstance(self._metric, list) else [self._metric]
        if error or not result or any(m not in result for m in metrics):
            self._study.tell(ot, state=state.FAIL)
            return
        values = [float(result[m]) for m in metrics]
        self._study.tell(ot, values if len(values) > 1 else values[0])
