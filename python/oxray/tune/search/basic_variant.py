"""`BasicVariantGenerator`: grid and random search over `param_space`, Tune's
default search algorithm."""

from __future__ import annotations

import random
from typing import Optional

from oxray.tune.search.searcher import Searcher
from oxray.tune.search.variant_generator import generate_variants


class BasicVariantGenerator:
    """Every grid combination `num_samples` times, domains sampled (seeded by `random_state`);
    `points_to_evaluate` first."""

    def __init__(
        self,
        points_to_evaluate: Optional[list] = None,
        max_concurrent: int = 0,
        constant_grid_search: bool = False,
        random_state=None,
    ):
        if constant_grid_search:
            raise NotImplementedError("BasicVariantGenerator(constant_grid_search=True) is not supported by oxray yet")
        if isinstance(max_concurrent, bool) or not isinstance(max_concurrent, int) or max_concurrent < 0:
            raise ValueError(f"BasicVariantGenerator(max_concurrent={max_concurrent!r}): expected 0 (no limit) or more")
        if points_to_evaluate is not None and not all(isinstance(p, dict) for p in points_to_evaluate):
            raise ValueError("BasicVariantGenerator(points_to_evaluate=...): expected a list of config dicts")
        self.points_to_evaluate = [dict(p) for p in points_to_evaluate or []]
        self.max_concurrent = max_concurrent
        self._rng = random_state if isinstance(random_state, random.Random) else random.Random(random_state)
        self._variants = None
        self._live: set = set()
        self.metric = self.mode = None

    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        self.metric, self.mode = metric, mode
        return True

    def start(self, space: dict, num_samples: int) -> None:
        # Drawn up front, so that what is left can be saved with the experiment and restored.
        # num_samples=-1 (Ray's "no limit"): a pass over the grid at a time, for as long as asked.
        self.endless = num_samples == -1
        self._variants = list(generate_variants(space, 1 if self.endless else num_samples, self._rng))
        self._next = 0
        self.total = None if self.endless else len(self._variants) + len(self.points_to_evaluate)
        self._space = space

    def remaining(self) -> list:
        """The variants not turned into trials yet, `points_to_evaluate` first (`(config, resolved)` or a point)."""
        return [("point", p) for p in self.points_to_evaluate] + [("variant", v) for v in self._variants[self._next :]]

    def restore_remaining(self, space: dict, remaining: list) -> None:
        self._space = space
        self.points_to_evaluate = [value for kind, value in remaining if kind == "point"]
        self._variants = [value for kind, value in remaining if kind == "variant"]
        self._next = 0

    def next_variant(self, trial_id: str):
        """`(config, resolved_vars)`, `None` when at the concurrency limit, or `Searcher.FINISHED`."""
        if self.max_concurrent and len(self._live) >= self.max_concurrent:
            return None
        if self.points_to_evaluate:
            point = self.points_to_evaluate.pop(0)
            config, resolved = next(generate_variants(_merge(self._space, point), 1, self._rng))
            self._live.add(trial_id)
            return config, resolved
        if self._next >= len(self._variants):
            if not self.endless:
                return Searcher.FINISHED
            self._variants = self._variants[self._next :] + list(generate_variants(self._space, 1, self._rng))
            self._next = 0
        variant = self._variants[self._next]
        self._next += 1
        self._live.add(trial_id)
        return variant

    def on_trial_result(self, trial_id, result):
        pass

    def on_trial_complete(self, trial_id, result=None, error=False):
        self._live.discard(trial_id)


def _merge(space: dict, point: dict) -> dict:
    merged = dict(space)
    for key, value in point.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged
