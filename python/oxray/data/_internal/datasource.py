"""Where a dataset's rows come from: files read by the Rust engine, in-memory data, ranges.

A datasource lists its read tasks (picklable callables that return blocks) when the dataset
executes. Parquet can also stream in-process: row groups decoded on Rust threads, ahead of the
consumer within a byte budget, with projection and `limit` pushed into the reader.
"""

from __future__ import annotations

import abc
import io
import math
import os
from typing import Iterator, Optional

import numpy as np
import pyarrow as pa

import oxray
from oxray import _native
from oxray.data._internal import block as B


def _tables(batches) -> list:
    batches = [b for b in batches if b.num_rows]
    if not batches:
        return []
    return [pa.Table.from_batches(batches)]


def _normalize_paths(paths, what: str, filesystem=None) -> list:
    scheme = _check_filesystem(filesystem, what)
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if not isinstance(paths, (list, tuple)) or not paths:
        raise ValueError(f"{what}(paths={paths!r}): expected a path or a non-empty list of paths")
    out = []
    for p in paths:
        if not isinstance(p, (str, os.PathLike)):
            raise TypeError(f"{what}: a path must be a string, got {type(p).__name__} ({p!r})")
        p = os.fspath(p)
        if scheme and "://" not in p:
            p = scheme + p.lstrip("/")
        if "://" not in p:
            p = os.path.abspath(os.path.expanduser(p))
        elif not (p.startswith("s3://") or p.startswith("file://")):
            raise ValueError(f"{what}: {p!r} has an unsupported scheme; expected a local path, file:// or s3://")
        out.append(p)
    return out


def _strip_scheme(url: str) -> str:
    return url.split("://", 1)[-1].rstrip("/")


def _check_filesystem(filesystem, what: str) -> str:
    """The scheme that scheme-less paths get with this pyarrow filesystem ('' for local).

    The engine reads S3 with the standard AWS settings of the environment, so an
    S3FileSystem is accepted only when what it sets agrees with them."""
    if filesystem is None:
        return ""
    name = type(filesystem).__name__
    if name == "LocalFileSystem":
        return ""
    if name == "S3FileSystem":
        settings = filesystem.__reduce__()[1][0]
        env = os.environ
        checks = [
            ("endpoint_override", settings.get("endpoint_override") or "",
             env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or "", "AWS_ENDPOINT_URL"),
            ("access_key", settings.get("access_key") or "", env.get("AWS_ACCESS_KEY_ID", ""), "AWS_ACCESS_KEY_ID"),
            ("secret_key", settings.get("secret_key") or "", env.get("AWS_SECRET_ACCESS_KEY", ""),
             "AWS_SECRET_ACCESS_KEY"),
        ]  # fmt: skip
        for field, given, have, var in checks:
            if given and _strip_scheme(given) != _strip_scheme(have):
                raise ValueError(
                    f"{what}(filesystem=S3FileSystem({field}=...)): oxray's engine reads S3 with the environment's "
                    f"AWS settings, and {var} does not match; set {var} (and the other AWS_* variables) "
                    "instead of passing a filesystem"
                )
        return "s3://"
    raise ValueError(
        f"{what}(filesystem={name}): oxray reads local paths and s3:// URIs itself "
        "(S3 settings from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...); pass filesystem=None"
    )


def hive_partitions(uri: str, roots: list) -> dict:
    """`key=value` directories between an input directory and the file (Hive layout)."""
    for root in roots:
        root = root.rstrip("/")
        if uri.startswith(root + "/"):
            parts = uri[len(root) + 1 :].split("/")[:-1]
            return dict(p.split("=", 1) for p in parts if "=" in p and not p.startswith("="))
    return {}


def _with_partitions(tables: list, values: dict, columns) -> list:
    if not values:
        return tables
    out = []
    for t in tables:
        for key, value in values.items():
            if key in t.column_names or (columns is not None and key not in columns):
                continue
            t = t.append_column(key, pa.array([value] * t.num_rows, type=pa.string()))
        out.append(t)
    return out


class ReadTask(abc.ABC):
    rows: Optional[int] = None
    size: Optional[int] = None

    @abc.abstractmethod
    def __call__(self) -> list:
        """The blocks this task reads."""


class ParquetFragment(ReadTask):
    def __init__(self, uri: str, row_groups: Optional[list], columns, limit, rows: int, size: int, partitions=None):
        self.uri, self.row_groups, self.columns, self.limit = uri, row_groups, columns, limit
        self.rows, self.size = rows, size
        self.partitions = partitions or {}

    def __call__(self) -> list:
        batch_rows = max(self.rows or 1, 1)
        file_columns = self.columns
        if file_columns is not None and self.partitions:
            file_columns = [c for c in file_columns if c not in self.partitions]
        tables = _tables(_native.data_read_parquet(self.uri, self.row_groups, file_columns, self.limit, batch_rows))
        tables = _with_partitions(tables, self.partitions, self.columns)
        if self.columns is not None and tables:
            tables = [t.select(self.columns) for t in tables]
        return tables


