"""`oxray.tune.search`: search spaces and search algorithms."""

from oxray.tune.search.basic_variant import BasicVariantGenerator
from oxray.tune.search.sample import (
    choice,
    grid_search,
    lograndint,
    loguniform,
    qlograndint,
    qloguniform,
    qrandint,
    qrandn,
    quniform,
    randint,
    randn,
    sample_from,
    uniform,
)
from oxray.tune.search.searcher import ConcurrencyLimiter, Searcher

__all__ = [
    "BasicVariantGenerator",
    "ConcurrencyLimiter",
    "Searcher",
    "choice",
    "grid_search",
    "lograndint",
    "loguniform",
    "qlograndint",
    "qloguniform",
    "qrandint",
    "qrandn",
    "quniform",
    "randint",
    "randn",
    "sample_from",
    "uniform",
]
