"""Turns a `param_space` into concrete configs as Ray does: every grid value
crossed with every other grid (the first key varying fastest), times
`num_samples`; domains sampled; `sample_from` functions called last, with the
config resolved so far."""

from __future__ import annotations

import copy
import itertools
import random
from typing import Any, Iterator

from oxray.tune.search.sample import Domain, Function

Path = tuple


def is_grid(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"grid_search"}


def _walk(space: Any, path: Path = ()) -> Iterator[tuple[Path, Any]]:
    """`(path, value)` of every leaf; a grid or a domain is a leaf."""
    if isinstance(space, dict) and not is_grid(space):
        for key, value in space.items():
            yield from _walk(value, (*path, key))
    elif isinstance(space, (list, tuple)) and any(isinstance(v, (Domain, dict)) for v in space):
        for index, value in enumerate(space):
            yield from _walk(value, (*path, index))
    else:
        yield path, space


def domains_of(space: dict, searcher: str) -> Iterator[tuple[str, Any]]:
    """`('/'-joined path, domain)` of each search-space leaf of `space`, for a searcher's
    `convert_search_space` (constants are left out, as Ray leaves them); a grid is refused, naming
    `searcher`."""
    for path, value in _walk(space):
        name = "/".join(str(p) for p in path)
        if is_grid(value):
            raise ValueError(f"{searcher} cannot convert grid_search at {name!r}; grid search needs the default search")
        if isinstance(value, Domain):
            yield name, value


def _set(config: Any, path: Path, value: Any) -> None:
    for key in path[:-1]:
        config = config[key]
    config[path[-1]] = value


class RecursiveDependencyError(Exception):
    """A `sample_from` function reads a key that is not resolved yet, and never can be (it reads
    itself, or functions read each other in a cycle). Ray's name and message."""


class _Unresolved(Exception):
    """A function read a key not resolved yet: it is tried again after the others."""

    def __init__(self, key):
        super().__init__(key)
        self.key = key


def _guarded(key, value):
    if isinstance(value, Domain) or is_grid(value):
        raise _Unresolved(key)
    if isinstance(value, dict) and not isinstance(value, _Spec):
        return _Spec(value)
    return value


class _Spec(dict):
    """What `sample_from(func)` gets: the config resolved so far (`config["key"]` or `config.key`;
    or, on Ray's retry, the older spec `{"config": config}`). Reading a key whose value is not
    resolved yet defers the function until the others are."""

    def __getattr__(self, name):
        try:
            value = dict.__getitem__(self, name)
        except KeyError:
            raise AttributeError(name) from None
        return _guarded(name, value)

    def __getitem__(self, key):
        return _guarded(key, dict.__getitem__(self, key))

    def get(self, key, default=None):
        return self[key] if key in self else default


def has_unresolved(space: Any) -> bool:
    return any(is_grid(v) or isinstance(v, Domain) for _, v in _walk(space))


def grid_size(space: Any) -> int:
    size = 1
    for _, value in _walk(space):
        if is_grid(value):
            size *= len(value["grid_search"])
    return size


def generate_variants(space: dict, num_samples: int, rng: random.Random) -> Iterator[tuple[dict, dict]]:
    """`(config, resolved_vars)` for each trial: `resolved_vars` maps the path of each key that
    varied to its value (for the trial's tag)."""
    leaves = list(_walk(space))
    grids = [(path, value["grid_search"]) for path, value in leaves if is_grid(value)]
    # The first grid key varies fastest, as in Ray.
    combos = [tuple(reversed(c)) for c in itertools.product(*[values for _, values in reversed(grids)])]
    for _ in range(num_samples):
        for combo in combos:
            config = copy.deepcopy(_plain(space))
            resolved = {}
            for (path, _), value in zip(grids, combo, strict=True):
                _set(config, path, copy.deepcopy(value))
                resolved[path] = value
            # What is left to resolve: the space's domains and any a grid value brought (a grid of
            # sample_from functions, or of dicts holding domains).
            pending = [(path, value) for path, value in _walk(config) if isinstance(value, Domain)]
            for path, domain in pending:
                if not isinstance(domain, Function):
                    value = domain.sample(rng=rng)
                    _set(config, path, value)
                    resolved[path] = value
            _resolve_functions(config, [(p, f) for p, f in pending if isinstance(f, Function)], rng, resolved)
            yield config, resolved


def _resolve_functions(config: dict, functions: list, rng: random.Random, resolved: dict) -> None:
    """Calls each `sample_from` function with the config, in the space's order; one that reads a key
    not resolved yet is called again once the others are (Ray's passes), so a function may read
    another's value wherever it stands. A function that can never be resolved raises
    `RecursiveDependencyError`."""
    while functions:
        deferred, blocked = [], None
        for path, function in functions:
            try:
                # A fresh view each call: it shows the values the functions before resolved.
                value = function.sample(_Spec(config), rng=rng)
            except _Unresolved as e:
                deferred.append((path, function))
                blocked = (path, e.key)
                continue
            _set(config, path, value)
            resolved[path] = value
        if len(deferred) == len(functions):
            path, key = blocked
            name = "/".join(str(p) for p in path)
            raise RecursiveDependencyError(
                f"`{name}` recursively depends on {key!r}, which no other sample_from resolves: "
                "expected the functions of a search space to read each other without a cycle"
            )
        functions = deferred


def _plain(space: Any) -> Any:
    """The space with domains kept as placeholders (replaced while resolving). A grid's place is
    left empty: its value is set right after, and copying its whole list into every variant would
    cost a grid of n values n copies of n."""
    if is_grid(space):
        return None
    if isinstance(space, dict):
        return {k: _plain(v) for k, v in space.items()}
    if isinstance(space, list):
        return [_plain(v) for v in space]
    return space


def _clean(value: Any) -> str:
    text = f"{value:.5}" if isinstance(value, float) else str(value)
    for bad in '/\\()[]{}<>:"|?* ':
        text = text.replace(bad, "_" if bad == " " else "")
    return text


def format_vars(resolved: dict) -> str:
    """`lr=0.0012,momentum=0.9`, as Ray tags a trial (the last key of each varied path)."""
    return ",".join(f"{_clean(path[-1])}={_clean(value)}" for path, value in resolved.items())


def flatten(config: dict, prefix: str = "", delimiter: str = "/") -> dict:
    """Nested keys joined by `/` (Ray's `TUNE_RESULT_DELIM`)."""
    flat = {}
    for key, value in config.items():
        name = f"{prefix}{delimiter}{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            flat.update(flatten(value, name, delimiter))
        else:
            flat[name] = value
    return flat


def unflatten(flat: dict, delimiter: str = "/") -> dict:
    """`flatten`'s inverse: `/`-joined keys back into nested dicts."""
    nested: dict = {}
    for key, value in flat.items():
        parts = key.split(delimiter)
        node = nested
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return nested