class Datasource(abc.ABC):
    name = "Read"
    # How its read tasks run when they run as tasks (read_csv(concurrency=..., num_cpus=...)).
    read_compute = None
    # Whether `local_stream` reads it in this process (else its read tasks run as tasks).
    streams_locally = False

    @abc.abstractmethod
    def read_tasks(self) -> list:
        """The picklable tasks that read this source, in order."""

    def schema(self) -> Optional[pa.Schema]:
        return None

    def count(self) -> Optional[int]:
        return None

    def local_stream(self, threads: int, budget_bytes: int) -> Iterator[pa.Table]:
        """Blocks read in this process by the engine (when `streams_locally`)."""
        raise TypeError(f"{type(self).__name__} is read by tasks, not streamed in this process")


STREAM_BLOCK_BYTES = 8 << 20


class ParquetDatasource(Datasource):
    name = "ReadParquet"
    streams_locally = True

    def __init__(
        self,
        paths,
        columns=None,
        limit=None,
        target_block_bytes=128 << 20,
        _files=None,
        _info=None,
        num_blocks=None,
        concurrency=None,
        include_paths: bool = False,
    ):
        self.paths = paths
        self.include_paths = include_paths
        self.num_blocks, self.concurrency = num_blocks, concurrency
        self.columns = list(columns) if columns is not None else None
        self.limit = limit
        self.target_block_bytes = target_block_bytes
        if _files is None:
            _files = [uri for uri, _size in _native.data_expand_paths(paths, ["parquet"])]
        self.files = _files
        if _info is None:
            _info = _native.data_parquet_inspect(self.files)
        self._schema, self._row_groups = _info
        self._partitions = [hive_partitions(uri, self.paths) for uri in self.files]
        if include_paths:
            # Ray's `path` column: the file's path without its scheme, like the other constant columns.
            self._partitions = [
                {**p, "path": uri.split("://", 1)[-1]} for p, uri in zip(self._partitions, self.files, strict=True)
            ]
        keys = list(dict.fromkeys(k for p in self._partitions for k in p))
        extra = [pa.field(k, pa.string()) for k in keys if k not in self._schema.names]
        if extra:
            self._schema = pa.schema(list(self._schema) + extra)
        if self.columns is not None:
            missing = [c for c in self.columns if c not in self._schema.names]
            if missing:
                raise ValueError(
                    f"read_parquet(columns={self.columns!r}): unknown column(s) {missing}; "
                    f"the files have {self._schema.names}"
                )

    def with_(self, columns=None, limit=None) -> "ParquetDatasource":
        """This source with a projection or a row limit pushed into the reader."""
        if columns is None and limit is None:
            return self
        if limit is not None and self.limit is not None:
            limit = min(limit, self.limit)
        return ParquetDatasource(
            self.paths,
            columns if columns is not None else self.columns,
            limit if limit is not None else self.limit,
            self.target_block_bytes,
            self.files,
            (self._schema, self._row_groups),
            self.num_blocks,
            self.concurrency,
            self.include_paths,
        )

    def schema(self) -> pa.Schema:
        if self.columns is None:
            return self._schema
        return pa.schema([self._schema.field(c) for c in self.columns])

    def count(self) -> int:
        total = sum(rows for groups in self._row_groups for rows, _ in groups)
        return total if self.limit is None else min(total, self.limit)

    def _column_share(self) -> float:
        if self.columns is None or not self._schema.names:
            return 1.0
        return max(len(self.columns) / len(self._schema.names), 0.01)

    def fragments(self) -> list:
        """Consecutive row groups of a file, grouped up to the target block size."""
        out = []
        share = self._column_share()
        remaining = self.limit
        target = self.target_block_bytes
        if self.num_blocks:
            # override_num_blocks: fragments of an equal share of the bytes (a row group is never cut).
            total = sum(int(b * share) for groups in self._row_groups for _, b in groups)
            target = max(1, total // self.num_blocks)
        for uri, groups, parts in zip(self.files, self._row_groups, self._partitions, strict=True):
            current, rows, size = [], 0, 0
            for i, (g_rows, g_bytes) in enumerate(groups):
                current.append(i)
                rows += g_rows
                size += int(g_bytes * share)
                if size >= target or i == len(groups) - 1:
                    if remaining is not None and remaining <= 0:
                        break
                    out.append(ParquetFragment(uri, current, self.columns, remaining, rows, size, parts))
                    if remaining is not None:
                        remaining -= rows
                    current, rows, size = [], 0, 0
            if remaining is not None and remaining <= 0:
                break
        return out

    def read_tasks(self) -> list:
        return self.fragments()

    @property
    def read_compute(self):
        from oxray.data._internal.plan import ComputeSpec

        return ComputeSpec(task_concurrency=int(self.concurrency)) if self.concurrency else None

    def local_stream(self, threads: int, budget_bytes: int):
        frags = self.fragments()
        if not frags:
            return iter(())
        if any(self._partitions):
            return (t for f in frags for t in f())
        # Blocks of about 8 MiB: the first batch waits for one of them, not a whole fragment.
        rows = sum(f.rows for f in frags)
        row_bytes = max(sum(f.size for f in frags) / max(rows, 1), 1.0)
        batch_rows = int(min(max(STREAM_BLOCK_BYTES / row_bytes, 1024), max(max(f.rows for f in frags), 1)))
        if self.concurrency:
            threads = max(1, min(threads, int(self.concurrency)))
        stream = _native.DataParquetStream(
            [(f.uri, f.row_groups) for f in frags], self.columns, self.limit, batch_rows, threads, budget_bytes
        )
        return (pa.Table.from_batches([b]) for b in stream if b.num_rows)


# Files the engine reads whole and Python decodes (csv, json, text, images, numpy, bytes).
_FILE_FORMATS = {
    "csv": ("ReadCSV", ["csv", "csv.gz"]),
    "json": ("ReadJSON", ["json", "jsonl", "json.gz", "jsonl.gz"]),
    "text": ("ReadText", None),
    "numpy": ("ReadNumpy", ["npy"]),
    "images": ("ReadImage", ["png", "jpg", "jpeg", "bmp", "gif", "tif", "tiff", "webp"]),
    "binary": ("ReadBinary", None),
}


class FileRead(ReadTask):
    def __init__(self, fmt: str, uri: str, size: int, options: dict, include_paths: bool):
        self.fmt, self.uri, self.size, self.options, self.include_paths = fmt, uri, size, options, include_paths

    def __call__(self) -> list:
        fmt, uri, o = self.fmt, self.uri, self.options
        if fmt == "csv":
            tables = _tables(_native.data_read_csv(uri, o.get("delimiter", ","), o.get("has_header", True), None))
        elif fmt == "json":
            tables = _tables(_native.data_read_json(uri, o.get("lines")))
        elif fmt == "text":
            tables = _tables(_native.data_read_text(uri, o.get("drop_empty_lines", False)))
        elif fmt == "numpy":
            arr = np.load(io.BytesIO(_native.data_read_bytes(uri)), allow_pickle=False)
            tables = [B.table_from_columns({"data": arr})]
        elif fmt == "images":
            tables = [B.table_from_columns({"image": [_decode_image(uri, o)]})]
        else:
            tables = [pa.table({"bytes": pa.array([_native.data_read_bytes(uri)], type=pa.binary())})]
        if self.include_paths:
            tables = [t.append_column("path", pa.array([uri] * t.num_rows, type=pa.string())) for t in tables]
        return tables


def _decode_image(uri: str, options: dict) -> np.ndarray:
    from PIL import Image

    data = _native.data_read_bytes(uri)
    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    except Exception as e:  # noqa: BLE001 - Pillow raises many kinds
        raise ValueError(f"read_images: {uri} is not an image Pillow can decode: {e}") from e
    if options.get("mode"):
        image = image.convert(options["mode"])
    if options.get("size"):
        height, width = options["size"]
        image = image.resize((width, height))
    return np.asarray(image)


class FileDatasource(Datasource):
    def __init__(self, fmt: str, paths, options: dict, include_paths: bool, file_extensions=None):
        self.fmt = fmt
        self.name, default_ext = _FILE_FORMATS[fmt]
        exts = file_extensions if file_extensions is not None else default_ext
        self.files = _native.data_expand_paths(paths, list(exts) if exts else None)
        self.options = options
        self.include_paths = include_paths

    # override_num_blocks: at most this many read tasks, each reading a run of whole files.
    num_tasks = None

    def read_tasks(self) -> list:
        reads = [FileRead(self.fmt, uri, size, self.options, self.include_paths) for uri, size in self.files]
        if not self.num_tasks or int(self.num_tasks) >= len(reads):
            return reads
        n = int(self.num_tasks)
        return [FileReads(reads[i * len(reads) // n : (i + 1) * len(reads) // n]) for i in range(n)]


class FileReads(ReadTask):
    """Several files read by one task, one after the other."""

    def __init__(self, reads: list):
        self.reads = reads
        self.size = sum(r.size or 0 for r in reads)

    def __call__(self) -> list:
        return [t for r in self.reads for t in r()]


class StoredBlocksRead(ReadTask):
    """One block list already in the object store (the reference rides inside the task, so
    the task fetches it where it runs)."""

    def __init__(self, ref, rows: int, size: int):
        self.refs = [ref]
        self.rows, self.size = rows, size

    def __call__(self) -> list:
        return list(oxray.get(self.refs[0]))


class StoredBlocksDatasource(Datasource):
    streams_locally = True

    """A materialized dataset's blocks (from_items, from_pandas, ..., materialize())."""

    def __init__(self, refs: list, meta: list, schema, name: str):
        self.name = name
        self.refs, self.meta, self._schema = refs, meta, schema

    def read_tasks(self) -> list:
        return [StoredBlocksRead(r, rows, size) for r, (rows, size) in zip(self.refs, self.meta, strict=True)]

    def schema(self):
        return self._schema

    def count(self) -> int:
        return sum(rows for rows, _ in self.meta)

    def local_stream(self, threads: int, budget_bytes: int):
        return (t for r in self.refs for t in oxray.get(r))


class RangeTask(ReadTask):
    def __init__(self, start: int, stop: int, shape):
        self.start, self.stop, self.shape = start, stop, shape
        self.rows = stop - start

    def __call__(self) -> list:
        ids = np.arange(self.start, self.stop, dtype=np.int64)
        if self.shape is None:
            return [B.table_from_columns({"id": ids})]
        data = np.broadcast_to(ids.reshape((-1,) + (1,) * len(self.shape)), (len(ids), *self.shape))
        return [B.table_from_columns({"data": np.ascontiguousarray(data)})]


class RangeDatasource(Datasource):
    streams_locally = True

    def __init__(self, n: int, num_blocks: int, shape=None):
        self.name = "ReadRange" if shape is None else "ReadRangeTensor"
        self.n, self.num_blocks, self.shape = n, max(1, num_blocks), shape

    def read_tasks(self) -> list:
        per = max(1, math.ceil(self.n / self.num_blocks))
        return [RangeTask(s, min(s + per, self.n), self.shape) for s in range(0, self.n, per)]

    def schema(self):
        if self.shape is None:
            return pa.schema([("id", pa.int64())])
        return None

    def count(self) -> int:
        return self.n

    def local_stream(self, threads: int, budget_bytes: int):
        return (t for task in self.read_tasks() for t in task())


class UserRead(ReadTask):
    """A user `ReadTask` run by the engine: its blocks as Arrow tables."""

    def __init__(self, task, name: str):
        self.task, self.name = task, name
        meta = getattr(task, "metadata", None)
        self.rows = getattr(meta, "num_rows", None)
        self.size = getattr(meta, "size_bytes", None)

    def __call__(self) -> list:
        from oxray.data.read_api import _as_table

        tables = []
        for block in self.task():
            table = _as_table(block, f"{self.name}'s read task")
            if table.num_rows or table.num_columns:
                tables.append(table)
        limit = getattr(self.task, "per_task_row_limit", None)
        if limit is not None:
            tables = [B.concat(tables).slice(0, limit)] if tables else []
        return tables


def _accepted_kwargs(fn, candidates: dict) -> dict:
    """The keyword arguments `fn` takes, of `candidates` (user subclasses vary in signature)."""
    import inspect

    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return candidates
    return {k: v for k, v in candidates.items() if k in params}


class UserDatasource(Datasource):
    """A user's `Datasource` (Ray's API): its read tasks run as tasks."""

    def __init__(self, datasource, parallelism: int, read_args: Optional[dict] = None):
        self.datasource = datasource
        self.parallelism = parallelism
        self.read_args = dict(read_args or {})
        self.name = f"Read{datasource.get_name()}"
        self._tasks = None

    def _user_tasks(self) -> list:
        if self._tasks is None:
            from oxray.data.context import DataContext

            if hasattr(self.datasource, "prepare_read"):
                # Ray's older API: prepare_read(parallelism, **read_args).
                tasks = self.datasource.prepare_read(self.parallelism, **self.read_args)
            else:
                fn = self.datasource.get_read_tasks
                kwargs = _accepted_kwargs(fn, {"per_task_row_limit": None, "data_context": DataContext.get_current()})
                tasks = fn(self.parallelism, **kwargs)
            if not isinstance(tasks, (list, tuple)) or not all(callable(t) for t in tasks):
                raise TypeError(f"{type(self.datasource).__name__}.get_read_tasks must return a list of ReadTasks")
            self._tasks = list(tasks)
        return self._tasks

    def read_tasks(self) -> list:
        return [UserRead(t, self.name) for t in self._user_tasks()]

    def count(self) -> Optional[int]:
        rows = [getattr(getattr(t, "metadata", None), "num_rows", None) for t in self._user_tasks()]
        return sum(rows) if rows and all(r is not None for r in rows) else None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_tasks"] = None
        return state
