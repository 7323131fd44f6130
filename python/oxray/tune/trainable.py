"""Wrapping a trainable: `with_parameters` (large objects through the object
store, put once) and `with_resources` (what each trial's actor holds), and
`PlacementGroupFactory`."""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable


class PlacementGroupFactory:
    """The bundles a trial reserves: its actor runs in the first, and the tasks and actors it starts
    are placed in the group (the rest of the bundles), as in Ray."""

    def __init__(self, bundles: list, strategy: str = "PACK", *args, **kwargs):
        if not isinstance(bundles, list) or not bundles or not all(isinstance(b, dict) for b in bundles):
            raise ValueError(f"PlacementGroupFactory({bundles!r}): expected a non-empty list of resource dicts")
        if strategy not in ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"):
            raise ValueError(
                f"PlacementGroupFactory(strategy={strategy!r}): expected PACK, SPREAD, STRICT_PACK or STRICT_SPREAD"
            )
        self.bundles = [dict(b) for b in bundles]
        self.strategy = strategy

    @property
    def required_resources(self) -> dict:
        total: dict = {}
        for bundle in self.bundles:
            for key, value in bundle.items():
                total[key] = total.get(key, 0) + value
        return total


_ALIASES = {"cpu": "CPU", "gpu": "GPU", "CPU": "CPU", "GPU": "GPU"}


def normalize_resources(resources: Any) -> dict:
    """A trial's resources as the engine counts them (`CPU`, `GPU`, custom names)."""
    if isinstance(resources, PlacementGroupFactory):
        resources = resources.required_resources
    if not isinstance(resources, dict):
        raise ValueError(
            f"tune.with_resources(..., {resources!r}): expected a dict such as {{'cpu': 1}} or a PlacementGroupFactory"
        )
    out = {}
    for key, value in resources.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"tune.with_resources: {key!r} is {value!r}; expected an amount of 0 or more")
        if key in ("memory", "object_store_memory"):
            raise NotImplementedError(f"tune.with_resources: {key!r} is not supported by oxray's Tune yet")
        name = _ALIASES.get(key, key)
        if value:
            out[name] = out.get(name, 0) + float(value)
    return out


def placement_of(resources: Any):
    """`(bundles, strategy)` of a PlacementGroupFactory of more than one bundle (the trial then runs in
    a placement group of its own), else None."""
    if not isinstance(resources, PlacementGroupFactory) or len(resources.bundles) == 1:
        return None
    bundles = [normalize_resources(bundle) for bundle in resources.bundles]
    return bundles, resources.strategy


# What `with_resources` attaches to a trainable (and `with_parameters` carries over).
_RESOURCE_ATTRIBUTES = ("_oxray_tune_resources", "_oxray_tune_placement", "_oxray_tune_resources_of")


def with_resources(trainable: Callable, resources: Any) -> Callable:
    """`trainable` whose trials each hold `resources`: a dict, a `PlacementGroupFactory`, or a
    function of the trial's config returning either (called for each trial as it is added)."""
    if callable(resources) and not isinstance(resources, (dict, PlacementGroupFactory)):
        attributes = {
            "_oxray_tune_resources": None,
            "_oxray_tune_placement": None,
            "_oxray_tune_resources_of": resources,
        }
    else:
        attributes = {
            "_oxray_tune_resources": normalize_resources(resources),
            "_oxray_tune_placement": placement_of(resources),
            "_oxray_tune_resources_of": None,
        }
    if inspect.isclass(trainable):
        # A class trainable stays a class (the Tuner drives its methods).
        return type(trainable.__name__, (trainable,), attributes)

    @functools.wraps(trainable)
    def wrapped(config, **kwargs):
        return trainable(config, **kwargs)

    for name, value in attributes.items():
        setattr(wrapped, name, value)
    return wrapped


def with_parameters(trainable: Callable, **kwargs) -> Callable:
    """`trainable(config, **kwargs)` with each value put in the object store once and fetched in
    the trial, instead of being pickled into every trial."""
    import oxray

    refs = {name: oxray.put(value) for name, value in kwargs.items()}
    if inspect.isclass(trainable):
        # A class trainable gets them in `setup(config, **kwargs)`, as in Ray.
        def setup(self, config):
            import oxray as ray

            return trainable.setup(self, config, **{name: ray.get(ref) for name, ref in refs.items()})

        return type(trainable.__name__, (trainable,), {"setup": setup, "__qualname__": trainable.__qualname__})

    @functools.wraps(trainable)
    def wrapped(config):
        import oxray as ray

        return trainable(config, **{name: ray.get(ref) for name, ref in refs.items()})

    for name in _RESOURCE_ATTRIBUTES:
        if getattr(trainable, name, None) is not None:
            setattr(wrapped, name, getattr(trainable, name))
    return wrapped


def trial_resources(trainable: Callable, config: dict) -> tuple:
    """`(resources, learns_demand, placement)` of a trial with `config`: what it holds (from
    `with_resources`, else a class trainable's `default_resource_request(config)`), whether that is
    Tune's default (`{"CPU": 1}`, counted by Tune only and replaced by its Train run's workers once
    one starts), and its placement group's `(bundles, strategy)` when it asks for several bundles."""
    resources_of = getattr(trainable, "_oxray_tune_resources_of", None)
    if resources_of is not None:
        request = resources_of(config)
        if not isinstance(request, (dict, PlacementGroupFactory)):
            raise ValueError(
                f"the function given to tune.with_resources returned {request!r} for config {config!r}; expected "
                "a dict of resources or a PlacementGroupFactory"
            )
        return normalize_resources(request), False, placement_of(request)
    declared = getattr(trainable, "_oxray_tune_resources", None)
    if declared is not None:
        return dict(declared), False, getattr(trainable, "_oxray_tune_placement", None)
    from oxray.tune.class_trainable import Trainable

    if inspect.isclass(trainable) and issubclass(trainable, Trainable):
        request = trainable.default_resource_request(config)
        if request is not None:
            return normalize_resources(request), False, placement_of(request)
    return {"CPU": 1.0}, True, None
