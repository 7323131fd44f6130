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
            carry = {k: np.concatenate([carry[k], cols[k][:take]]) for k in cols}
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


def _to_tensor(array: np.ndarray, dtype, device):
    import torch

    if array.dtype == object:
        raise TypeError(
            f"a column of {type(array[0]).__name__ if len(array) else 'object'} values cannot become a torch "
            "tensor; drop or convert it (e.g. with map_batches) before iter_torch_batches"
        )
    tensor = torch.from_numpy(array)
    if dtype is not None and tensor.dtype != dtype:
        tensor = tensor.to(dtype)
    if device is not None and str(device) != "cpu":
        tensor = tensor.to(device, non_blocking=True)
    return tensor


def _resolve_device(device):
    if device != "auto":
        return device
    try:
        from oxray.train._internal import session as train_session

        if train_session.in_session():
            from oxray.train.torch import get_device

            return get_device()
    except ImportError:
        pass
    return None


def torch_batches(numpy_batches: Iterator[dict], dtypes, device, collate_fn) -> Iterator:
    device = _resolve_device(device)
    _quiet_read_only_warning()
    for batch in numpy_batches:
        if collate_fn is not None:
            yield collate_fn(batch)
            continue
        out = {}
        for name, array in batch.items():
            dtype = dtypes.get(name) if isinstance(dtypes, dict) else dtypes
            out[name] = _to_tensor(array, dtype, device)
        yield out


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
        return batches_from_blocks(
            self._iter_blocks(prefetch_batches),
            batch_size=batch_size,
            batch_format=batch_format,
            drop_last=drop_last,
            local_shuffle_buffer_size=local_shuffle_buffer_size,
            local_shuffle_seed=local_shuffle_seed,
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
        if pin_memory:
            raise ValueError("iter_torch_batches(pin_memory=True) is not supported by oxray yet")
        if collate_fn is not None and dtypes is not None:
            raise ValueError("iter_torch_batches: collate_fn and dtypes cannot both be given; convert in collate_fn")
        batches = self.iter_batches(
            prefetch_batches=prefetch_batches,
            batch_size=batch_size,
            batch_format="numpy",
            drop_last=drop_last,
            local_shuffle_buffer_size=local_shuffle_buffer_size,
            local_shuffle_seed=local_shuffle_seed,
        )
        return torch_batches(batches, dtypes, device, collate_fn)

    def iter_rows(self, *, prefetch_batches: int = 1) -> Iterator[dict]:
        _check_prefetch(prefetch_batches)
        for table in self._iter_blocks(prefetch_batches):
            yield from B.rows_of(table)

    def stats(self) -> str:
        return self._stats_fn() if self._stats_fn is not None else ""

    def schema(self):
        return self._schema_fn() if self._schema_fn is not None else None
