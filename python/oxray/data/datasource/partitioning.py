"""Path-based partitions, as Ray Data's `ray.data.datasource.partitioning` describes them.

A `Partitioning` says how a dataset's file paths carry column values: Hive style
(`root/year=2024/month=1/part.parquet`) or directory style (`root/2024/1/part.parquet` with
`field_names=["year", "month"]`). Readers add those values as columns (strings, or the
`field_types` given); a `PathPartitionFilter` keeps only the files whose values pass a function.

Paths are parsed without their scheme (`bucket/key` for s3://), from `base_dir` when one is
given, else from the directory the read was given (so directories above it never count).
"""

from __future__ import annotations

import os
import posixpath
import urllib.parse
from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, Dict, List, Optional

__all__ = ["PartitionStyle", "Partitioning", "PathPartitionFilter", "PathPartitionParser"]

_FIELD_TYPES = (int, float, str, bool)


class PartitionStyle(str, Enum):
    HIVE = "hive"
    DIRECTORY = "dir"


@dataclass
class Partitioning:
    style: PartitionStyle
    base_dir: Optional[str] = None
    field_names: Optional[List[str]] = None
    field_types: Optional[Dict[str, Any]] = None
    filesystem: Any = None

    def __post_init__(self):
        try:
            self.style = PartitionStyle(self.style)
        except ValueError:
            raise ValueError(f"Unsupported partition style: {self.style!r}; expected 'hive' or 'dir'") from None
        if self.base_dir is None:
            self.base_dir = ""
        if self.field_types is None:
            self.field_types = {}
        for name, data_type in self.field_types.items():
            if data_type not in _FIELD_TYPES:
                raise ValueError(
                    f"Partitioning(field_types={{{name!r}: {data_type!r}}}): expected int, float, str or bool"
                )
        if self.filesystem is not None and type(self.filesystem).__name__ != "LocalFileSystem":
            raise ValueError(
                f"Partitioning(filesystem={type(self.filesystem).__name__}): oxray parses the paths the read "
                "lists itself; pass filesystem=None"
            )

    @property
    def normalized_base_dir(self) -> str:
        """The base directory as the paths are parsed: without scheme, ending in '/' ('' if none)."""
        base = self.base_dir or ""
        if not base:
            return ""
        if "://" in base:
            base = base.split("://", 1)[1]
        else:
            base = os.path.abspath(os.path.expanduser(base))
        return base if base.endswith("/") else base + "/"


def _cast_value(value: str, data_type) -> Any:
    if data_type is int:
        return int(value)
    if data_type is float:
        return float(value)
    if data_type is bool:
        return value.lower() == "true"
    return value


class PathPartitionParser:
    """A file path's partition values, as a dict (empty for an unpartitioned file)."""

    @staticmethod
    def of(
        style: PartitionStyle = PartitionStyle.HIVE,
        base_dir: Optional[str] = None,
        field_names: Optional[List[str]] = None,
        field_types: Optional[Dict[str, Any]] = None,
        filesystem=None,
    ) -> "PathPartitionParser":
        return PathPartitionParser(Partitioning(style, base_dir, field_names, field_types, filesystem))

    def __init__(self, partitioning: Partitioning):
        if partitioning.style == PartitionStyle.DIRECTORY and not partitioning.field_names:
            raise ValueError(
                "Directory partitioning requires a corresponding list of partition key field names. "
                "Please retry your request with one or more field names specified."
            )
        self._scheme = partitioning

    @property
    def scheme(self) -> Partitioning:
        return self._scheme

    def __call__(self, path: str, roots: Optional[List[str]] = None) -> Dict[str, Any]:
        """The partition values of `path` (scheme-less). Without a base directory, the part of
        the path below whichever of `roots` (the read's inputs) holds it is parsed."""
        directory = self._dir_below_base(path.split("://", 1)[-1], roots)
        if directory is None:
            return {}
        if self._scheme.style == PartitionStyle.HIVE:
            values = self._parse_hive(directory)
        else:
            values = self._parse_dir(directory)
        for name, data_type in self._scheme.field_types.items():
            if name in values:
                values[name] = _cast_value(values[name], data_type)
        return values

    def _dir_below_base(self, path: str, roots: Optional[List[str]]) -> Optional[str]:
        base = self._scheme.normalized_base_dir
        if not base and roots:
            for root in roots:
                root = root.split("://", 1)[-1].rstrip("/") + "/"
                if path.startswith(root):
                    base = root
                    break
            else:
                return ""  # the path is one of the inputs itself: no directories to parse
        if not path.startswith(base):
            return None
        return posixpath.dirname(path[len(base) :])

    def _parse_hive(self, directory: str) -> Dict[str, str]:
        pairs = [d.split("=") for d in directory.split("/") if d and d.count("=") == 1]
        # pyarrow URL-encodes values it writes to object stores; decode them as Ray does.
        pairs = [(key, urllib.parse.unquote(value)) for key, value in pairs]
        names = self._scheme.field_names
        if names and pairs:
            if len(pairs) != len(names):
                raise ValueError(f"Expected {len(names)} partition value(s) but found {len(pairs)}: {pairs}.")
            for (key, _), name in zip(pairs, names, strict=True):
                if key != name:
                    raise ValueError(f"Expected partition key {name} but found {key}")
        return dict(pairs)

    def _parse_dir(self, directory: str) -> Dict[str, str]:
        dirs = [d for d in directory.split("/") if d]
        names = self._scheme.field_names
        if dirs and len(dirs) != len(names):
            raise ValueError(f"Expected {len(names)} partition value(s) but found {len(dirs)}: {dirs}.")
        if not dirs:
            return {}
        return {name: value for name, value in zip(names, dirs, strict=True) if name is not None}


class PathPartitionFilter:
    """Keeps the files whose partition values (strings, or `field_types`) pass `filter_fn`;
    an unpartitioned file's values are an empty dict."""

    @staticmethod
    def of(
        filter_fn: Callable[[Dict[str, Any]], bool],
        style: PartitionStyle = PartitionStyle.HIVE,
        base_dir: Optional[str] = None,
        field_names: Optional[List[str]] = None,
        field_types: Optional[Dict[str, Any]] = None,
        filesystem=None,
    ) -> "PathPartitionFilter":
        parser = PathPartitionParser.of(style, base_dir, field_names, field_types, filesystem)
        return PathPartitionFilter(parser, filter_fn)

    def __init__(self, path_partition_parser: PathPartitionParser, filter_fn: Callable[[Dict[str, Any]], bool]):
        if not callable(filter_fn):
            raise TypeError(f"PathPartitionFilter: filter_fn must be callable, got {type(filter_fn).__name__}")
        self._parser = path_partition_parser
        self._filter_fn = filter_fn

    @property
    def parser(self) -> PathPartitionParser:
        return self._parser

    def __call__(self, paths: List[str], roots: Optional[List[str]] = None) -> List[str]:
        return [p for p in paths if self._filter_fn(self._parser(p, roots))]

    def apply(self, path: str) -> bool:
        return bool(self._filter_fn(self._parser(path)))
