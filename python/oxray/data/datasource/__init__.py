"""Custom sources and sinks, with Ray Data's API: subclass `Datasource` (its
`get_read_tasks(parallelism)` returns `ReadTask`s: read functions yielding blocks, with their
`BlockMetadata`) and read it with `ray.data.read_datasource(...)`; subclass `Datasink` (its
`write(blocks, ctx)` runs in a task per block) and write with `Dataset.write_datasink(...)`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Iterable, Iterator, List, Optional, TypeVar

from oxray.data.block import BlockMetadata
from oxray.data.datasource.file_based_datasource import FileShuffleConfig
from oxray.data.datasource.filename_provider import FilenameProvider

__all__ = ["Datasink", "Datasource", "FileShuffleConfig", "FilenameProvider", "ReadTask", "TaskContext", "WriteResult"]

WriteReturnType = TypeVar("WriteReturnType")


class ReadTask:
    """One unit of a read: `read_fn()` yields blocks (pyarrow Tables or pandas DataFrames)."""

    def __init__(
        self,
        read_fn: Callable[[], Iterable[Any]],
        metadata: BlockMetadata,
        schema=None,
        per_task_row_limit: Optional[int] = None,
    ):
        if not callable(read_fn):
            raise TypeError(f"ReadTask: read_fn must be callable, got {type(read_fn).__name__}")
        if per_task_row_limit is not None and (
            isinstance(per_task_row_limit, bool) or not isinstance(per_task_row_limit, int) or per_task_row_limit < 0
        ):
            raise ValueError(f"ReadTask(per_task_row_limit={per_task_row_limit!r}): expected an integer >= 0")
        self._read_fn = read_fn
        self._metadata = metadata
        self._schema = schema
        self._per_task_row_limit = per_task_row_limit

    @property
    def metadata(self) -> BlockMetadata:
        return self._metadata

    @property
    def schema(self):
        return self._schema

    @property
    def read_fn(self) -> Callable[[], Iterable[Any]]:
        return self._read_fn

    @property
    def per_task_row_limit(self) -> Optional[int]:
        return self._per_task_row_limit

    def __call__(self) -> Iterable[Any]:
        blocks = self._read_fn()
        if self._per_task_row_limit is None:
            return blocks
        return _first_rows(blocks, self._per_task_row_limit)


def _first_rows(blocks: Iterable[Any], limit: int) -> Iterator[Any]:
    """The blocks cut to their first `limit` rows in all (a task's row limit, as Ray's)."""
    left = limit
    for block in blocks:
        if left <= 0:
            return
        rows = block.num_rows if hasattr(block, "num_rows") else len(block)
        if rows > left:
            block = block.slice(0, left) if hasattr(block, "slice") and hasattr(block, "num_rows") else block[:left]
        left -= min(rows, left)
        yield block


class Datasource:
    """A source of read tasks. Subclasses implement `get_read_tasks` and may implement
    `estimate_inmemory_data_size` and `get_name`."""

    def get_name(self) -> str:
        name = type(self).__name__
        return name[: -len("Datasource")] if name.endswith("Datasource") and name != "Datasource" else name

    def estimate_inmemory_data_size(self) -> Optional[int]:
        return None

    def get_read_tasks(
        self, parallelism: int, per_task_row_limit: Optional[int] = None, data_context=None
    ) -> List[ReadTask]:
        # Ray's contract: a subclass gives its read tasks; the base class has none to give.
        raise NotImplementedError(f"{type(self).__name__} must implement get_read_tasks(parallelism)")

    @property
    def supports_distributed_reads(self) -> bool:
        return True


@dataclass
class WriteResult(Generic[WriteReturnType]):
    """What a write did: rows and bytes written, and every `Datasink.write` return value."""

    num_rows: int
    size_bytes: int
    write_returns: list = field(default_factory=list)


@dataclass
class TaskContext:
    """Where a `Datasink.write` call runs: the index of its task and the operator's name."""

    task_idx: int
    op_name: str = "Write"
    kwargs: dict = field(default_factory=dict)


class Datasink(Generic[WriteReturnType]):
    """A destination: `write(blocks, ctx)` runs once per block in a task; `on_write_start`,
    `on_write_complete(WriteResult)` and `on_write_failed(error)` run on the driver."""

    def on_write_start(self, schema=None) -> None:
        """Runs before any block is written."""

    def write(self, blocks: Iterable[Any], ctx: TaskContext) -> Any:
        # Ray's contract: a subclass writes; the base class has nowhere to write to.
        raise NotImplementedError(f"{type(self).__name__} must implement write(blocks, ctx)")

    def on_write_complete(self, write_result: WriteResult) -> None:
        """Runs after every block is written."""

    def on_write_failed(self, error: Exception) -> None:
        """Runs when a write fails."""

    def get_name(self) -> str:
        name = type(self).__name__
        return name[: -len("Datasink")] if name.endswith("Datasink") and name != "Datasink" else name

    @property
    def supports_distributed_writes(self) -> bool:
        return True

    @property
    def min_rows_per_write(self) -> Optional[int]:
        return None
