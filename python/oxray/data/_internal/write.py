"""Writers: the last step of a fused stage writes its blocks as files through the engine.

Each file is written under a temporary name and renamed (S3: one complete PUT), so no file
is ever seen half-written. Files carry the write's token in their name; if the write fails,
the files it already finished are removed, so a failed write leaves nothing named as complete.
"""

from __future__ import annotations

import inspect
import io
import os
import shutil
import uuid
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from oxray import _native
from oxray.data._internal import block as B
from oxray.data._internal.transforms import BlockFn

_EXTENSIONS = {"parquet": "parquet", "csv": "csv", "json": "json", "numpy": "npy"}


def _partition_value(value) -> str:
    text = "__HIVE_DEFAULT_PARTITION__" if value is None else str(value)
    if "/" in text or text in (".", ".."):
        raise ValueError(f"write_parquet(partition_cols=...): the value {text!r} cannot be a directory name")
    return text


# pyarrow's parquet writing options a write takes (Ray's `**arrow_parquet_args`), besides `schema`.
PARQUET_WRITE_ARGS = frozenset(
    name
    for name in inspect.signature(pq.write_table).parameters
    if name not in ("table", "where", "filesystem", "kwargs")
) | {"schema"}


def check_parquet_args(args: dict, what: str) -> None:
    unknown = sorted(set(args) - PARQUET_WRITE_ARGS)
    if unknown:
        raise ValueError(
            f"{what}({', '.join(unknown)}=...) is not supported by oxray; of pyarrow's parquet writing options it "
            f"takes {', '.join(sorted(PARQUET_WRITE_ARGS))}"
        )


