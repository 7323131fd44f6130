"""A local working_dir or py_module as the upload Ray's clients make: a
ZIP_STORED archive of the directory (minus `.git`, `.venv`, `venv`,
`__pycache__` and the `excludes` patterns; a py_module's entries keep its
directory's name), named `_ray_pkg_<16 hex>.zip` after its contents."""

from __future__ import annotations

import fnmatch
import hashlib
import io
import os
import zipfile

DEFAULT_EXCLUDES = (".git", ".venv", "venv", "__pycache__")


def _excluded(relative: str, patterns: list) -> bool:
    parts = relative.split("/")
    if any(p in DEFAULT_EXCLUDES for p in parts):
        return True
    return any(fnmatch.fnmatch(relative, p.strip("/")) or p.strip("/") in parts for p in patterns)


def zip_directory(path: str, excludes: list, what: str = "working_dir", include_parent_dir: bool = False) -> tuple:
    """(package name, archive bytes) for the directory `path`."""
    if not os.path.isdir(path):
        raise ValueError(f"{what} {path!r} is not a directory")
    if not isinstance(excludes, list) or not all(isinstance(p, str) for p in excludes):
        raise TypeError(f"runtime_env['excludes'] must be a list of patterns, got {excludes!r}")
    root = os.path.abspath(path)
    digest = hashlib.sha1()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for directory, dirs, files in os.walk(root):
            dirs.sort()
            rel_dir = os.path.relpath(directory, root)
            rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/")
            dirs[:] = [d for d in dirs if not _excluded(f"{rel_dir}/{d}".lstrip("/"), excludes)]
            for name in sorted(files):
                relative = f"{rel_dir}/{name}".lstrip("/")
                full = os.path.join(directory, name)
                if _excluded(relative, excludes):
                    continue
                with open(full, "rb") as f:
                    data = f.read()
                if include_parent_dir:
                    relative = f"{os.path.basename(root)}/{relative}"
                digest.update(relative.encode())
                digest.update(data)
                archive.writestr(relative, data)
    return f"_ray_pkg_{digest.hexdigest()[:16]}.zip", buffer.getvalue()
