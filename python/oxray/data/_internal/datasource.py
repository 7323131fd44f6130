"""Where a dataset's rows come from: files read by the Rust engine, in-memory data, ranges.

A datasource lists its read tasks (picklable callables that return blocks) when the dataset
executes. Parquet can also stream in-process: row groups decoded on Rust threads, ahead of the
consumer within a byte budget, with projection and `limit` pushed into the reader.
"""

from __future__ import annotations

import abc
import copy
import hashlib
import io
import logging
import math
import os
from typing import Iterator, Optional

import numpy as np
import pyarrow as pa

import oxray
from oxray import _native
from oxray.data._internal import block as B
from oxray.data._internal import file_io
from oxray.data._internal.example_data import EXAMPLE_SCHEME, resolve_example_path

logger = logging.getLogger(__name__)


def _tables(batches) -> list:
    batches = [b for b in batches if b.num_rows]
    if not batches:
        return []
    return [pa.Table.from_batches(batches)]


def resolve_paths(paths, what: str, filesystem=None) -> tuple:
    """`(paths, fs)`: the paths to read, and the pyarrow filesystem to read them through (None
    when the engine reads them itself: local, s3:// with the environment's settings)."""
    scheme, fs = file_io.resolve(filesystem, what, _engine_scheme)
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if not isinstance(paths, (list, tuple)) or not paths:
        raise ValueError(f"{what}(paths={paths!r}): expected a path or a non-empty list of paths")
    out = []
    for p in paths:
        if not isinstance(p, (str, os.PathLike)):
            raise TypeError(f"{what}: a path must be a string, got {type(p).__name__} ({p!r})")
        p = os.fspath(p)
        if fs is not None:
            # A path on that filesystem, as the user names it; pyarrow's own filesystems take
            # it without a scheme (fsspec's strip theirs).
            if "://" in p and not isinstance(fs, file_io.pafs.PyFileSystem):
                p = p.split("://", 1)[1]
            out.append(p.rstrip("/") or "/")
            continue
        if p.startswith(EXAMPLE_SCHEME):
            # Ray's example://<name>: a data set shipped in the package (example_data.py), always local.
            out.append(resolve_example_path(p, what))
            continue
        if scheme and "://" not in p:
            p = scheme + p.lstrip("/")
        if "://" not in p:
            p = os.path.abspath(os.path.expanduser(p))
        elif not (p.startswith("s3://") or p.startswith("file://")):
            raise ValueError(
                f"{what}: {p!r} has an unsupported scheme; expected a local path, file://, s3:// or example://"
            )
        out.append(p)
    return out, fs


def _strip_scheme(url: str) -> str:
    return url.split("://", 1)[-1].rstrip("/")


def _engine_scheme(filesystem) -> Optional[str]:
    """The scheme scheme-less paths get when the engine reads this pyarrow filesystem's files
    itself ('' for local), or None when reads must go through it (file_io.py).

    The engine reads S3 with the standard AWS settings of the environment, so an S3FileSystem
    is read by the engine only when what it sets agrees with them."""
    name = type(filesystem).__name__
    if name == "LocalFileSystem":
        return ""
    if name == "S3FileSystem":
        settings = filesystem.__reduce__()[1][0]
        env = os.environ
        endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or ""
        checks = [
            (settings.get("endpoint_override") or "", endpoint),
            (settings.get("access_key") or "", env.get("AWS_ACCESS_KEY_ID", "")),
            (settings.get("secret_key") or "", env.get("AWS_SECRET_ACCESS_KEY", "")),
        ]
        if all(not given or _strip_scheme(given) == _strip_scheme(have) for given, have in checks):
            return "s3://"
    return None


def _partition_type(value) -> pa.DataType:
    if isinstance(value, bool):
        return pa.bool_()
    if isinstance(value, int):
        return pa.int64()
    if isinstance(value, float):
        return pa.float64()
    return pa.string()


def _with_partitions(tables: list, values: dict, columns) -> list:
    if not values:
        return tables
    out = []
    for t in tables:
        for key, value in values.items():
            if key in t.column_names or (columns is not None and key not in columns):
                continue
            # Strings, or the type a Partitioning's field_types gave the value.
            t = t.append_column(key, pa.array([value] * t.num_rows, type=_partition_type(value)))
        out.append(t)
    return out


class ReadTask(abc.ABC):
    rows: Optional[int] = None
    size: Optional[int] = None
    # Bytes it reads from the object store (blocks already there): its task goes beside them.
    stored_bytes: int = 0

    @abc.abstractmethod
    def __call__(self) -> list:
        """The blocks this task reads."""


PATH_COLUMN = "path"
ROW_HASH_COLUMN = "row_hash"


