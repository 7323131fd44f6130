"""Reads through a user's filesystem (`filesystem=`): a pyarrow `FileSystem`, or an fsspec one
(gcsfs, adlfs, a `DirFileSystem`, ...) wrapped as pyarrow wraps it. The engine reads local paths
and `s3://` URIs itself (`oxray-data`); these functions do the same steps through pyarrow for
every other filesystem: list the files, read their bytes, inspect and read parquet."""

from __future__ import annotations

from typing import Optional

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq


def resolve(filesystem, what: str, engine_scheme) -> tuple:
    """`(scheme, fs)`: the scheme scheme-less paths get when the engine reads them itself
    (`engine_scheme(filesystem)`, None when it cannot), else `("", fs)` with `fs` the
    pyarrow filesystem to read through."""
    if filesystem is None:
        return "", None
    scheme = engine_scheme(filesystem)
    if scheme is not None:
        return scheme, None
    if isinstance(filesystem, pafs.FileSystem):
        return "", filesystem
    try:
        import fsspec
    except ImportError:  # pragma: no cover - fsspec comes with the filesystems it wraps
        fsspec = None
    if fsspec is not None and isinstance(filesystem, fsspec.AbstractFileSystem):
        return "", pafs.PyFileSystem(pafs.FSSpecHandler(filesystem))
    raise TypeError(
        f"{what}(filesystem={type(filesystem).__name__}): expected a pyarrow.fs.FileSystem or an "
        "fsspec.AbstractFileSystem"
    )


def _hidden(relative: str) -> bool:
    """As the engine skips them: a name under a listed directory starting with `.` or `_`."""
    return any(part.startswith((".", "_")) for part in relative.split("/") if part)


def expand(fs: pafs.FileSystem, paths: list, extensions: Optional[list], what: str) -> list:
    """Each path (a file, or a directory walked recursively) as `(path, size)`, as the engine
    expands local paths: a directory's files sorted, hidden names and, with `extensions`,
    files without one of them skipped; a file named explicitly is always kept."""
    wanted = [f".{e.lstrip('.').lower()}" for e in extensions or []]
    out = []
    for path in paths:
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(f"{what}: {path!r} does not exist on {fs.type_name} filesystem")
        if info.type != pafs.FileType.Directory:
            out.append((path, info.size))
            continue
        found = []
        for entry in fs.get_file_info(pafs.FileSelector(path, recursive=True)):
            relative = entry.path[len(path.rstrip("/")) :]
            if entry.type != pafs.FileType.File or _hidden(relative):
                continue
            if wanted and not entry.path.lower().endswith(tuple(wanted)):
                continue
            found.append((entry.path, entry.size))
        if not found:
            kinds = f" with extensions {extensions}" if extensions else ""
            raise ValueError(f"{what}: the directory {path!r} holds no files{kinds}")
        out.extend(sorted(found))
    return out


def read_bytes(fs: pafs.FileSystem, path: str) -> bytes:
    """The file's stored bytes (no decompression: the readers decode by codec themselves)."""
    with fs.open_input_stream(path, compression=None) as f:
        return f.read()


def inspect_parquet(fs: pafs.FileSystem, path: str) -> tuple:
    """A parquet file's schema and `(rows, bytes)` of each row group, from its footer."""
    try:
        meta = pq.ParquetFile(fs.open_input_file(path)).metadata
    except pa.ArrowInvalid as e:
        raise ValueError(f"{path}: not a parquet file ({e})") from e
    groups = [(meta.row_group(i).num_rows, meta.row_group(i).total_byte_size) for i in range(meta.num_row_groups)]
    return meta.schema.to_arrow_schema(), groups


def read_parquet(fs: pafs.FileSystem, path: str, row_groups: list, columns, limit: Optional[int]) -> list:
    """The row groups' rows (the first `limit` of them), as record batches."""
    table = pq.ParquetFile(fs.open_input_file(path)).read_row_groups(row_groups, columns=columns)
    if limit is not None:
        table = table.slice(0, limit)
    return table.to_batches()


def read_text(fs: pafs.FileSystem, path: str, drop_empty_lines: bool) -> list:
    """As the engine's text reader: one row per line (`\\n` or `\\r\\n`), no row for the end of
    the last line, whitespace-only lines dropped with `drop_empty_lines`."""
    text = read_bytes(fs, path).decode("utf-8")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    lines = [line[:-1] if line.endswith("\r") else line for line in lines]
    if drop_empty_lines:
        lines = [line for line in lines if line.strip()]
    return [pa.table({"text": pa.array(lines, type=pa.string())})] if lines else []
