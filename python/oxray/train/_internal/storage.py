"""Paths inside a run's storage: `<storage_path>/<name>/...`, local or s3://."""

from __future__ import annotations

import functools
import os

from oxray import _native

SNAPSHOT_FILE = "checkpoint_manager_snapshot.json"
VALIDATE_MARKER = ".validate_storage_marker"


def check_name(what: str, name: str) -> None:
    """A run or checkpoint directory name: one plain path component."""
    if (
        not isinstance(name, str)
        or not name
        or name in (".", "..", SNAPSHOT_FILE, VALIDATE_MARKER)
        or any(c in name for c in "/\\\0")
    ):
        raise ValueError(
            f"{what}: {name!r} is not a plain directory name (it must not be '.' or '..' or contain '/' or '\\')"
        )


def join(root: str, *parts: str) -> str:
    return "/".join([root.rstrip("/"), *[p.strip("/") for p in parts if p]])


def is_remote(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


# S3 options (pyarrow's names, as a URI query) of each storage root that was given some: a
# `?query` on the storage path, or a `storage_filesystem`. Paths under the root are opened with them.
_ROOT_OPTIONS: dict = {}


def split_options(uri: str) -> tuple:
    """(the URI without its `?query`, the query or "")."""
    path, _, query = uri.partition("?")
    return path, query


def register_options(root: str, query: str) -> None:
    if query:
        _ROOT_OPTIONS[root.rstrip("/")] = query


def options_for(uri: str) -> str:
    """The query registered for the longest root that `uri` is under, or ""."""
    roots = [root for root in _ROOT_OPTIONS if uri == root or uri.startswith(root + "/")]
    return _ROOT_OPTIONS[max(roots, key=len)] if roots else ""


def open_storage(uri: str) -> "_native.Storage":
    """The native storage client for a root, with the S3 options registered for it."""
    query = options_for(uri)
    return _open(f"{uri}?{query}" if query else uri)


@functools.lru_cache(maxsize=64)
def _open(uri: str) -> "_native.Storage":
    # Cached: an S3 client keeps its connections.
    return _native.Storage(uri)


# pyarrow S3FileSystem settings oxray maps onto its own S3 client; any other set to a non-default
# value is refused by name rather than ignored.
_S3_OPTIONS = ("region", "endpoint_override", "scheme", "access_key", "secret_key", "session_token")
_S3_DEFAULTS = {
    "role_arn": "",
    "session_name": "",
    "external_id": "",
    "tls_ca_file_path": "",
    "force_virtual_addressing": False,
    "allow_bucket_creation": False,
    "allow_bucket_deletion": False,
}


def uri_for_filesystem(filesystem, path, what: str) -> str:
    """A path on a pyarrow filesystem as the URI oxray opens: local paths as they are,
    `bucket/key` on an S3FileSystem as `s3://bucket/key?<its options>`."""
    import urllib.parse

    import pyarrow.fs

    path = os.fspath(path)
    if isinstance(filesystem, pyarrow.fs.LocalFileSystem):
        return os.path.abspath(path)
    if isinstance(filesystem, pyarrow.fs.S3FileSystem):
        settings = filesystem.__reduce__()[1][0]
        for name, default in _S3_DEFAULTS.items():
            if settings.get(name, default) != default:
                raise NotImplementedError(f"{what}: S3FileSystem({name}=...) is not supported by oxray")
        if (settings.get("proxy_options") or {}).get("host"):
            raise NotImplementedError(f"{what}: S3FileSystem(proxy_options=...) is not supported by oxray")
        query = {k: settings[k] for k in _S3_OPTIONS if settings.get(k)}
        if settings.get("anonymous"):
            query["anonymous"] = "true"
        bucket_key = path.removeprefix("s3://").lstrip("/")
        return f"s3://{bucket_key}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
    raise NotImplementedError(
        f"{what}: a {type(filesystem).__name__} is not supported by oxray; pass a pyarrow LocalFileSystem "
        "or S3FileSystem, or a local path or an s3:// URI (with pyarrow's options as a ?query) instead"
    )


def resolve(path, filesystem, what: str) -> str:
    """`path` (a str or PathLike, on `filesystem` when given) as a root URI without a query;
    its S3 options are registered for later opens."""
    uri = uri_for_filesystem(filesystem, path, what) if filesystem is not None else os.fspath(path)
    root, query = split_options(uri)
    if query and not root.startswith("s3://"):
        raise ValueError(f"{what}: options in a ?query are only for s3:// URIs, got {uri!r}")
    register_options(root, query)
    return root


def pyarrow_filesystem(uri: str):
    """The pyarrow filesystem a path lives on (Ray's `Result.filesystem`, `Checkpoint.filesystem`)."""
    import urllib.parse

    import pyarrow.fs

    if not is_remote(uri):
        return pyarrow.fs.LocalFileSystem()
    options = dict(urllib.parse.parse_qsl(options_for(uri)))
    if "anonymous" in options:
        options["anonymous"] = options["anonymous"] in ("true", "1", "True")
    # What the AWS variables say, unless the options say otherwise (as oxray's own client does).
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint and "endpoint_override" not in options:
        scheme, _, host = endpoint.partition("://")
        options.update(endpoint_override=host, scheme=scheme)
    return pyarrow.fs.S3FileSystem(**options)


class RunStorage:
    """The experiment directory of one run and the files in it."""

    def __init__(self, storage_path: str, name: str):
        self.storage_path = storage_path
        self.name = name
        self.root = open_storage(storage_path)

    @property
    def experiment_fs_path(self) -> str:
        return join(self.storage_path, self.name)

    def checkpoint_path(self, dir_name: str) -> str:
        return join(self.storage_path, self.name, dir_name)

    def validate(self) -> None:
        """Writes the marker file, so an unwritable storage path fails before training starts."""
        try:
            self.root.write_bytes(f"{self.name}/{VALIDATE_MARKER}", b"")
        except OSError as e:
            raise ValueError(
                f"RunConfig(storage_path={self.storage_path!r}) cannot be written: {e}. "
                "Pass a writable local/NFS directory or an s3://bucket/prefix the AWS credentials can write."
            ) from None

    def check_shared(self) -> None:
        """In a worker: the driver's marker must be visible, or this node does
        not share the storage path (a local disk instead of NFS)."""
        if self.root.read_bytes(f"{self.name}/{VALIDATE_MARKER}") is None:
            import socket

            raise RuntimeError(
                f"The storage path {self.experiment_fs_path!r} is not shared with this node ({socket.gethostname()}): "
                f"{VALIDATE_MARKER}, written by the driver, is missing here. Use a shared file system (NFS) or s3://."
            )

    def upload_checkpoint(self, local_dir: str, dir_name: str) -> int:
        return self.root.upload_dir(local_dir, f"{self.name}/{dir_name}")

    def delete_checkpoint(self, dir_name: str) -> None:
        self.root.delete_dir(f"{self.name}/{dir_name}")

    def read_snapshot(self) -> bytes | None:
        return self.root.read_bytes(f"{self.name}/{SNAPSHOT_FILE}")

    def write_snapshot(self, data: bytes) -> None:
        self.root.write_bytes(f"{self.name}/{SNAPSHOT_FILE}", data)