class WriteBlocks(BlockFn):
    def __init__(
        self,
        fmt: str,
        path: str,
        token: str,
        partition_cols,
        max_rows_per_file,
        column,
        options,
        filenames=None,
        *,
        mode: str = "append",
        arrow_args: Optional[dict] = None,
        arrow_args_fn=None,
    ):
        self.fmt, self.path, self.token = fmt, path.rstrip("/"), token
        self.partition_cols = partition_cols
        self.max_rows_per_file = max_rows_per_file
        self.column = column
        self.options = options
        self.filenames = filenames  # a user's FilenameProvider, or None
        self.mode = mode
        # pyarrow's parquet options (row_group_size, schema, ...): such files are written by pyarrow.
        self.arrow_args, self.arrow_args_fn = dict(arrow_args or {}), arrow_args_fn
        self.name = f"Write{fmt.capitalize() if fmt != 'csv' else 'CSV'}"
        self._calls = 0
        self._files = 0  # files this task wrote, numbering a parquet template's `{i}`
        self._template = None

    def _parquet_template(self) -> str:
        """Ray's parquet file name from the provider's name for this task: the write's id must be
        in it when appending (or files of two writes could collide), and `{i}` numbers the
        task's files (added before the extension when the name lacks it)."""
        from oxray.data._internal import transforms as T

        task = T.current_task_index()
        if self._template is None or self._template[0] != task:
            # Cached per task: should a worker reuse this writer for another task, it names anew.
            self._files = 0
            name = self.filenames.get_filename_for_task(self.token, task)
            if self.token not in name and self.mode == "append":
                raise ValueError(
                    f"Write UUID '{self.token}' missing from filename template '{name}'. This could result in "
                    "files being overwritten.Modify your FileNameProvider implementation to include the "
                    "`write_uuid` into the filename template or change your write mode to SaveMode.OVERWRITE. "
                )
            if "{i}" in name:
                template = name if "parquet" in name else f"{name}.parquet"
            elif "parquet" not in name:
                template = f"{name}-{{i}}.parquet"
            else:
                stem, suffix = os.path.splitext(name)
                template = f"{stem}-{{i}}{suffix}"
            self._template = (task, template)
        return self._template[1]

    def _filename(self, table: pa.Table, i: int) -> str:
        if self.filenames is None:
            return f"{self.token}_{uuid.uuid4().hex[:12]}_{i:06d}.{_EXTENSIONS[self.fmt]}"
        from oxray.data._internal import transforms as T
        from oxray.data.datasource.filename_provider import names_blocks

        if self.fmt == "parquet":
            # Ray names parquet files per task only (its parquet sink never asks per block).
            template = self._parquet_template()
            self._files += 1
            return template.replace("{i}", str(self._files - 1))
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
            if self.arrow_args or self.arrow_args_fn is not None:
                return _native.data_write_bytes(directory, name, self._pyarrow_parquet(table))
            return _native.data_write_parquet(batches, directory, name, self.options.get("compression", "snappy"))
        if self.fmt == "csv":
            return _native.data_write_csv(batches, directory, name)
        if self.fmt == "json":
            return _native.data_write_json(batches, directory, name)
        buf = io.BytesIO()
        np.save(buf, B.column_to_numpy(table.column(self.column)), allow_pickle=False)
        return _native.data_write_bytes(directory, name, buf.getvalue())

    def _pyarrow_parquet(self, table: pa.Table) -> bytes:
        """The parquet file pyarrow writes with the write's options (the function's override
        the keywords, as in Ray), cast to the user's `schema` when one is given."""
        args = {"compression": self.options.get("compression", "snappy"), **self.arrow_args}
        if self.arrow_args_fn is not None:
            extra = self.arrow_args_fn()
            if not isinstance(extra, dict):
                raise TypeError(f"write_parquet(arrow_parquet_args_fn=...): it returned {extra!r}, expected a dict")
            check_parquet_args(extra, "write_parquet(arrow_parquet_args_fn)")
            args.update(extra)
        schema = args.pop("schema", None)
        if schema is not None and not table.schema.equals(schema):
            table = table.cast(schema)
        out = pa.BufferOutputStream()
        pq.write_table(table, out, **args)
        return out.getvalue().to_pybytes()

    def _pieces(self, table: pa.Table) -> list:
        if not self.max_rows_per_file or table.num_rows <= self.max_rows_per_file:
            return [table]
        n = self.max_rows_per_file
        return [table.slice(s, n) for s in range(0, table.num_rows, n)]

    def _write_images(self, table: pa.Table) -> list:
        """One file per row: the row's image in `column`, encoded by PIL (Ray's row-based
        sink: the task's file name, then `_{block:06}_{row:06}`, then the format's extension)."""
        from PIL import Image

        from oxray.data._internal import transforms as T

        fmt = self.options["file_format"]
        if self.filenames is None:
            base, ext = f"{self.token}_{uuid.uuid4().hex[:12]}", f".{fmt}"
        else:
            base, ext = os.path.splitext(self.filenames.get_filename_for_task(self.token, T.current_task_index()))
        block_index = self._calls - 1
        written = []
        for row_index, value in enumerate(B.column_to_numpy(table.column(self.column))):
            buf = io.BytesIO()
            try:
                Image.fromarray(np.asarray(value)).save(buf, format=fmt)
            except (TypeError, ValueError, OSError, KeyError) as e:
                raise ValueError(
                    f"write_images: row {row_index} of column {self.column!r} (shape {np.shape(value)}, dtype "
                    f"{np.asarray(value).dtype}) is not an image PIL can write as {fmt!r}: {e}"
                ) from e
            name = f"{base}_{block_index:06d}_{row_index:06d}{ext}"
            written.append(_native.data_write_bytes(self.path, name, buf.getvalue()))
        return written

    def __call__(self, table: pa.Table) -> list:
        self._calls += 1
        written = []
        if table.num_rows == 0:
            # As Ray: an empty block writes no file (an empty dataset leaves no directory).
            return [pa.table({"path": pa.array(written, type=pa.string())})]
        if self.fmt == "images":
            return [pa.table({"path": pa.array(self._write_images(table), type=pa.string())})]
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


def path_exists(path: str) -> bool:
    """Whether the write's directory exists (local, even empty) or holds objects (s3://, where
    a prefix exists only through them)."""
    if path.startswith("s3://"):
        return bool(_native.Storage(path).list(""))
    return os.path.exists(_local(path))


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