def row_hashes(path: str, start_row: int, num_rows: int) -> np.ndarray:
    """Ray's `row_hash` values: a seed from the file's path (the first 8 bytes of its MD5,
    little-endian) plus each row's position in that file's output, passed through the
    splitmix64 finalizer, so a row's hash is the same on every read and differs between files."""
    seed = np.uint64(int.from_bytes(hashlib.md5(path.encode("utf-8")).digest()[:8], "little"))
    keys = np.arange(start_row, start_row + num_rows, dtype=np.uint64) + seed  # wraps modulo 2**64
    for shift, multiplier in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB)):
        keys ^= keys >> np.uint64(shift)
        keys *= np.uint64(multiplier)
    keys ^= keys >> np.uint64(31)
    return keys


def _fill_column(table: pa.Table, name: str, values: pa.Array) -> pa.Table:
    """`values` as column `name`: in its place if the table has one, else appended."""
    if name in table.column_names:
        return table.set_column(table.column_names.index(name), name, values)
    return table.append_column(name, values)


def _is_tensor(arrow_type: pa.DataType) -> bool:
    from oxray.data._internal.columns import is_tensor_type

    return is_tensor_type(arrow_type)


def _variable_tensor_type(types: list) -> pa.DataType:
    """The variable-shape tensor type that holds the tensors of every one of `types`."""
    from oxray.data._internal.columns import VariableShapeTensorType

    value_types, ndims = set(), set()
    for t in types:
        if isinstance(t, VariableShapeTensorType):
            value_types.add(t.value_type)
            ndims.add(t.ndim)
        elif hasattr(t, "shape") and hasattr(t, "value_type"):
            value_types.add(t.value_type)
            ndims.add(len(t.shape))
        else:
            raise TypeError(f"{t} is not a tensor type oxray can make variable-shape")
    if len(ndims) != 1:
        raise TypeError(f"the tensors have different numbers of dimensions {sorted(ndims)}")
    (ndim,) = ndims
    dtype = np.result_type(*[t.to_pandas_dtype() for t in value_types])
    return VariableShapeTensorType(pa.from_numpy_dtype(dtype), ndim)


def unify_file_schemas(files: list, schemas: list) -> pa.Schema:
    """One schema for files whose schemas differ, as Ray reads them: columns of every file
    (in order of first appearance; a file without one reads it as nulls), types promoted
    (null to anything, narrower numbers to wider), and tensors whose shapes differ between
    files made variable-shape."""
    try:
        return pa.unify_schemas(schemas, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError, NotImplementedError):
        pass
    names = list(dict.fromkeys(name for s in schemas for name in s.names))
    fields = []
    for name in names:
        present = [(f, s.field(name)) for f, s in zip(files, schemas, strict=True) if name in s.names]
        types = list(dict.fromkeys(field.type for _, field in present))
        if len(types) == 1:
            fields.append(present[0][1])
            continue
        try:
            if all(_is_tensor(t) or pa.types.is_null(t) for t in types):
                unified = _variable_tensor_type([t for t in types if not pa.types.is_null(t)])
            else:
                unified = (
                    pa.unify_schemas([pa.schema([field]) for _, field in present], promote_options="permissive")
                    .field(name)
                    .type
                )
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, NotImplementedError) as e:
            described = ", ".join(f"{f}: {field.type}" for f, field in present[:4])
            raise ValueError(
                f"read_parquet: column {name!r} has types that cannot be unified across the files ({described}): {e}"
            ) from None
        fields.append(pa.field(name, unified))
    return pa.schema(fields, metadata=schemas[0].metadata)


