"""Puts the ray -> oxray alias in place at interpreter start (see _ray_compat_shim)."""

import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
if _here not in sys.path:
    sys.path.insert(0, _here)

import _ray_compat_shim  # noqa: E402

_ray_compat_shim.install()
# This file shadows any other sitecustomize on sys.path: run that one too.
_ray_compat_shim.chain_sitecustomize(_here)
