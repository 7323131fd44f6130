"""Search-space domains, as Ray Tune names them: each samples a value for one
key of `param_space`. Bounds follow Ray: `randint`'s upper bound is exclusive,
`quniform`'s inclusive, `qrandint`'s inclusive except when q is 1. Ray's
builder style works too: `Float(1e-4, 1e-1).loguniform()`, `Integer(0, 10).uniform()`,
`Float(None, None).normal(0, 1)`, `.quantized(q)`, each domain taking one sampler."""

from __future__ import annotations

import copy
import inspect
import logging
import math
import random
from typing import Any, Callable, Sequence


def _rng_of(random_state: Any) -> Any:
    """A `random.Random` for Ray's `random_state` (a seed, numpy's Generator or RandomState)."""
    if random_state is None or isinstance(random_state, random.Random):
        return random_state or random
    if isinstance(random_state, int):
        return random.Random(random_state)
    if hasattr(random_state, "integers"):
        return random.Random(int(random_state.integers(2**32)))
    if hasattr(random_state, "randint"):
        return random.Random(int(random_state.randint(2**31)))
    raise ValueError(f"random_state={random_state!r}: expected a seed, random.Random or a numpy generator")


class Domain:
    """A value to sample. `sample(config=None, size=1, random_state=None)` as Ray's: one value, or a
    list of `size`; the engine passes its own `rng=`."""

    # Set once a builder method (`uniform()`, `loguniform()`, ...) chose how to sample.
    _sampler: str | None = None

    def sample(self, config: Any = None, size: int = 1, random_state: Any = None, *, rng: Any = None) -> Any:
        rng = rng or _rng_of(random_state)
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"sample(size={size!r}): expected an integer of 1 or more")
        if size == 1:
            return self._draw(config, rng)
        return [self._draw(config, rng) for _ in range(size)]

    def _draw(self, config: Any, rng: Any) -> Any:
        raise NotImplementedError

    def _check_no_sampler(self, name: str) -> None:
        if self._sampler is not None:
            raise ValueError(f"{self!r} samples {self._sampler} already; a domain takes one sampler, not {name} too")

    def _with_sampler(self, name: str, **changes) -> "Domain":
        self._check_no_sampler(name)
        new = copy.copy(self)
        new.__dict__.update(changes)
        new._sampler = name
        return new

    def is_grid(self) -> bool:
        return False


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} is {value!r}; expected a finite number")
    return value


def _quantize(value: float, q: float) -> float:
    return round(value / q) * q


class Float(Domain):
    def __init__(self, lower: float | None, upper: float | None, *, log: bool = False, q: float | None = None):
        # None is an open bound (Ray's `Float(None, None).normal()`); uniform sampling needs both.
        self.lower = -math.inf if lower is None else _number("lower", lower)
        self.upper = math.inf if upper is None else _number("upper", upper)
        if self.lower >= self.upper:
            raise ValueError(f"the lower bound {lower!r} is not below the upper bound {upper!r}")
        if log and self.lower <= 0:
            raise ValueError(f"a log-uniform space needs a lower bound above 0; got {lower!r}")
        if q is not None and _number("q", q) <= 0:
            raise ValueError(f"q is {q!r}; expected a number above 0")
        self.log, self.q = log, q

    def _bounded(self, sampler: str) -> None:
        if not (math.isfinite(self.lower) and math.isfinite(self.upper)):
            raise ValueError(f"{sampler} sampling needs finite bounds; this Float has {self.lower} and {self.upper}")

    def uniform(self) -> "Float":
        self._bounded("uniform")
        return self._with_sampler("uniform", log=False)

    def loguniform(self, base: float = 10) -> "Float":
        self._bounded("loguniform")
        if self.lower <= 0:
            raise ValueError(f"a log-uniform space needs a lower bound above 0; got {self.lower!r}")
        return self._with_sampler("loguniform", log=True)

    def normal(self, mean: float = 0.0, sd: float = 1.0) -> "Normal":
        if math.isfinite(self.lower) or math.isfinite(self.upper):
            raise ValueError(f"normal sampling takes no bounds; use Float(None, None).normal({mean}, {sd})")
        self._check_no_sampler("normal")
        normal = Normal(mean, sd, self.q)
        normal._sampler = "normal"
        return normal

    def quantized(self, q: float) -> "Float":
        if _number("q", q) <= 0:
            raise ValueError(f"q is {q!r}; expected a number above 0")
        new = copy.copy(self)
        new.q = q
        return new

    def _draw(self, config, rng):
        self._bounded("uniform")
        if self.log:
            value = math.exp(rng.uniform(math.log(self.lower), math.log(self.upper)))
        else:
            value = rng.uniform(self.lower, self.upper)
        if self.q is not None:
            value = min(max(_quantize(value, self.q), self.lower), self.upper)
        return float(value)

    def __repr__(self):
        kind = "loguniform" if self.log else "uniform"
        return f"{'q' if self.q else ''}{kind}({self.lower}, {self.upper}{f', {self.q}' if self.q else ''})"


