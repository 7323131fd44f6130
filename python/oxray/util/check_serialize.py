"""Ray's `inspect_serializability`: finds what inside a value keeps it from being pickled."""

from __future__ import annotations

import inspect
from typing import Any, Optional

import cloudpickle

_RULE_MAX = 80


class FailureTuple:
    """One object that failed to pickle: where it was found (`path`, the names walked
    from the inspected value) and the object holding it (`parent`)."""

    def __init__(self, obj: Any, path: tuple, parent: Any):
        self.obj = obj
        self.path = path
        self.parent = parent

    def __repr__(self):
        names = [str(p) if p is not None else "unknown" for p in self.path]
        name = names[-1] if names else "unknown"
        return f"FailTuple({name} [path={' -> '.join(names)}, obj={self.obj}, parent={self.parent}])"


class _Printer:
    def __init__(self, print_file):
        self.file = print_file
        self.level = 0

    def line(self, text: str) -> None:
        print("    " * self.level + text, file=self.file)


def inspect_serializability(
    base_obj: Any, name: Optional[str] = None, depth: int = 3, print_file: Optional[Any] = None
) -> tuple[bool, set]:
    """(whether `base_obj` pickles, the FailureTuples of what does not), printing the
    search to `print_file` (stdout by default). It descends into closures, class
    methods, attributes and container items, `depth` levels deep."""
    printer = _Printer(print_file)
    title = f"Checking Serializability of {base_obj}"
    rule = "=" * min(len(title), _RULE_MAX)
    printer.line(rule)
    printer.line(title)
    printer.line(rule)
    failures: set = set()
    if _inspect(base_obj, name, depth, None, failures, printer, ()):
        printer.line(f"{base_obj} is serializable.")
        printer.line(rule)
        return True, failures
    printer.line(rule)
    if failures:
        found = "\n".join(str(f) for f in failures)
        printer.line(
            f"Variable: \n\n\t{found}\n\nwas found to be non-serializable. "
            "There may be other non-serializable variables that were not detected."
        )
        printer.line(
            "Consider removing these variables (or their imports) from the scope the function "
            "or class captures, or creating them inside the function or class instead."
        )
    else:
        printer.line("Nothing inside failed to serialize, though the value itself did not serialize.")
    printer.line(rule)
    printer.line(
        "Check https://docs.ray.io/en/master/ray-core/objects/serialization.html#troubleshooting for more information."
    )
    printer.line(rule)
    return False, failures


def _inspect(obj, name, depth, parent, failures, printer, path) -> bool:
    """Whether `obj` pickles; when not, records the innermost culprit found within `depth`."""
    if name is not None:
        printer.line(f"Serializing '{name}' {obj}...")
    try:
        cloudpickle.dumps(obj)
        return True
    except Exception as e:  # noqa: BLE001 - whatever stops pickling is what we report
        printer.line(f"!!! FAIL serialization: {e}")
    here = path + ((name,) if name is not None else ())
    found = False
    if depth > 0:
        printer.level += 1
        try:
            for child_name, child in _members(obj, printer):
                if not _inspect(child, child_name, depth - 1, obj, failures, printer, here):
                    found = True
                    break
        finally:
            printer.level -= 1
    if not found:
        # Nothing inside is to blame (or we looked no deeper): the object itself is.
        failures.add(FailureTuple(obj, here, parent))
    return False


def _members(obj, printer) -> list:
    """The (name, value) pairs that pickling `obj` pickles too, as far as we can tell."""
    try:
        if inspect.isfunction(obj):
            printer.line(f"Inspecting closure of '{obj.__qualname__}':")
            closure = inspect.getclosurevars(obj)
            return [*closure.nonlocals.items(), *closure.globals.items()]
        if isinstance(obj, dict):
            return [(repr(k), v) for k, v in obj.items()]
        if isinstance(obj, (list, tuple, set, frozenset)):
            return [(f"[{i}]", v) for i, v in enumerate(obj)]
        if inspect.isclass(obj):
            return [
                (k, v)
                for k, v in vars(obj).items()
                if not (k.startswith("__") and k.endswith("__")) or inspect.isfunction(v)
            ]
        return list(vars(obj).items()) if hasattr(obj, "__dict__") else []
    except Exception:  # noqa: BLE001 - an object we cannot look into has no members to blame
        return []
