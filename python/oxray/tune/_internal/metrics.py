"""Reading metrics out of a Tune result: a key or its nested `/`-joined path, and what counts
as a number (not a bool)."""

from __future__ import annotations

import numbers
from typing import Any


def lookup(result: dict, key: str) -> Any:
    """`result[key]`, or a nested value named by its `/`-joined path (`info/loss`), or None."""
    if key in result:
        return result[key]
    node: Any = result
    for part in key.split("/"):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def is_number(value: Any) -> bool:
    return isinstance(value, numbers.Number) and not isinstance(value, bool)
