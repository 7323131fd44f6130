"""`@serve.multiplexed` and `serve.get_multiplexed_model_id()`: a replica keeps up to
`max_num_models_per_replica` models loaded (least recently used evicted, its `__del__` called,
awaited when async), each loaded once however many requests ask for it at the same time. A
request names its model with `handle.options(multiplexed_model_id=...)` or the HTTP header
`serve_multiplexed_model_id`. Routing does not yet prefer a replica that has the model loaded:
any replica may load it."""

from __future__ import annotations

import asyncio
import collections
import functools
import inspect

from oxray.serve.context import _multiplexed_model_id


def get_multiplexed_model_id() -> str:
    """The model id of the request being served ("" when it named none)."""
    return _multiplexed_model_id.get()


# Called with the replica's loaded model ids whenever they change (set by the replica: it tells
# the controller, whose routers then send a model's requests to the replicas that have it).
_on_models_changed = None
_caches: list = []


def _models_changed() -> None:
    if _on_models_changed is not None:
        _on_models_changed(sorted({m for cache in _caches for m in cache.models}))


class _ModelCache:
    def __init__(self, load, max_models: int):
        self.load, self.max_models = load, max_models
        self.models: collections.OrderedDict = collections.OrderedDict()
        self.loading: dict = {}
        _caches.append(self)

    async def get(self, owner, model_id: str):
        if not isinstance(model_id, str):
            raise TypeError(f"The model ID must be a string, got {type(model_id).__name__}")
        if model_id in self.models:
            self.models.move_to_end(model_id)
            return self.models[model_id]
        pending = self.loading.get(model_id)
        if pending is None:
            pending = self.loading[model_id] = asyncio.ensure_future(self._load(owner, model_id))
        return await asyncio.shield(pending)

    async def _load(self, owner, model_id: str):
        try:
            while self.max_models != -1 and len(self.models) >= self.max_models:
                _, model = self.models.popitem(last=False)
                _models_changed()
                await _unload(model)
            model = await (self.load(owner, model_id) if owner is not None else self.load(model_id))
            self.models[model_id] = model
            _models_changed()
            return model
        finally:
            self.loading.pop(model_id, None)


async def _unload(model) -> None:
    destructor = getattr(model, "__del__", None)
    if destructor is None:
        return
    result = destructor()
    if inspect.isawaitable(result):
        await result


def multiplexed(func=None, max_num_models_per_replica: int = 3):
    """Ray's decorator for an `async def` function or method that loads a model by its id."""
    if (
        isinstance(max_num_models_per_replica, bool)
        or not isinstance(max_num_models_per_replica, int)
        or not (max_num_models_per_replica == -1 or max_num_models_per_replica > 0)
    ):
        raise ValueError(
            f"max_num_models_per_replica={max_num_models_per_replica!r}: expected a positive int, or -1 (no limit)"
        )

    def decorate(load):
        if not inspect.iscoroutinefunction(load):
            raise TypeError("@serve.multiplexed can only be used to decorate async functions or methods.")
        params = list(inspect.signature(load).parameters)
        is_method = bool(params) and params[0] == "self"
        if len(params) != (2 if is_method else 1):
            raise TypeError("@serve.multiplexed functions take exactly one argument, the model id (after self)")
        attribute = f"__serve_multiplexed_{load.__name__}"

        if is_method:

            @functools.wraps(load)
            async def loader(self, model_id: str):
                cache = self.__dict__.get(attribute)
                if cache is None:
                    cache = self.__dict__[attribute] = _ModelCache(load, max_num_models_per_replica)
                return await cache.get(self, model_id)

        else:
            shared = []

            @functools.wraps(load)
            async def loader(model_id: str):
                if not shared:
                    shared.append(_ModelCache(load, max_num_models_per_replica))
                return await shared[0].get(None, model_id)

        return loader

    return decorate(func) if func is not None else decorate