class Integer(Domain):
    def __init__(self, lower: int, upper: int, *, log: bool = False, q: int = 1):
        for name, value in (("lower", lower), ("upper", upper), ("q", q)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} is {value!r}; expected an integer")
        if q < 1:
            raise ValueError(f"q is {q!r}; expected 1 or more")
        if lower >= upper:
            raise ValueError(f"the lower bound {lower!r} is not below the upper bound {upper!r}")
        if log and lower <= 0:
            raise ValueError(f"a log-uniform integer space needs a lower bound above 0; got {lower!r}")
        self.lower, self.upper, self.log, self.q = lower, upper, log, q

    def uniform(self) -> "Integer":
        return self._with_sampler("uniform", log=False)

    def loguniform(self, base: float = 10) -> "Integer":
        if self.lower <= 0:
            raise ValueError(f"a log-uniform integer space needs a lower bound above 0; got {self.lower!r}")
        return self._with_sampler("loguniform", log=True)

    def quantized(self, q: int) -> "Integer":
        if isinstance(q, bool) or not isinstance(q, int) or q < 1:
            raise ValueError(f"q is {q!r}; expected an integer of 1 or more")
        new = copy.copy(self)
        new.q = q
        return new

    def _draw(self, config, rng):
        # Ray: the upper bound is exclusive for q == 1, inclusive for a larger q.
        top = self.upper if self.q > 1 else self.upper - 1
        if self.log:
            value = math.exp(rng.uniform(math.log(self.lower), math.log(top + 1)))
            value = min(int(value), top)
        else:
            value = rng.randint(self.lower, top)
        if self.q > 1:
            value = int(_quantize(value, self.q))
            value = min(max(value, self.lower), self.upper)
        return int(value)

    def __repr__(self):
        return f"randint({self.lower}, {self.upper})"


class Normal(Domain):
    def __init__(self, mean: float = 0.0, sd: float = 1.0, q: float | None = None):
        self.mean, self.sd = _number("mean", mean), _number("sd", sd)
        if sd <= 0:
            raise ValueError(f"sd is {sd!r}; expected a number above 0")
        if q is not None and _number("q", q) <= 0:
            raise ValueError(f"q is {q!r}; expected a number above 0")
        self.q = q

    def _draw(self, config, rng):
        value = rng.gauss(self.mean, self.sd)
        return float(_quantize(value, self.q)) if self.q is not None else float(value)

    def __repr__(self):
        return f"randn({self.mean}, {self.sd})"


class Categorical(Domain):
    def __init__(self, categories: Sequence[Any]):
        if isinstance(categories, (str, bytes)) or not hasattr(categories, "__len__") or len(categories) == 0:
            raise ValueError(f"choice({categories!r}): expected a non-empty list of values")
        self.categories = list(categories)

    def uniform(self) -> "Categorical":
        return self._with_sampler("uniform")

    def _draw(self, config, rng):
        return rng.choice(self.categories)

    def __repr__(self):
        return f"choice({self.categories!r})"


class Function(Domain):
    """`sample_from(func)`: as in Ray 2.60, `func(config)` gets the config resolved so far
    (`config["x"]` or `config.x`); a function that fails on it with a KeyError or AttributeError is
    called again with the older spec, `{"config": config}` (`spec.config.x`), with Ray's
    deprecation warning; a function of no arguments is called without it."""

    def __init__(self, func: Callable):
        if not callable(func):
            raise ValueError(f"sample_from({func!r}): expected a function of the spec")
        self.func = func
        try:
            signature = inspect.signature(func)
        except (TypeError, ValueError):  # a builtin without a signature
            self._takes_spec = True
        else:
            try:
                signature.bind({})
                self._takes_spec = True
            except TypeError:
                try:
                    signature.bind()
                    self._takes_spec = False
                except TypeError:
                    raise ValueError(
                        f"sample_from({func!r}): expected a function of one argument (the spec) or of none"
                    ) from None

    def _draw(self, config, rng):
        if not self._takes_spec:
            return self.func()
        try:
            return self.func(config)
        except (AttributeError, KeyError):
            if not isinstance(config, dict):
                raise
            # As Ray: a function written for the older spec (`spec.config.x`) gets it on a retry.
            if not getattr(self, "_warned", False):
                self._warned = True
                logging.getLogger(__name__).warning(
                    "sample_from functions that take a spec dict are deprecated. Please update your "
                    "function to work with the config dict directly."
                )
            return self.func(type(config)({"config": config}))

    def __repr__(self):
        return f"sample_from({getattr(self.func, '__name__', self.func)!r})"


def _finite(lower: Any, upper: Any) -> tuple:
    return _number("lower", lower), _number("upper", upper)


def uniform(lower: float, upper: float) -> Float:
    return Float(*_finite(lower, upper))


def quniform(lower: float, upper: float, q: float) -> Float:
    return Float(*_finite(lower, upper), q=q)


def loguniform(lower: float, upper: float, base: float | None = None) -> Float:
    return Float(*_finite(lower, upper), log=True)


def qloguniform(lower: float, upper: float, q: float, base: float | None = None) -> Float:
    return Float(*_finite(lower, upper), log=True, q=q)


def randint(lower: int, upper: int) -> Integer:
    return Integer(lower, upper)


def qrandint(lower: int, upper: int, q: int = 1) -> Integer:
    return Integer(lower, upper, q=q)


def lograndint(lower: int, upper: int, base: float | None = None) -> Integer:
    return Integer(lower, upper, log=True)


def qlograndint(lower: int, upper: int, q: int, base: float | None = None) -> Integer:
    return Integer(lower, upper, log=True, q=q)


def randn(mean: float = 0.0, sd: float = 1.0) -> Normal:
    return Normal(mean, sd)


def qrandn(mean: float, sd: float, q: float) -> Normal:
    return Normal(mean, sd, q)


def choice(categories: Sequence[Any]) -> Categorical:
    return Categorical(categories)


def sample_from(func: Callable) -> Function:
    return Function(func)


def grid_search(values: Sequence[Any]) -> dict:
    """`{"grid_search": values}`: every value, crossed with the other grids."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise ValueError(f"grid_search({values!r}): expected a list of values")
    values = list(values)
    if not values:
        raise ValueError("grid_search([]): expected at least one value")
    return {"grid_search": values}
