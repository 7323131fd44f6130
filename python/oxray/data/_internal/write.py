"""Writers: the last step of a fused stage writes its blocks as files through the engine.

Each file is written under a temporary name and renamed (S3: one complete PUT), so no file
is ever seen half-written. Files carry the write's token in their name; if the write fails,
the files it already finished are removed, so a failed write leaves nothing named as complete.
"""

from __future__ import annotations

import io
import os
import shutil
import uuid

import numpy as np
import pyarrow as pa

from oxray import _native
from oxray.data._internal import block as B
from oxray.data._internal.transforms import BlockFn

_EXTENSIONS = {"parquet": "parquet", "csv": "csv", "json": "json", "numpy": "npy"}


def _partition_value(value) -> str:
    text = "__HIVE_DEFAULT_PARTITION__" if value is None else str(value)
    if "/" in text or text in (".", ".."):
        raise ValueError(f"write_parquet(partition_cols=...): the value {text!r} cannot be a directory name")
    return text


class WriteBlocks(BlockFn):
    def __init__(
        self, fmt: str, path: str, token: str, partition_cols, max_rows_per_file, column, options, filenames=None
    ):
        self.fmt, self.path, self.token = fmt, path.rstrip("/"), token
        self.partition_cols = partition_cols
        self.max_rows_per_file = max_rows_per_file
        self.column = column
        self.options = options
        self.filenames = filenames  # a user's FilenameProvider, or None
        self.name = f"Write{fmt.capitalize() if fmt != 'csv' else 'CSV'}"
        self._calls = 0

    def _filename(self, table: pa.Table, i: int) -> str:
        if self.filenames is None:
            return f"{self.token}_{uuid.uuid4().hex[:12]}_{i:06d}.{_EXTENSIONS[self.fmt]}"
        from oxray.data._internal import transforms as T
        from oxray.data.datasource.filename_provider import names_blocks

        task = T.current_task_index()
        if names_blocks(self.filenames):
            return self.filenames.get_filename_for_block(table, self.token, task, self._calls - 1 + i)
        name = self.filenames.get_filename_for_task(self.token, task)
        if i == 0:
            return name
        base, dot, ext = name.rpartition(".") if "." in name else (name, "", "")
        return f"{base}_{i:06d}{dot}{ext}"

    def _write_one(self, table: pa.Table, directory: str, i: int) -> str:
        name = self._filename(table, i)
        batches = table.to_batches() or [pa.RecordBatch.from_pylist([], schema=table.schema)]
        if self.fmt == "parquet":
            return _native.data_write_parquet(batches, directory, name, self.options.get("compression", "snappy"))
        if self.fmt == "csv":
            return _native.data_write_csv(batches, directory, name)
        if self.fmt == "json":
            return _native.data_write_json(batches, directory, name)
        buf = io.BytesIO()
        np.save(buf, B.column_to_numpy(table.column(self.column)), allow_pickle=False)
        return _native.data_write_bytes(directory, name, buf.getvalue())

    def _pieces(self, table: pa.Table) -> list:
        if not self.max_rows_per_file or table.num_rows <= self.max_rows_per_file:
            return [table]
        n = self.max_rows_per_file
        return [table.slice(s, n) for s in range(0, table.num_rows, n)]

    def __call__(self, table: pa.Table) -> list:
        self._calls += 1
        written = []
        groups = [(self.path, table)]
        if self.partition_cols:
            groups = []
            keys = table.select(self.partition_cols).to_pylist()
            order: dict = {}
            for i, key in enumerate(keys):
                order.setdefault(tuple(key[c] for c in self.partition_cols), []).append(i)
            data = table.drop_columns(self.partition_cols)
            for key, rows in order.items():
                sub = "/".join(f"{c}={_partition_value(v)}" for c, v in zip(self.partition_cols, key, strict=True))
                groups.append((f"{self.path}/{sub}", data.take(pa.array(rows))))
        i = 0
        for directory, part in groups:
            for piece in self._pieces(part):
                written.append(self._write_one(piece, directory, i))
                i += 1
        return [pa.table({"path": pa.array(written, type=pa.string())})]


def _local(path: str) -> str:
    return path[len("file://") :] if path.startswith("file://") else path


def existing_files(path: str) -> bool:
    """Whether anything is already under the write's directory (local or s3://)."""
    if path.startswith("s3://"):
        return bool(_native.Storage(path).list(""))
    local = _local(path)
    return os.path.exists(local) and (not os.path.isdir(local) or bool(os.listdir(local)))


def remove_existing(path: str) -> None:
    """Empties the write's directory (mode='overwrite')."""
    if path.startswith("s3://"):
        storage = _native.Storage(path)
        for rel in storage.list(""):
            storage.delete_dir(rel)
        return
    local = _local(path)
    for name in os.listdir(local):
        target = os.path.join(local, name)
        if os.path.isdir(target) and not os.path.islink(target):
            shutil.rmtree(target)
        else:
            os.remove(target)


def cleanup_written(path: str, token: str, finished=()) -> None:
    """Removes the files a failed write finished: those whose names carry its token, and those
    its finished tasks reported (a FilenameProvider's names need not carry it)."""
    finished = set(finished)
    if path.startswith("s3://"):
        storage = _native.Storage(path)
        prefix = path.rstrip("/") + "/"
        for rel in storage.list(""):
            if os.path.basename(rel).startswith(token + "_") or prefix + rel in finished:
                storage.delete_dir(rel)
        return
    local = _local(path)
    for root, _dirs, files in os.walk(local):
        for name in files:
            full = os.path.join(root, name)
            if name.startswith(token + "_") or full in finished:
                try:
                    os.remove(full)
                except FileNotFoundError:
                    pass


class DatasinkWrite(BlockFn):
    """A user `Datasink`'s `write` on one block, in a task; its return value rides back with
    the rows and bytes written."""

    def __init__(self, datasink):
        self.datasink = datasink
        self.name = f"Write{datasink.get_name()}"
        self._calls = 0

    def __call__(self, table: pa.Table) -> list:
        from oxray.data._internal import columns as C
        from oxray.data._internal.transforms import call_udf
        from oxray.data.datasource import TaskContext

        self._calls += 1
        ctx = TaskContext(task_idx=self._calls - 1, op_name=self.name)
        returned = call_udf(self.name, self.datasink.write, table, [table], ctx)
        return [
            pa.table(
                {
                    "rows": pa.array([table.num_rows], pa.int64()),
                    "bytes": pa.array([table.nbytes], pa.int64()),
                    "returned": C.objects_column([returned]),
                }
            )
        ]
