"""`Searcher`, the base of search algorithms that suggest one config at a
time and learn from results, and the wrappers `ConcurrencyLimiter` and
`Repeater`."""

from __future__ import annotations

from typing import Any, Optional


class Searcher:
    """Suggests configs. `suggest(trial_id)` returns a config, `None` for "not now" (try again
    later), or `Searcher.FINISHED`."""

    FINISHED = "FINISHED"

    def __init__(self, metric: Optional[str] = None, mode: Optional[str] = None):
        if mode is not None and mode not in ("min", "max"):
            raise ValueError(f"mode is {mode!r}; expected 'min' or 'max'")
        self._metric = metric
        self._mode = mode

    @property
    def metric(self) -> Optional[str]:
        return self._metric

    @property
    def mode(self) -> Optional[str]:
        return self._mode

    def set_search_properties(self, metric: Optional[str], mode: Optional[str], config: dict, **spec) -> bool:
        """Takes the Tuner's metric, mode and param_space unless set already; `False` when it cannot."""
        if self._metric is None and metric is not None:
            self._metric = metric
        if self._mode is None and mode is not None:
            self._mode = mode
        return True

    def suggest(self, trial_id: str) -> Optional[Any]:
        raise NotImplementedError(f"{type(self).__name__}.suggest(trial_id) must return a config")

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        pass

    def on_trial_complete(self, trial_id: str, result: Optional[dict] = None, error: bool = False) -> None:
        pass

    def save(self, checkpoint_path: str) -> None:
        pass

    def restore(self, checkpoint_path: str) -> None:
        pass


class ConcurrencyLimiter(Searcher):
    """At most `max_concurrent` suggested trials live at once."""

    def __init__(self, searcher: Searcher, max_concurrent: int, batch: bool = False):
        if isinstance(max_concurrent, bool) or not isinstance(max_concurrent, int) or max_concurrent < 1:
            raise ValueError(f"ConcurrencyLimiter(max_concurrent={max_concurrent!r}): expected an integer >= 1")
        if batch:
            raise NotImplementedError("ConcurrencyLimiter(batch=True) is not supported by oxray yet")
        super().__init__(searcher.metric, searcher.mode)
        self.searcher = searcher
        self.max_concurrent = max_concurrent
        self._live: set = set()

    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        ok = self.searcher.set_search_properties(metric, mode, config, **spec)
        self._metric, self._mode = self.searcher.metric, self.searcher.mode
        return ok

    def suggest(self, trial_id):
        if len(self._live) >= self.max_concurrent:
            return None
        config = self.searcher.suggest(trial_id)
        if config is not None and config != Searcher.FINISHED:
            self._live.add(trial_id)
        return config

    def on_trial_result(self, trial_id, result):
        self.searcher.on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id, result=None, error=False):
        self._live.discard(trial_id)
        self.searcher.on_trial_complete(trial_id, result=result, error=error)
