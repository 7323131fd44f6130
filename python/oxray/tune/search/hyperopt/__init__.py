"""`HyperOptSearch`: Ray's wrapper of HyperOpt's tree-structured Parzen
estimator. Each trial's config is one `tpe.suggest` over the experiment's
`Trials`; its result goes back into them as the trial's loss (the metric,
negated for `mode="max"`). The space is Tune's (`param_space`, converted to
HyperOpt's `hp.*` expressions) or HyperOpt's own."""

from __future__ import annotations

import math
from functools import partial
from typing import Any, Optional

from oxray.tune.search.sample import Categorical, Float, Function, Integer, Normal
from oxray.tune.search.searcher import Searcher
from oxray.tune.search.variant_generator import domains_of, flatten, is_grid, unflatten


def _hyperopt():
    try:
        import hyperopt
    except ImportError as e:
        raise ImportError("HyperOptSearch needs the hyperopt package: pip install hyperopt") from e
    return hyperopt


def _expression(hp, path: str, domain):
    """Tune's domain at `path` as a HyperOpt expression (bounds as Tune defines them)."""
    if isinstance(domain, Float):
        if domain.log and domain.q:
            return hp.qloguniform(path, math.log(domain.lower), math.log(domain.upper), domain.q)
        if domain.log:
            return hp.loguniform(path, math.log(domain.lower), math.log(domain.upper))
        if domain.q:
            return hp.quniform(path, domain.lower, domain.upper, domain.q)
        return hp.uniform(path, domain.lower, domain.upper)
    if isinstance(domain, Integer):
        if domain.log or domain.q > 1:
            raise ValueError(
                f"HyperOptSearch cannot take {domain!r} at {path!r} (a quantized or log-uniform integer); use "
                "randint, or HyperOpt's own hp.qloguniform in the searcher's space"
            )
        return hp.randint(path, domain.lower, domain.upper)
    if isinstance(domain, Categorical):
        return hp.choice(path, domain.categories)
    if isinstance(domain, Normal):
        return (
            hp.qnormal(path, domain.mean, domain.sd, domain.q) if domain.q else hp.normal(path, domain.mean, domain.sd)
        )
    if isinstance(domain, Function):
        raise ValueError(f"HyperOptSearch cannot take sample_from at {path!r}; give it HyperOpt's own space")
    raise ValueError(f"HyperOptSearch cannot take {domain!r} at {path!r}")


class HyperOptSearch(Searcher):
    _takes_space = True

    def __init__(
        self,
        space: Optional[dict] = None,
        metric: Optional[str] = None,
        mode: Optional[str] = None,
        points_to_evaluate: Optional[list] = None,
        n_initial_points: int = 20,
        random_state_seed: Optional[int] = None,
        gamma: float = 0.25,
    ):
        self._hyperopt = _hyperopt()
        super().__init__(metric, mode)
        if space is not None and not isinstance(space, dict):
            raise ValueError(f"HyperOptSearch(space={space!r}): expected a dict of hp.* expressions")
        if space is not None and any(is_grid(v) for v in flatten(space).values()):
            raise ValueError("HyperOptSearch cannot take grid_search; use choice, or the default search algorithm")
        if isinstance(n_initial_points, bool) or not isinstance(n_initial_points, int) or n_initial_points < 1:
            raise ValueError(f"HyperOptSearch(n_initial_points={n_initial_points!r}): expected an integer >= 1")
        self._space = space
        self._points = list(points_to_evaluate or [])
        self._n_initial_points, self._gamma = n_initial_points, gamma
        self._seed = random_state_seed
        self._domain = None
        self._trials = None
        self._live: dict = {}
        self._count = 0

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
        """Tune's search space as HyperOpt `hp.*` expressions, nested as `spec` is, as Ray's: what
        `HyperOptSearch(space=...)` takes."""
        hp = _hyperopt().hp
        return unflatten({path: _expression(hp, path, domain) for path, domain in domains_of(spec, "HyperOptSearch")})

    def _setup(self) -> None:
        if self._domain is not None:
            return
        hyperopt = self._hyperopt
        if self._metric is None or self._mode is None:
            raise ValueError("HyperOptSearch needs a metric and a mode: pass them, or set TuneConfig(metric=, mode=)")
        if self._space is None:
            raise ValueError("HyperOptSearch has no search space: pass space= or a param_space to the Tuner")
        expressions = {}
        for path, value in flatten(self._space).items():
            if isinstance(value, (Float, Integer, Categorical, Normal, Function)):
                expressions[path] = _expression(hyperopt.hp, path, value)
            else:
                expressions[path] = value  # an hp.* expression of the user's, or a constant
        self._expressions = expressions
        self._domain = hyperopt.base.Domain(lambda config: config, expressions)
        self._trials = hyperopt.Trials()
        import numpy as np

        self._rng = np.random.default_rng(self._seed)
        self._algorithm = partial(hyperopt.tpe.suggest, n_startup_jobs=self._n_initial_points, gamma=self._gamma)

    def suggest(self, trial_id: str):
        self._setup()
        hyperopt = self._hyperopt
        if self._points:
            point = flatten(self._points.pop(0))
            config = {**{k: v for k, v in self._expressions.items() if not _is_expression(v)}, **point}
            self._live[trial_id] = None
            return unflatten(config)
        ids = self._trials.new_trial_ids(1)
        self._trials.refresh()
        docs = self._algorithm(ids, self._domain, self._trials, int(self._rng.integers(2**31 - 1)))
        self._trials.insert_trial_docs(docs)
        self._trials.refresh()
        doc = docs[0]
        values = {k: v[0] for k, v in doc["misc"]["vals"].items() if v}
        config = hyperopt.space_eval(self._expressions, values)
        self._live[trial_id] = doc["tid"]
        return unflatten(config)

    def on_trial_complete(self, trial_id: str, result: Optional[dict] = None, error: bool = False) -> None:
        tid = self._live.pop(trial_id, None)
        if tid is None:
            return
        hyperopt = self._hyperopt
        doc = next(t for t in self._trials._dynamic_trials if t["tid"] == tid)
        if error or not result or self._metric not in result:
            doc["state"] = hyperopt.JOB_STATE_ERROR
        else:
            value = float(result[self._metric])
            doc["state"] = hyperopt.JOB_STATE_DONE
            doc["result"] = {"loss": -value if self._mode == "max" else value, "status": hyperopt.STATUS_OK}
        self._trials.refresh()


def _is_expression(value: Any) -> bool:
    return type(value).__module__.startswith("hyperopt")


__all__ = ["HyperOptSearch"]
