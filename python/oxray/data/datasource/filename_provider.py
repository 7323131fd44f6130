"""`FilenameProvider`: names the files a `write_*` call makes, as Ray Data's does.

A provider names each write task's file from the write's id and the task's index
(`get_filename_for_task`); a subclass may instead name each block's file
(`get_filename_for_block`). A task writing several files (`max_rows_per_file`, partitions)
gets `_000001`, `_000002`, ... after the first one's base name.
"""

from __future__ import annotations

from typing import Any, Optional

__all__ = ["FilenameProvider"]


class FilenameProvider:
    def __init__(self, dataset_uuid: Optional[str] = None, file_format: Optional[str] = None) -> None:
        self.dataset_uuid = dataset_uuid
        self.file_format = file_format

    def get_filename_for_task(self, write_uuid: str, task_index: int) -> str:
        name = f"{self.dataset_uuid}_" if self.dataset_uuid is not None else ""
        name += f"{write_uuid}_{task_index:06}"
        if self.file_format is not None:
            name += f".{self.file_format}"
        return name

    def get_filename_for_block(self, block: Any, write_uuid: str, task_index: int, block_index: int) -> str:
        """A subclass may name each block's file; the writers call this only when it does."""
        raise TypeError(f"{type(self).__name__} does not name files per block; it names them per task")

    def get_filename_for_row(
        self, row: dict, write_uuid: str, task_index: int, block_index: int, row_index: int
    ) -> str:
        """Ray's deprecated per-row hook: a row-based sink (`write_images`) names each row's file
        from `get_filename_for_task` plus `_{block}_{row}`, as Ray 2.60's does, never from this."""
        raise TypeError(f"{type(self).__name__}: oxray's writers name files per task or per block, never per row")


def names_blocks(provider: FilenameProvider) -> bool:
    """Whether a provider names each block's file itself (it overrides `get_filename_for_block`)."""
    return type(provider).get_filename_for_block is not FilenameProvider.get_filename_for_block


def check_provider(provider, what: str) -> None:
    """A provider that only names files per row would be silently unused: refused by name."""
    if not hasattr(provider, "get_filename_for_task"):
        raise TypeError(f"{what}(filename_provider=...): expected a FilenameProvider, got {type(provider).__name__}")
    cls = type(provider)
    per_row = cls.get_filename_for_row is not FilenameProvider.get_filename_for_row
    per_task = cls.get_filename_for_task is not FilenameProvider.get_filename_for_task
    if isinstance(provider, FilenameProvider) and per_row and not per_task and not names_blocks(provider):
        raise ValueError(
            f"{what}(filename_provider={cls.__name__}): it names files per row (get_filename_for_row), which "
            "oxray's writers never call; override get_filename_for_task or get_filename_for_block"
        )
