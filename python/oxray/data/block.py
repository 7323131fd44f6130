"""`BlockMetadata` and `BlockAccessor`: what a custom datasource or datasink sees of a block.

A block is a pyarrow Table (a datasource's read function may also yield pandas DataFrames,
which become Tables).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

import pyarrow as pa

from oxray.data._internal import block as B

__all__ = ["BlockAccessor", "BlockMetadata"]


@dataclass
class BlockMetadata:
    """What a read task knows of its output before it runs: rows and bytes (None if unknown)."""

    num_rows: Optional[int]
    size_bytes: Optional[int]
    input_files: Optional[list] = None
    exec_stats: Any = None
    schema: Any = field(default=None, repr=False)


class BlockAccessor:
    """Views of one block: rows, bytes, and the block as pandas, Arrow or numpy."""

    def __init__(self, table: pa.Table):
        self._table = table

    @staticmethod
    def for_block(block) -> "BlockAccessor":
        from oxray.data.read_api import _as_table

        return BlockAccessor(_as_table(block, "BlockAccessor.for_block"))

    def num_rows(self) -> int:
        return self._table.num_rows

    def size_bytes(self) -> int:
        return self._table.nbytes

    def schema(self) -> pa.Schema:
        return self._table.schema

    def to_arrow(self) -> pa.Table:
        return self._table

    def to_pandas(self):
        return B.table_to_pandas(self._table)

    def to_numpy(self, columns=None):
        arrays = B.table_to_numpy(self._table)
        if isinstance(columns, str):
            return arrays[columns]
        return arrays if columns is None else {c: arrays[c] for c in columns}

    def to_batch_format(self, batch_format):
        B.check_batch_format(batch_format)
        return B.to_batch(self._table, batch_format)

    def iter_rows(self, public_row_format: bool = True) -> Iterator[dict]:
        return iter(B.rows_of(self._table))

    def slice(self, start: int, end: int, copy: bool = False) -> pa.Table:
        return self._table.slice(start, end - start)

    def get_metadata(self, input_files=None, exec_stats=None) -> BlockMetadata:
        return BlockMetadata(self.num_rows(), self.size_bytes(), input_files, exec_stats)
