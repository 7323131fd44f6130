"""Collate functions for `iter_torch_batches(collate_fn=...)`, as Ray Data has them.

The class of a collate function says which batch format it takes: an `ArrowBatchCollateFn`
gets pyarrow Tables, a `NumpyBatchCollateFn` dicts of ndarrays, a `PandasBatchCollateFn`
DataFrames; a plain callable gets numpy dicts. `DefaultCollateFn` is what
`iter_torch_batches` does without one: every column as a tensor.
"""

from __future__ import annotations

import abc
from typing import Any, Generic, TypeVar

from oxray.data._internal import block as B

BatchType = TypeVar("BatchType")

__all__ = ["ArrowBatchCollateFn", "CollateFn", "DefaultCollateFn", "NumpyBatchCollateFn", "PandasBatchCollateFn"]


class CollateFn(abc.ABC, Generic[BatchType]):
    """A user's collate function: a subclass gives `__call__(batch)`."""

    @abc.abstractmethod
    def __call__(self, batch: BatchType) -> Any:
        """The batch as the training loop wants it (tensors, usually)."""


class ArrowBatchCollateFn(CollateFn):
    """Takes each batch as a pyarrow Table."""


class NumpyBatchCollateFn(CollateFn):
    """Takes each batch as a dict of column name -> ndarray."""


class PandasBatchCollateFn(CollateFn):
    """Takes each batch as a pandas DataFrame."""


class DefaultCollateFn(ArrowBatchCollateFn):
    """Every column of an Arrow batch as a tensor (of `dtypes`, one or per column); a
    variable-shape tensor column as a list of tensors."""

    def __init__(self, dtypes=None, combine_chunks: bool = False, num_workers: int = 0):
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(f"DefaultCollateFn(num_workers={num_workers!r}): expected an integer >= 0")
        self.dtypes = dtypes
        self.combine_chunks = combine_chunks
        self.num_workers = num_workers

    def __call__(self, batch) -> dict:
        from oxray.data.iterator import _to_tensor

        columns = B.table_to_numpy(batch)
        out = {}
        for name, values in columns.items():
            dtype = self.dtypes.get(name) if isinstance(self.dtypes, dict) else self.dtypes
            out[name] = _to_tensor(name, values, dtype, None)
        return out
