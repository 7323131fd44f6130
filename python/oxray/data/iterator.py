"""`DataIterator`: batches, rows and torch tensors from a stream of blocks.

Rebatching for the numpy and torch formats converts each block to numpy once and hands out
slices of it, so a batch costs a few views, not a conversion. The Arrow formats and the local
shuffle buffer use the engine's `DataBatcher` (slices, concatenation and seeded draws in Rust).
"""

from __future__ import annotations

import queue
import threading
import warnings
from typing import Callable, Iterator, Optional

import numpy as np
import pyarrow as pa

from oxray import _native
from oxray._private import worker_devices
from oxray.data._internal import block as B

_DONE = object()


def _check_batch_size(batch_size, allow_none: bool = True) -> None:
    if batch_size is None and allow_none:
        return
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
        raise ValueError(f"batch_size={batch_size!r}: expected a positive integer" + (" or None" if allow_none else ""))


def _check_prefetch(prefetch_batches) -> None:
    if isinstance(prefetch_batches, bool) or not isinstance(prefetch_batches, int) or prefetch_batches < 0:
        raise ValueError(f"prefetch_batches={prefetch_batches!r}: expected an integer >= 0")


def _prefetched(blocks: Iterator[pa.Table], depth: int) -> Iterator[pa.Table]:
    """Runs the block producer on a thread, `depth` blocks ahead of the consumer."""
    if depth <= 0:
        yield from blocks
        return
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce():
        try:
            for t in blocks:
                while not stop.is_set():
                    try:
                        q.put(t, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    break
            q.put(_DONE)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            q.put(e)
        finally:
            close = getattr(blocks, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=produce, name="oxray-data-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item = q.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while thread.is_alive():
            try:
                q.get_nowait()
            except queue.Empty:
                thread.join(0.05)


def _concat_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Two blocks' values of a column; tensors of different shapes become an object array."""
    try:
        return np.concatenate([a, b])
    except ValueError:
        out = np.empty(len(a) + len(b), dtype=object)
        for i, v in enumerate([*a, *b]):
            out[i] = v
        return out


def _numpy_batches(tables: Iterator[pa.Table], batch_size: Optional[int], drop_last: bool) -> Iterator[dict]:
    carry, carry_rows = None, 0
    for table in tables:
        n = table.num_rows
        if n == 0:
            continue
        cols = B.table_to_numpy(table)
        if batch_size is None:
            yield cols
            continue
        start = 0
        if carry is not None:
            take = min(batch_size - carry_rows, n)
            carry = {k: _concat_rows(carry[k], cols[k][:take]) for k in cols}
            carry_rows += take
            start = take
            if carry_rows == batch_size:
                yield carry
                carry, carry_rows = None, 0
        while n - start >= batch_size:
            yield {k: v[start : start + batch_size] for k, v in cols.items()}
            start += batch_size
        if start < n:
            carry = {k: v[start:] for k, v in cols.items()}
            carry_rows = n - start
    if carry is not None and not drop_last:
        yield carry


def _arrow_batches(
    tables: Iterator[pa.Table], batch_size, drop_last: bool, shuffle_buffer: Optional[int], seed
) -> Iterator[pa.Table]:
    batcher = _native.DataBatcher(batch_size, drop_last, shuffle_buffer, seed)
    for table in tables:
        for rb in table.to_batches():
            batcher.add(rb)
            while (out := batcher.next_batch()) is not None:
                yield pa.Table.from_batches([out])
    batcher.finish()
    while (out := batcher.next_batch()) is not None:
        yield pa.Table.from_batches([out])


def batches_from_blocks(
    blocks: Iterator[pa.Table],
    *,
    batch_size,
    batch_format,
    drop_last: bool,
    local_shuffle_buffer_size,
    local_shuffle_seed,
) -> Iterator:
    if local_shuffle_buffer_size is not None:
        if (
            isinstance(local_shuffle_buffer_size, bool)
            or not isinstance(local_shuffle_buffer_size, int)
            or local_shuffle_buffer_size <= 0
        ):
            raise ValueError(f"local_shuffle_buffer_size={local_shuffle_buffer_size!r}: expected a positive integer")
    if local_shuffle_buffer_size is None and batch_format in ("default", "numpy"):
        yield from _numpy_batches(blocks, batch_size, drop_last)
        return
    for table in _arrow_batches(blocks, batch_size, drop_last, local_shuffle_buffer_size, local_shuffle_seed):
        yield B.to_batch(table, batch_format)


_READ_ONLY_WARNING = "The given NumPy array is not writable"


def _quiet_read_only_warning() -> None:
    """Batches are read-only views of shared memory, as in Ray; torch warns about each such tensor."""
    if not any(f[1] is not None and f[1].pattern == _READ_ONLY_WARNING for f in warnings.filters):
        warnings.filterwarnings("ignore", message=_READ_ONLY_WARNING)


def _to_tensor(name: str, array: np.ndarray, dtype, device, pin_memory: bool = False):
    """One batch column as a tensor; a variable-shape tensor column as a list of tensors."""
    import torch

    if array.dtype == object:
        items = list(array)
        if items and all(isinstance(v, np.ndarray) and v.dtype != object for v in items):
            if len({v.shape for v in items}) == 1:
                array = np.stack(items)
            else:
                return [_to_tensor(name, v, dtype, device, pin_memory) for v in items]
        else:
            kinds = sorted({type(v).__name__ for v in items})
            raise TypeError(
                f"column {name!r} holds {' and '.join(kinds) or 'no'} values, which cannot become a torch tensor; "
                "drop it (drop_columns), convert it in map_batches, or pass collate_fn= to iter_torch_batches"
            )
    elif array.dtype.kind in "US":
        raise TypeError(
            f"column {name!r} holds strings ({array.dtype}), which cannot become a torch tensor; drop it "
            "(drop_columns), convert it in map_batches, or pass collate_fn= to iter_torch_batches"
        )
    tensor = torch.from_numpy(array)
    if dtype is not None and tensor.dtype != dtype:
        tensor = tensor.to(dtype)
    if pin_memory:
        tensor = tensor.pin_memory()  # torch says so where no accelerator can pin
    if device is not None and str(device) != "cpu":
        tensor = tensor.to(device, non_blocking=True)
    return tensor


def _resolve_device(device):
    """`device="auto"`: a Train worker's own device, else none (the CPU)."""
    if device != "auto":
        return device
    return worker_devices.torch_device() if worker_devices.in_train_loop() else None


def collate_batch_format(collate_fn) -> str:
    """The batch format a collate_fn takes: Arrow for `ArrowBatchCollateFn`s (as
    `DefaultCollateFn`), pandas for `PandasBatchCollateFn`s, else numpy."""
    from oxray.data import collate_fn as CF

    if isinstance(collate_fn, CF.ArrowBatchCollateFn):
        return "pyarrow"
    if isinstance(collate_fn, CF.PandasBatchCollateFn):
        return "pandas"
    return "numpy"


def _check_shuffle_buffer(size, batch_size) -> None:
    if size is None:
        return
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
        raise ValueError(f"local_shuffle_buffer_size={size!r}: expected a positive integer")
    if batch_size is None:
        raise ValueError("local_shuffle_buffer_size needs a batch_size: the buffer fills before each batch")


def torch_batches(numpy_batches: Iterator[dict], dtypes, device, collate_fn, pin_memory: bool = False) -> Iterator:
    device = _resolve_device(device)
    _quiet_read_only_warning()
    for batch in numpy_batches:
        if collate_fn is not None:
            yield collate_fn(batch)
            continue
        out = {}
        for name, array in batch.items():
            dtype = dtypes.get(name) if isinstance(dtypes, dict) else dtypes
            out[name] = _to_tensor(name, array, dtype, device, pin_memory)
        yield out


class _Reiterable:
    """What `iter_batches` and friends return, as in Ray: each `iter()` of it starts a new pass."""

    def __init__(self, start: Callable[[], Iterator]):
        self._start = start

    def __iter__(self) -> Iterator:
        return self._start()


class DataIterator:
    """Iterates a dataset (or one share of it) in batches; every call starts a new pass."""

    def __init__(
        self,
        blocks_fn: Callable[[], Iterator[pa.Table]],
        describe: str,
        stats_fn=None,
        schema_fn=None,
        coordinator=None,
    ):
        self._blocks_fn = blocks_fn
        self._coordinator = coordinator  # the streaming_split actor this iterator reads from
        self._describe = describe
        self._stats_fn = stats_fn
        self._schema_fn = schema_fn

    def __repr__(self) -> str:
        return f"DataIterator({self._describe})"

    def get_context(self):
        """The DataContext this iterator's data runs under: a split's is its coordinator's (the
        dataset's settings where it was split), a dataset's the one it carries or the current."""
        import oxray
        from oxray.data.context import DataContext

        if self._coordinator is not None:
            return oxray.get(self._coordinator.__ray_call__.remote(lambda c: c.dataset._context))
        dataset = getattr(self._blocks_fn, "__self__", None)  # the Dataset whose blocks these are
        return getattr(dataset, "_context", None) or DataContext.get_current()

    def _iter_blocks(self, prefetch_batches: int = 1) -> Iterator[pa.Table]:
        return _prefetched(self._blocks_fn(), prefetch_batches)

    def iter_batches(
        self,
        *,
        prefetch_batches: int = 1,
        batch_size: Optional[int] = 256,
        batch_format: Optional[str] = "default",
        drop_last: bool = False,
        local_shuffle_buffer_size: Optional[int] = None,
        local_shuffle_seed: Optional[int] = None,
    ) -> Iterator:
        _check_batch_size(batch_size)
        _check_prefetch(prefetch_batches)
        B.check_batch_format(batch_format)
        _check_shuffle_buffer(local_shuffle_buffer_size, batch_size)
        return _Reiterable(
            lambda: batches_from_blocks(
                self._iter_blocks(prefetch_batches),
                batch_size=batch_size,
                batch_format=batch_format,
                drop_last=drop_last,
                local_shuffle_buffer_size=local_shuffle_buffer_size,
                local_shuffle_seed=local_shuffle_seed,
            )
        )

    def iter_torch_batches(
        self,
        *,
        prefetch_batches: int = 1,
        batch_size: Optional[int] = 256,
        dtypes=None,
        device: str = "auto",
        collate_fn: Optional[Callable] = None,
        drop_last: bool = False,
        local_shuffle_buffer_size: Optional[int] = None,
        local_shuffle_seed: Optional[int] = None,
        pin_memory: bool = False,
    ) -> Iterator:
        if collate_fn is not None and dtypes is not None:
            raise ValueError("iter_torch_batches: collate_fn and dtypes cannot both be given; convert in collate_fn")
        batch_format = collate_batch_format(collate_fn)
        batches = self.iter_batches(
            prefetch_batches=prefetch_batches,
            batch_size=batch_size,
            batch_format=batch_format,
            drop_last=drop_last,
            local_shuffle_buffer_size=local_shuffle_buffer_size,
            local_shuffle_seed=local_shuffle_seed,
        )
        return _Reiterable(lambda: torch_batches(iter(batches), dtypes, device, collate_fn, pin_memory))

    def to_torch(
        self,
        *,
        label_column: Optional[str] = None,
        feature_columns=None,
        label_column_dtype=None,
        feature_column_dtypes=None,
        batch_size: int = 1,
        prefetch_batches: int = 1,
        drop_last: bool = False,
        local_shuffle_buffer_size: Optional[int] = None,
        local_shuffle_seed: Optional[int] = None,
        unsqueeze_label_tensor: bool = True,
        unsqueeze_feature_tensors: bool = True,
    ):
        """A torch `IterableDataset` of `(features, label)` batches, as Ray's `to_torch`."""
        from oxray.data._internal.torch_dataset import torch_iterable

        batches = self.iter_batches(
            prefetch_batches=prefetch_batches,
            batch_size=batch_size,
            batch_format="numpy",
            drop_last=drop_last,
            local_shuffle_buffer_size=local_shuffle_buffer_size,
            local_shuffle_seed=local_shuffle_seed,
        )
        return torch_iterable(
            batches,
            label_column,
            feature_columns,
            label_column_dtype,
            feature_column_dtypes,
            unsqueeze_label_tensor,
            unsqueeze_feature_tensors,
        )

    def materialize(self):
        """This iterator's rows in the object store, as a `MaterializedDataset`."""
        from oxray.data.dataset import from_tables

        return from_tables(list(self._blocks_fn()), "FromBlocks")

    def iter_rows(self, *, prefetch_batches: int = 1):
        _check_prefetch(prefetch_batches)

        def rows():
            for table in self._iter_blocks(prefetch_batches):
                yield from B.rows_of(table)

        return _Reiterable(rows)

    def stats(self) -> str:
        return self._stats_fn() if self._stats_fn is not None else ""

    def schema(self):
        return self._schema_fn() if self._schema_fn is not None else None
