"""Search-space domains, as Ray Tune names them: each samples a value for one
key of `param_space`. Bounds follow Ray: `randint`'s upper bound is exclusive,
`quniform`'s inclusive, `qrandint`'s inclusive except when q is 1."""

from __future__ import annotations

import math
import random
from typing import Any, Callable, Sequence


class Domain:
    """A value to sample; `sample(spec, rng)` draws one."""

    def sample(self, spec: Any = None, rng: random.Random | None = None) -> Any:
        raise NotImplementedError

    def is_grid(self) -> bool:
        return False


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} is {value!r}; expected a finite number")
    return value


def _quantize(value: float, q: float) -> float:
    return round(value / q) * q


class Float(Domain):
    def __init__(self, lower: float, upper: float, *, log: bool = False, q: float | None = None):
        self.lower, self.upper = _number("lower", lower), _number("upper", upper)
        if self.lower >= self.upper:
            raise ValueError(f"the lower bound {lower!r} is not below the upper bound {upper!r}")
        if log and self.lower <= 0:
            raise ValueError(f"a log-uniform space needs a lower bound above 0; got {lower!r}")
        if q is not None and _number("q", q) <= 0:
            raise ValueError(f"q is {q!r}; expected a number above 0")
        self.log, self.q = log, q

    def sample(self, spec=None, rng=None):
        rng = rng or random
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

    def sample(self, spec=None, rng=None):
        rng = rng or random
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

    def sample(self, spec=None, rng=None):
        value = (rng or random).gauss(self.mean, self.sd)
        return float(_quantize(value, self.q)) if self.q is not None else float(value)

    def __repr__(self):
        return f"randn({self.mean}, {self.sd})"


class Categorical(Domain):
    def __init__(self, categories: Sequence[Any]):
        if isinstance(categories, (str, bytes)) or not hasattr(categories, "__len__") or len(categories) == 0:
            raise ValueError(f"choice({categories!r}): expected a non-empty list of values")
        self.categories = list(categories)

    def sample(self, spec=None, rng=None):
        return (rng or random).choice(self.categories)

    def __repr__(self):
        return f"choice({self.categories!r})"


class Function(Domain):
    """`sample_from(func)`: `func(spec)` gets the config resolved so far as `spec.config`."""

    def __init__(self, func: Callable):
        if not callable(func):
            raise ValueError(f"sample_from({func!r}): expected a function of the spec")
        self.func = func

    def sample(self, spec=None, rng=None):
        return self.func(spec)

    def __repr__(self):
        return f"sample_from({getattr(self.func, '__name__', self.func)!r})"


def uniform(lower: float, upper: float) -> Float:
    return Float(lower, upper)


def quniform(lower: float, upper: float, q: float) -> Float:
    return Float(lower, upper, q=q)


def loguniform(lower: float, upper: float, base: float | None = None) -> Float:
    return Float(lower, upper, log=True)


def qloguniform(lower: float, upper: float, q: float, base: float | None = None) -> Float:
    return Float(lower, upper, log=True, q=q)


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
