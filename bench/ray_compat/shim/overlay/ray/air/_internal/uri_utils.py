"""``URI``, written for the harness: Tune's test files join a storage path (a local path or
an ``s3://bucket?query`` URI) and a name with it, as Ray's ``ray.air._internal.uri_utils``
does (the query stays at the end; the bucket is the first part of the path)."""

import os
import urllib.parse
from pathlib import Path

from _ray_compat_shim import lenient_getattr

__getattr__ = lenient_getattr(__name__)


class URI:
    def __init__(self, uri: str):
        self._parsed = urllib.parse.urlparse(str(uri))
        if not self._parsed.scheme:
            self._path = Path(uri)
        else:
            self._path = Path(os.path.normpath(self._parsed.netloc + self._parsed.path))

    def _with_path(self, path) -> "URI":
        if not self._parsed.scheme:
            return URI(str(path))
        return URI(self._parsed._replace(netloc=str(path), path="").geturl())

    @property
    def name(self) -> str:
        return self._path.name

    @property
    def parent(self) -> "URI":
        return self._with_path(self._path.parent)

    @property
    def scheme(self) -> str:
        return self._parsed.scheme

    @property
    def path(self) -> str:
        return str(self._path)

    def __truediv__(self, part: str) -> "URI":
        return self._with_path(self._path / part)

    def __str__(self) -> str:
        if not self._parsed.scheme:
            return str(self._path)
        return self._parsed._replace(netloc=str(self._path), path="").geturl()

    def __repr__(self) -> str:
        return f"URI<{self}>"


def is_uri(path: str) -> bool:
    return bool(urllib.parse.urlparse(path).scheme)
