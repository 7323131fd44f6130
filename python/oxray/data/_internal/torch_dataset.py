"""`DataIterator.to_torch`: batches as `(features, label)` tensors in a torch IterableDataset."""

from __future__ import annotations

import numpy as np


def _dtype_for(dtypes, index: int, key):
    if isinstance(dtypes, dict):
        return dtypes.get(key)
    if isinstance(dtypes, (list, tuple)):
        return dtypes[index]
    return dtypes


def _stack(batch: dict, columns: list, dtype, unsqueeze: bool):
    """Columns side by side: (N, n) for n scalar columns; a single column keeps its shape
    unless `unsqueeze` makes a 1-d one (N, 1)."""
    import torch

    tensors = []
    for c in columns:
        if c not in batch:
            raise ValueError(f"to_torch: the dataset has no column {c!r}; its columns are {list(batch)}")
        t = torch.as_tensor(np.ascontiguousarray(batch[c]))
        if unsqueeze and t.dim() == 1:
            t = t.unsqueeze(1)
        if dtype is not None:
            t = t.to(dtype)
        tensors.append(t)
    return tensors[0] if len(tensors) == 1 else torch.cat(tensors, dim=1)


def torch_iterable(
    batches, label_column, feature_columns, label_dtype, feature_dtypes, unsqueeze_label, unsqueeze_features
):
    import torch

    if feature_columns is not None and not isinstance(feature_columns, (list, dict)):
        raise TypeError(
            f"to_torch(feature_columns={feature_columns!r}): expected a list of column names, a list of lists, "
            "or a dict of name -> list of column names"
        )

    def features_of(batch: dict):
        if feature_columns is None:
            cols = [c for c in batch if c != label_column]
            return _stack(batch, cols, _dtype_for(feature_dtypes, 0, None), unsqueeze_features)
        if isinstance(feature_columns, dict):
            return {
                key: _stack(batch, cols, _dtype_for(feature_dtypes, i, key), unsqueeze_features)
                for i, (key, cols) in enumerate(feature_columns.items())
            }
        if feature_columns and all(isinstance(c, list) for c in feature_columns):
            return [
                _stack(batch, cols, _dtype_for(feature_dtypes, i, None), unsqueeze_features)
                for i, cols in enumerate(feature_columns)
            ]
        return _stack(batch, list(feature_columns), _dtype_for(feature_dtypes, 0, None), unsqueeze_features)

    class _Batches(torch.utils.data.IterableDataset):
        def __iter__(self):
            for batch in batches:
                label = None
                if label_column is not None:
                    label = _stack(batch, [label_column], label_dtype, unsqueeze_label)
                yield features_of(batch), label

    return _Batches()