def conform_table(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` with exactly `schema`'s columns and types (missing columns as nulls; tensors
    made variable-shape where the schema says so; other types cast)."""
    from oxray.data._internal.columns import (
        VariableShapeTensorType,
        tensor_values,
        variable_shape_tensor_array,
    )

    columns = []
    for field in schema:
        if field.name not in table.column_names:
            columns.append(pa.nulls(table.num_rows, field.type))
            continue
        column = table.column(field.name)
        if column.type == field.type:
            columns.append(column)
        elif isinstance(field.type, VariableShapeTensorType) and _is_tensor(column.type):
            values = list(tensor_values(column.combine_chunks())) if len(column) else []
            columns.append(variable_shape_tensor_array(values) if values else pa.nulls(0, field.type))
        elif pa.types.is_null(column.type):
            columns.append(pa.nulls(table.num_rows, field.type))
        else:
            columns.append(column.cast(field.type))
    return pa.Table.from_arrays(columns, schema=schema)


def _split_rows(table: pa.Table, parts: int) -> list:
    """`table` as `parts` blocks of row counts differing by at most one."""
    if parts <= 1 or table.num_rows == 0:
        return [table]
    per, extra = divmod(table.num_rows, parts)
    out, start = [], 0
    for i in range(parts):
        rows = per + (1 if i < extra else 0)
        if rows:
            out.append(table.slice(start, rows))
        start += rows
    return out


class ParquetReadSpec:
    """What every fragment of one read does besides decoding: the output columns, the row
    limit, the Python-side steps (filter, row hash) and, when the files' schemas differ,
    the unified schema each file's rows are made to fit."""

    def __init__(self, columns, limit, filter_expr, row_hash: bool, batch_size, file_schema, filesystem=None):
        self.columns, self.limit, self.filter = columns, limit, filter_expr
        self.row_hash, self.batch_size, self.file_schema = row_hash, batch_size, file_schema
        self.filesystem = filesystem  # a user's filesystem to read through (None: the engine reads)


class ParquetFragment(ReadTask):
    """Consecutive row groups of one file. `first_row` is the file's row where they start (the
    row hash counts from it); `splits` cuts the output into that many blocks (override_num_blocks
    above the number of fragments)."""

    def __init__(
        self,
        uri: str,
        row_groups: Optional[list],
        spec: ParquetReadSpec,
        rows: int,
        size: int,
        partitions=None,
        first_row: int = 0,
        file_names=None,
        splits: int = 1,
    ):
        self.uri, self.row_groups, self.spec = uri, row_groups, spec
        self.rows, self.size = rows, size
        self.partitions = partitions or {}
        self.first_row, self.file_names, self.splits = first_row, file_names, splits

    @property
    def columns(self):
        return self.spec.columns

    @property
    def limit(self):
        return self.spec.limit

    def _file_columns(self) -> Optional[list]:
        """The columns to decode from the file (all, when a filter may need any of them)."""
        spec = self.spec
        if spec.columns is None or spec.filter is not None:
            columns = None
        else:
            added = set(self.partitions) | ({ROW_HASH_COLUMN} if spec.row_hash else set())
            columns = [c for c in spec.columns if c not in added]
        if self.file_names is not None:  # this file's own columns (the files' schemas differ)
            columns = [c for c in (columns if columns is not None else self.file_names) if c in self.file_names]
        return columns

    def __call__(self) -> list:
        spec = self.spec
        file_columns = self._file_columns()
        limit = spec.limit if spec.filter is None else None
        batch_rows = spec.batch_size or max(self.rows or 1, 1)
        if spec.filesystem is not None:
            batches = file_io.read_parquet(spec.filesystem, self.uri, self.row_groups, file_columns, limit)
        else:
            batches = _native.data_read_parquet(self.uri, self.row_groups, file_columns, limit, batch_rows)
        tables = _tables(batches)
        if not tables:
            return []
        table = tables[0]
        if spec.file_schema is not None:
            wanted = None if spec.columns is None or spec.filter is not None else set(spec.columns)
            table = conform_table(table, pa.schema([f for f in spec.file_schema if wanted is None or f.name in wanted]))
        keep = None if spec.filter is not None else spec.columns
        table = _with_partitions([table], self.partitions, keep)[0]
        if spec.filter is not None:
            table = table.filter(spec.filter)
            if spec.limit is not None:
                table = table.slice(0, spec.limit)
        if spec.row_hash and (spec.columns is None or ROW_HASH_COLUMN in spec.columns):
            hashes = row_hashes(_strip_scheme(self.uri), self.first_row, table.num_rows)
            table = _fill_column(table, ROW_HASH_COLUMN, pa.array(hashes, type=pa.uint64()))
        if spec.columns is not None:
            table = table.select(spec.columns)
        return _split_rows(table, self.splits)


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


def _inspect_files(files: list, filesystem=None) -> tuple:
    """The files' schema, row groups and, only when their schemas differ, each file's own
    column names (None when they agree)."""
    if filesystem is not None:
        inspected = [file_io.inspect_parquet(filesystem, uri) for uri in files]
        if not inspected or all(s.equals(inspected[0][0]) for s, _ in inspected[1:]):
            return (inspected[0][0] if inspected else pa.schema([])), [g for _, g in inspected], None
    else:
        try:
            schema, groups = _native.data_parquet_inspect(files)
            return schema, groups, None
        except ValueError as e:
            if "schemas differ" not in str(e):
                raise
        inspected = [(s, g[0]) for s, g in (_native.data_parquet_inspect([uri]) for uri in files)]
    # Schemas differ: one schema for them all (as Ray does), each file's columns kept.
    schemas, groups = [s for s, _ in inspected], [g for _, g in inspected]
    return unify_file_schemas(files, schemas), groups, [s.names for s in schemas]


def _partition_parser(partitioning):
    """The parser of a read's `partitioning` (a Partitioning, "hive", or None for none)."""
    from oxray.data.datasource.partitioning import Partitioning, PathPartitionParser

    if partitioning is None:
        return None
    if isinstance(partitioning, str):
        partitioning = Partitioning(partitioning)
    return PathPartitionParser(partitioning)


class FileShuffle:
    """The order a read takes its files in (`shuffle="files"` or a `FileShuffleConfig`), drawn
    again at each execution as Ray does: unseeded, or seeded with the config's seed for this
    execution's index."""

    def __init__(self, shuffle):
        self.shuffle = shuffle
        self.executions = 0

    def order(self, n: int) -> list:
        execution = self.executions
        self.executions += 1
        seed = None
        if self.shuffle != "files":
            seed = self.shuffle.get_seed(execution)
        indices = list(range(n))
        np.random.default_rng(seed).shuffle(indices)
        return indices


class ParquetDatasource(Datasource):
    name = "ReadParquet"
    streams_locally = True

    def __init__(
        self,
        paths,
        columns=None,
        *,
        target_block_bytes=128 << 20,
        num_blocks=None,
        concurrency=None,
        include_paths: bool = False,
        include_row_hash: bool = False,
        filter_expr=None,
        batch_size: Optional[int] = None,
        shuffle=None,
        file_extensions=("parquet",),
        partitioning="hive",
        partition_filter=None,
        filesystem=None,
    ):
        self.paths = paths
        self.filesystem = filesystem
        self.include_paths, self.include_row_hash = include_paths, include_row_hash
        self.num_blocks, self.concurrency = num_blocks, concurrency
        self.filter, self.batch_size = filter_expr, batch_size
        # One shuffler for this dataset and every pushed-down copy of it: it counts executions.
        self.shuffle = FileShuffle(shuffle) if shuffle is not None else None
        self.limit = None
        self.target_block_bytes = target_block_bytes
        exts = list(file_extensions) if file_extensions is not None else None
        if filesystem is not None:
            self.files = [uri for uri, _size in file_io.expand(filesystem, paths, exts, "read_parquet")]
        else:
            self.files = [uri for uri, _size in _native.data_expand_paths(paths, exts)]
        if partition_filter is not None:
            self.files = partition_filter(self.files, self.paths)
            if not self.files:
                raise ValueError(
                    f"read_parquet(partition_filter=...): no file of {self.paths} passes the partition filter"
                )
        self._file_schema, self._row_groups, self._file_names = _inspect_files(self.files, filesystem)
        parser = _partition_parser(partitioning)
        self._partitions = [parser(uri, self.paths) if parser else {} for uri in self.files]
        if include_paths:
            # Ray's `path` column: the file's path without its scheme, like the other constant columns.
            self._partitions = [
                {**p, PATH_COLUMN: _strip_scheme(uri)} for p, uri in zip(self._partitions, self.files, strict=True)
            ]
        schema = self._file_schema
        types = {k: _partition_type(v) for p in self._partitions for k, v in p.items()}
        extra = [pa.field(k, t) for k, t in types.items() if k not in schema.names]
        if extra:
            schema = pa.schema(list(schema) + extra, metadata=schema.metadata)
        if include_row_hash:
            # Ray's row hash is uint64, replacing a `row_hash` column the files may have.
            hash_field = pa.field(ROW_HASH_COLUMN, pa.uint64())
            if ROW_HASH_COLUMN in schema.names:
                schema = schema.set(schema.get_field_index(ROW_HASH_COLUMN), hash_field)
            else:
                schema = schema.append(hash_field)
        self._schema = schema
        self.columns = None
        if columns is not None:
            columns = list(columns)
            # As Ray, a projection keeps the columns the read itself adds.
            for added, wanted in ((PATH_COLUMN, include_paths), (ROW_HASH_COLUMN, include_row_hash)):
                if wanted and added not in columns:
                    columns.append(added)
            missing = [c for c in columns if c not in self._schema.names]
            if missing:
                raise ValueError(
                    f"read_parquet(columns={columns!r}): unknown column(s) {missing}; "
                    f"the files have {self._schema.names}"
                )
            self.columns = columns

    def with_(self, columns=None, limit=None) -> "ParquetDatasource":
        """This source with a projection or a row limit pushed into the reader."""
        if columns is None and limit is None:
            return self
        if limit is not None and self.limit is not None:
            limit = min(limit, self.limit)
        out = copy.copy(self)
        if columns is not None:
            out.columns = list(columns)
        if limit is not None:
            out.limit = limit
        return out

    def schema(self) -> pa.Schema:
        if self.columns is None:
            return self._schema
        return pa.schema([self._schema.field(c) for c in self.columns])

    def count(self) -> Optional[int]:
        if self.filter is not None:
            return None  # only reading the rows tells how many pass the filter
        total = sum(rows for groups in self._row_groups for rows, _ in groups)
        return total if self.limit is None else min(total, self.limit)

    def _column_share(self) -> float:
        if self.columns is None or not self._schema.names:
            return 1.0
        return max(len(self.columns) / len(self._schema.names), 0.01)

    def _spec(self) -> ParquetReadSpec:
        mixed = self._file_names is not None
        return ParquetReadSpec(
            self.columns,
            self.limit,
            self.filter,
            self.include_row_hash,
            self.batch_size,
            self._file_schema if mixed else None,
            self.filesystem,
        )

    def _file_order(self) -> list:
        """The files' indices in the order this execution reads them."""
        if self.shuffle is None:
            return list(range(len(self.files)))
        return self.shuffle.order(len(self.files))

    def fragments(self, order: Optional[list] = None) -> list:
        """Consecutive row groups of a file, grouped up to the target block size."""
        out = []
        spec = self._spec()
        share = self._column_share()
        # With a filter the row counts before it say nothing of the rows after it.
        remaining = self.limit if self.filter is None else None
        target = self.target_block_bytes
        if self.num_blocks:
            # override_num_blocks: fragments of an equal share of the bytes (a row group is never cut).
            total = sum(int(b * share) for groups in self._row_groups for _, b in groups)
            target = max(1, total // self.num_blocks)
        # A filtered row hash counts rows after the filter from the file's start: whole files.
        whole_files = self.filter is not None and self.include_row_hash
        for index in order if order is not None else range(len(self.files)):
            uri, groups, parts = self.files[index], self._row_groups[index], self._partitions[index]
            names = self._file_names[index] if self._file_names is not None else None
            current, rows, size, first_row, file_row = [], 0, 0, 0, 0
            for i, (g_rows, g_bytes) in enumerate(groups):
                if not current:
                    first_row = file_row
                current.append(i)
                rows += g_rows
                file_row += g_rows
                size += int(g_bytes * share)
                if (size >= target and not whole_files) or i == len(groups) - 1:
                    if remaining is not None and remaining <= 0:
                        break
                    out.append(ParquetFragment(uri, current, spec, rows, size, parts, first_row, names))
                    if remaining is not None:
                        remaining -= rows
                    current, rows, size = [], 0, 0
            if remaining is not None and remaining <= 0:
                break
        if self.num_blocks and 0 < len(out) < self.num_blocks:
            # More blocks asked for than fragments: Ray splits the read tasks' outputs.
            per, extra = divmod(int(self.num_blocks), len(out))
            for i, fragment in enumerate(out):
                fragment.splits = per + (1 if i < extra else 0)
        return out

    def read_tasks(self) -> list:
        return self.fragments(self._file_order())

    @property
    def read_compute(self):
        from oxray.data._internal.plan import ComputeSpec

        return ComputeSpec(task_concurrency=int(self.concurrency)) if self.concurrency else None

    def _engine_streams(self) -> bool:
        """Whether the engine's stream reads everything (no step it does not do itself)."""
        return not (
            any(self._partitions)
            or self.include_row_hash
            or self.filter is not None
            or self._file_names is not None
            or self.filesystem is not None
        )

    def local_stream(self, threads: int, budget_bytes: int):
        frags = self.fragments(self._file_order())
        if not frags:
            return iter(())
        if not self._engine_streams():
            return (t for f in frags for t in f())
        # Blocks of about 8 MiB: the first batch waits for one of them, not a whole fragment.
        rows = sum(f.rows for f in frags)
        row_bytes = max(sum(f.size for f in frags) / max(rows, 1), 1.0)
        batch_rows = int(min(max(STREAM_BLOCK_BYTES / row_bytes, 1024), max(max(f.rows for f in frags), 1)))
        if self.concurrency:
            threads = max(1, min(threads, int(self.concurrency)))
        decode_rows = min(batch_rows, self.batch_size) if self.batch_size else batch_rows
        stream = _native.DataParquetStream(
            [(f.uri, f.row_groups) for f in frags], self.columns, self.limit, decode_rows, threads, budget_bytes
        )
        batches = (b for b in stream if b.num_rows)
        if decode_rows == batch_rows:
            return (pa.Table.from_batches([b]) for b in batches)
        return _coalesce(batches, batch_rows)


def _coalesce(batches, rows: int):
    """Batches decoded `batch_size` rows at a time, joined into blocks of about `rows` rows."""
    pending, count = [], 0
    for batch in batches:
        pending.append(batch)
        count += batch.num_rows
        if count >= rows:
            yield pa.Table.from_batches(pending)
            pending, count = [], 0
    if pending:
        yield pa.Table.from_batches(pending)


# Files the engine reads whole and Python decodes (csv, json, text, images, numpy, bytes).
_FILE_FORMATS = {
    # read_csv reads every file it is given, as Ray's does (file_extensions=None).
    "csv": ("ReadCSV", None),
    "json": (
        "ReadJSON",
        [f"{base}{codec}" for codec in ("", ".gz", ".br", ".zst", ".lz4") for base in ("json", "jsonl")],
    ),
    "text": ("ReadText", None),
    "numpy": ("ReadNumpy", ["npy"]),
    "images": ("ReadImage", ["png", "jpg", "jpeg", "bmp", "gif", "tif", "tiff", "webp"]),
    "binary": ("ReadBinary", None),
}


# What Ray's pyarrow-based readers raise for a file its csv parser rejects (the cause is chained).
_CSV_FORMAT_ERROR = (
    "Failed to read CSV file: {path}. Please check the CSV file has correct format, or filter out "
    "non-CSV files with the 'file_extensions' argument. See read_csv() documentation for more details."
)


_UNDETECTED_SUFFIXES = {".br": "brotli", ".snappy": "snappy"}


def _compression_of(uri: str, compression: Optional[str]) -> Optional[str]:
    """The codec a file is read with: the one named in `arrow_open_stream_args`, else the one its
    suffix names (`.gz`, `.bz2`, `.br`, `.zst`, `.lz4`), as pyarrow detects it."""
    if compression is not None:
        return compression
    try:
        return pa.Codec.detect(uri).name
    except (ValueError, TypeError):
        # pyarrow detects neither `.br` nor `.snappy`; Ray checks them itself.
        lower = uri.lower()
        return next((codec for suffix, codec in _UNDETECTED_SUFFIXES.items() if lower.endswith(suffix)), None)


def _snappy_decompress(data: pa.Buffer, uri: str) -> pa.Buffer:
    """A snappy framed stream decoded with python-snappy, as Ray does: pyarrow has no streaming
    snappy codec."""
    try:
        import snappy
    except ImportError:
        raise ImportError(
            f"reading {uri} with compression='snappy' needs the python-snappy package (pip install python-snappy)"
        ) from None
    out = io.BytesIO()
    snappy.stream_decompress(src=io.BytesIO(data.to_pybytes()), dst=out)
    return pa.py_buffer(out.getvalue())


def _stored_bytes(uri: str, filesystem=None) -> bytes:
    """The file's bytes as stored: through the user's filesystem, or read by the engine."""
    if filesystem is not None:
        return file_io.read_bytes(filesystem, uri)
    return _native.data_read_bytes(uri)


def _file_buffer(uri: str, compression: Optional[str], filesystem=None) -> pa.Buffer:
    """The file's bytes, decompressed with its codec."""
    data = pa.py_buffer(_stored_bytes(uri, filesystem))
    codec = _compression_of(uri, compression)
    if codec is None or data.size == 0:
        return data
    if codec == "snappy":
        return _snappy_decompress(data, uri)
    return pa.input_stream(data, compression=codec).read_buffer()


def _engine_decodes(uri: str, options: dict, filesystem=None) -> bool:
    """Whether the engine's reader can take the file as it is stored (plain, or gzip by name)
    where it is (not behind a user's filesystem)."""
    if filesystem is not None:
        return False
    codec = _compression_of(uri, options.get("compression"))
    return codec is None or (codec == "gzip" and uri.lower().endswith(".gz"))


def _pyarrow_csv_parse_options(delimiter: str):
    import pyarrow.csv as pacsv

    return pacsv.ParseOptions(delimiter=delimiter)


def _read_csv_file(uri: str, options: dict, filesystem=None) -> list:
    """A csv file's blocks: the engine's reader, or pyarrow's when pyarrow options were given
    (or the file is compressed, or behind a user's filesystem)."""
    arrow_args = options.get("arrow")
    if arrow_args is None and not _engine_decodes(uri, options, filesystem):
        arrow_args = {"parse_options": _pyarrow_csv_parse_options(options.get("delimiter", ","))}
    try:
        if arrow_args is None:
            return _tables(_native.data_read_csv(uri, options.get("delimiter", ","), True, None))
        import pyarrow.csv as pacsv

        data = _file_buffer(uri, options.get("compression"), filesystem)
        reader = pacsv.open_csv(pa.BufferReader(data), **arrow_args)
        return _tables(list(reader))
    except ValueError as e:  # the engine's parse errors, and pyarrow's ArrowInvalid
        raise ValueError(_CSV_FORMAT_ERROR.format(path=uri)) from e


# pyarrow.json reports a record longer than its block this way; the read is retried with larger blocks.
_STRADDLING = "straddling object straddles two block boundaries"


def _read_json_with_pyarrow(data: pa.Buffer, arrow_args: dict, uri: str) -> list:
    """pyarrow.json over the whole file, doubling the block size while a record straddles two
    blocks (up to `DataContext.target_max_block_size`), as Ray reads JSON."""
    import pyarrow.json as pajson

    from oxray.data.context import DataContext

    given = arrow_args.get("read_options") or pajson.ReadOptions(use_threads=False)
    block_size = given.block_size
    max_block_size = DataContext.get_current().target_max_block_size
    while True:
        read_options = pajson.ReadOptions(use_threads=given.use_threads, block_size=block_size)
        try:
            # A Python file object, as Ray passes: pyarrow's own BufferReader rejects a negative block size.
            source = io.BytesIO(data)
            parse_options = arrow_args.get("parse_options")
            return [pajson.read_json(source, read_options=read_options, parse_options=parse_options)]
        except pa.ArrowInvalid as e:
            if _STRADDLING not in str(e):
                raise
            if max_block_size is not None and block_size >= max_block_size:
                raise pa.ArrowInvalid(
                    f"{uri}: {e} - block size raised to {block_size} bytes and still too small; pass a larger one "
                    "with read_options=pyarrow.json.ReadOptions(block_size=...)"
                ) from e
            block_size *= 2


def _read_json_with_python(data: pa.Buffer) -> list:
    """Python's json.load over the whole file (Ray's fallback when pyarrow cannot read it): a
    list of objects is one row each, one object is one row."""
    import json

    if data.size == 0:
        return []
    parsed = json.loads(data.to_pybytes())
    rows = parsed if isinstance(parsed, list) else [parsed]
    return [B.table_from_rows(rows, "read_json")] if rows else []


def _read_json_lines_with_pandas(uri: str, filesystem=None) -> list:
    """JSON Lines through pandas, as Ray reads `lines=True`: a line that is a list becomes columns
    "0", "1", ...; values Arrow cannot type in one column are kept as Python objects."""
    import pandas as pd

    data = _file_buffer(uri, None, filesystem)
    if data.size == 0:
        return []
    df = pd.read_json(io.BytesIO(data.to_pybytes()), lines=True)
    df.columns = [str(c) for c in df.columns]
    return [B.pandas_to_table(df)]


def _read_json_file(uri: str, options: dict, filesystem=None) -> list:
    """A JSON file's blocks. Without pyarrow options the engine reads it; `lines=True` files
    whose records the engine cannot type (lists, mixed types) are read through pandas, as Ray
    reads every `lines=True` file. With pyarrow options, or a codec the engine does not decode,
    pyarrow reads it, and Python's json module when pyarrow cannot, as in Ray."""
    arrow_args = options.get("arrow")
    if arrow_args is None and not _engine_decodes(uri, options, filesystem):
        if options.get("lines") is True:
            return _read_json_lines_with_pandas(uri, filesystem)
        arrow_args = {}
    if arrow_args is None:
        try:
            return _tables(_native.data_read_json(uri, options.get("lines")))
        except ValueError as engine_error:
            if options.get("lines") is not True:
                raise
            try:
                return _read_json_lines_with_pandas(uri)
            except ValueError:
                # pandas cannot read it either: the engine's error names the bad line.
                raise engine_error from None
    data = _file_buffer(uri, options.get("compression"), filesystem)
    try:
        return [t for t in _read_json_with_pyarrow(data, arrow_args, uri) if t.num_rows]
    except pa.ArrowInvalid as e:
        logger.warning(f"pyarrow cannot read {uri} ({e}); reading it with Python's json module instead")
        return _read_json_with_python(data)


def _with_path_column(tables: list, uri: str) -> list:
    """Ray's `path` column (`include_paths=True`): the file each row came from."""
    return [t.append_column(PATH_COLUMN, pa.array([uri] * t.num_rows, type=pa.string())) for t in tables]


class FileRead(ReadTask):
    def __init__(self, fmt: str, uri: str, size: int, options: dict, include_paths: bool, filesystem=None):
        self.fmt, self.uri, self.size, self.options, self.include_paths = fmt, uri, size, options, include_paths
        self.filesystem = filesystem  # a user's filesystem to read through (None: the engine reads)

    def __call__(self) -> list:
        fmt, uri, o, fs = self.fmt, self.uri, self.options, self.filesystem
        if fmt == "csv":
            tables = _read_csv_file(uri, o, fs)
        elif fmt == "json":
            tables = _read_json_file(uri, o, fs)
        elif fmt == "text" and fs is not None:
            tables = file_io.read_text(fs, uri, o.get("drop_empty_lines", False))
        elif fmt == "text":
            tables = _tables(_native.data_read_text(uri, o.get("drop_empty_lines", False)))
        elif fmt == "numpy":
            arr = np.load(io.BytesIO(_stored_bytes(uri, fs)), allow_pickle=False)
            tables = [B.table_from_columns({"data": arr})]
        elif fmt == "images":
            tables = [B.table_from_columns({"image": [_decode_image(uri, o, fs)]})]
        else:
            data = _file_buffer(uri, o.get("compression"), fs)
            tables = [pa.table({"bytes": pa.array([data.to_pybytes()], type=pa.binary())})]
        return _with_path_column(tables, uri) if self.include_paths else tables


class FileRangeRead(ReadTask):
    """The lines that start in bytes `start..end` of one large csv or JSON Lines file: such a
    file is read by several of these, each about a block's worth, as Ray streams it in blocks
    instead of decoding it whole."""

    def __init__(self, fmt: str, uri: str, start: int, end: int, options: dict, include_paths: bool):
        self.fmt, self.uri, self.start, self.end = fmt, uri, start, end
        self.options, self.include_paths = options, include_paths
        self.size = end - start

    def __call__(self) -> list:
        uri = self.uri
        if self.fmt == "csv":
            try:
                batches = _native.data_read_csv_range(uri, self.start, self.end, self.options.get("delimiter", ","))
            except ValueError as e:
                raise ValueError(_CSV_FORMAT_ERROR.format(path=uri)) from e
        else:
            batches = _native.data_read_json_lines_range(uri, self.start, self.end)
        tables = _tables(batches)
        return _with_path_column(tables, uri) if self.include_paths else tables


def _line_ranges(fmt: str, uri: str, size: int, options: dict, filesystem, json_arrays: dict) -> Optional[list]:
    """`(start, end)` byte ranges of about a block each for a csv or JSON Lines file bigger than
    `DataContext.target_max_block_size` that the engine reads as stored; None to read it whole
    (a small file, a codec, pyarrow options, a user's filesystem, or a JSON array). `json_arrays`
    keeps, per file, whether it is one JSON array (read once, not at every execution)."""
    from oxray.data.context import DataContext

    block = DataContext.get_current().target_max_block_size
    if fmt not in ("csv", "json") or not block or size <= block:
        return None
    if options.get("arrow") is not None or not _engine_decodes(uri, options, filesystem):
        return None
    if fmt == "json" and options.get("lines") is not True:
        # lines=None detects: a file whose first non-space byte is `[` is one JSON array.
        if options.get("lines") is False:
            return None
        if uri not in json_arrays:
            json_arrays[uri] = _native.data_read_range(uri, 0, 4096).lstrip()[:1] == b"["
        if json_arrays[uri]:
            return None
    return [(start, min(start + block, size)) for start in range(0, size, block)]


def _decode_image(uri: str, options: dict, filesystem=None) -> np.ndarray:
    from PIL import Image

    data = _stored_bytes(uri, filesystem)
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
    def __init__(self, fmt: str, paths, options: dict, include_paths: bool, file_extensions=None, filesystem=None):
        self.fmt = fmt
        self.name, default_ext = _FILE_FORMATS[fmt]
        exts = list(file_extensions if file_extensions is not None else default_ext or []) or None
        self.filesystem = filesystem
        if filesystem is not None:
            self.files = file_io.expand(filesystem, paths, exts, f"read ({self.name})")
        else:
            self.files = _native.data_expand_paths(paths, exts)
        self.options = options
        self.include_paths = include_paths
        self._json_arrays: dict = {}  # uri -> whether that large JSON file is one array

    # override_num_blocks: at most this many read tasks, each reading a run of whole files.
    num_tasks = None

    def schema(self) -> Optional[pa.Schema]:
        # A binary read's rows are known without reading: one `bytes` row per file (Ray's schema).
        if self.fmt != "binary" or not self.files:
            return None
        fields = [("bytes", pa.binary())] + ([(PATH_COLUMN, pa.string())] if self.include_paths else [])
        return pa.schema(fields)

    def count(self) -> Optional[int]:
        return len(self.files) if self.fmt == "binary" else None

    def read_tasks(self) -> list:
        reads = []
        for uri, size in self.files:
            ranges = _line_ranges(self.fmt, uri, size, self.options, self.filesystem, self._json_arrays)
            if ranges is None:
                reads.append(FileRead(self.fmt, uri, size, self.options, self.include_paths, self.filesystem))
            else:
                reads.extend(FileRangeRead(self.fmt, uri, a, b, self.options, self.include_paths) for a, b in ranges)
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


class ReadGroup(ReadTask):
    """Consecutive read tasks run by one task, their blocks joined into one, so a batch size
    spanning them holds (Ray's fused read bundles its read tasks the same way)."""

    def __init__(self, reads: list):
        self.reads = reads
        self.rows = sum(r.rows for r in reads)
        self.size = sum(r.size or 0 for r in reads) or None
        self.stored_bytes = sum(r.stored_bytes for r in reads)

    def __call__(self) -> list:
        tables = [t for r in self.reads for t in r()]
        return [B.concat(tables)] if tables else []


def group_reads_for_batches(reads: list, batch_size: Optional[int]) -> list:
    """`reads` grouped so each group yields at least `batch_size` rows, when every read task
    knows its rows (otherwise as they are)."""
    if not batch_size or any(r.rows is None for r in reads):
        return reads
    groups, current, rows = [], [], 0
    for read in reads:
        current.append(read)
        rows += read.rows
        if rows >= batch_size:
            groups.append(current)
            current, rows = [], 0
    if current:
        groups.append(current)
    return [g[0] if len(g) == 1 else ReadGroup(g) for g in groups]


class StoredBlocksRead(ReadTask):
    """One block list already in the object store (the reference rides inside the task, so
    the task fetches it where it runs)."""

    def __init__(self, ref, rows: int, size: int):
        self.refs = [ref]
        self.rows, self.size = rows, size
        self.stored_bytes = size

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
