"""Serve's exceptions, under Ray's names."""

from __future__ import annotations


class RayServeException(Exception):
    pass
