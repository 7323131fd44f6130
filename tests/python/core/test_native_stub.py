"""`oxray/_native.pyi` against the built `oxray._native`: the stub declares
exactly the module's public names, each class's bases, methods, properties and
class attributes, and each callable's parameters (names, kinds, defaults), in
both directions, so the stub cannot drift from the Rust side."""

import ast
import inspect
from pathlib import Path

import pytest

import oxray
from oxray import _native

STUB = Path(oxray.__file__).with_name("_native.pyi")

# Dunders compared like public names; the others (__doc__, __module__, the
# comparison slots pyo3 adds to enums, ...) are left to the runtime.
CHECKED_DUNDERS = {"__new__", "__len__", "__int__", "__eq__", "__hash__", "__repr__"}
# Declared for type checkers only: Python 3.11 lists no `__buffer__` in the
# class of a buffer-protocol type (test_objects.py reads ObjectBuffers as buffers).
STUB_ONLY = {"__buffer__"}


def _public(name: str) -> bool:
    return not name.startswith("_") or name == "__version__"


def _stub() -> ast.Module:
    return ast.parse(STUB.read_text(), filename=str(STUB))


def _top_level(tree: ast.Module) -> dict:
    """Stub name -> its node, for classes, functions and constants."""
    names = {}
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
        elif isinstance(node, ast.Assign):
            names.update({t.id: node for t in node.targets if isinstance(t, ast.Name)})
    return {name: node for name, node in names.items() if _public(name)}


def _members(cls_node: ast.ClassDef) -> dict:
    """Member name -> its node, for the names the comparison covers (a nested class is
    a complex enum's variant)."""
    members = {}
    for node in cls_node.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            members[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            members[node.target.id] = node
    return {n: node for n, node in members.items() if not n.startswith("_") or n in CHECKED_DUNDERS}


def _is_property(node: ast.FunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "property" for d in node.decorator_list)


def _stub_params(node: ast.FunctionDef) -> list:
    """(name, kind, default node or None) for each parameter."""
    a = node.args
    positional = [(p, inspect.Parameter.POSITIONAL_ONLY) for p in a.posonlyargs]
    positional += [(p, inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in a.args]
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    params = [(p.arg, kind, d) for (p, kind), d in zip(positional, defaults, strict=True)]
    if a.vararg:
        params.append((a.vararg.arg, inspect.Parameter.VAR_POSITIONAL, None))
    params += [(p.arg, inspect.Parameter.KEYWORD_ONLY, d) for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True)]
    if a.kwarg:
        params.append((a.kwarg.arg, inspect.Parameter.VAR_KEYWORD, None))
    return params


def _check_signature(where: str, real, stub_node: ast.FunctionDef, skip_first: bool) -> None:
    real_params = list(inspect.signature(real).parameters.values())
    stub_params = _stub_params(stub_node)
    if skip_first:  # self / cls: the stub's binding parameter, absent or positional-only at runtime
        stub_params = stub_params[1:]
        if real_params and real_params[0].name in ("self", "$self"):
            real_params = real_params[1:]
    assert [(p.name, p.kind) for p in real_params] == [(n, k) for n, k, _ in stub_params], where
    for p, (name, _, default) in zip(real_params, stub_params, strict=True):
        assert (p.default is inspect.Parameter.empty) == (default is None), f"{where}: default of {name}"
        # pyo3 shows defaults that are not plain literals as `...`; so may the stub.
        if default is None or p.default is ... or (isinstance(default, ast.Constant) and default.value is ...):
            continue
        assert ast.literal_eval(default) == p.default, f"{where}: default of {name}"


def test_stub_and_marker_ship_with_the_package():
    assert STUB.is_file()
    assert STUB.with_name("py.typed").is_file()


def _stub_all(tree: ast.Module) -> list:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("_native.pyi declares no __all__")


def test_stub_declares_exactly_the_module_names():
    tree = _stub()
    stub = set(_top_level(tree))
    real = {name for name in dir(_native) if _public(name)}
    assert stub - real == set(), "declared in _native.pyi but not in the module"
    assert real - stub == set(), "in the module but not declared in _native.pyi"
    assert sorted(_stub_all(tree)) == sorted(_native.__all__) == sorted(real)


def test_stub_functions_match_the_module():
    for name, node in _top_level(_stub()).items():
        if isinstance(node, ast.FunctionDef):
            _check_signature(name, getattr(_native, name), node, skip_first=False)


@pytest.mark.parametrize(
    "cls_name", sorted(n for n, node in _top_level(_stub()).items() if isinstance(node, ast.ClassDef))
)
def test_stub_class_matches_the_module(cls_name):
    _check_class(cls_name, getattr(_native, cls_name), _top_level(_stub())[cls_name])


def _check_class(where: str, cls, node: ast.ClassDef) -> None:
    assert isinstance(cls, type), where
    stub_bases = [b.id for b in node.bases if isinstance(b, ast.Name)] or ["object"]
    assert [b.__name__ for b in cls.__bases__] == stub_bases, where

    stub = _members(node)
    real = {n for n in vars(cls) if not n.startswith("_") or n in CHECKED_DUNDERS}
    declared = set(stub) - STUB_ONLY
    assert declared - real == set(), f"declared on {where} in _native.pyi but not in the module"
    assert real - declared == set(), f"on {where} in the module but not declared in _native.pyi"

    for name, member in stub.items():
        if name in STUB_ONLY:
            continue
        attr = vars(cls)[name]
        member_where = f"{where}.{name}"
        if isinstance(member, ast.ClassDef):  # a complex enum's variant
            _check_class(member_where, attr, member)
        elif isinstance(member, ast.AnnAssign):  # a class attribute (an enum variant)
            assert not callable(attr) or isinstance(attr, cls), member_where
        elif _is_property(member):
            assert inspect.isdatadescriptor(attr), f"{member_where} is a method, not a property"
        else:
            assert callable(attr), f"{member_where} is not callable"
            real_callable = cls if name == "__new__" else attr
            _check_signature(member_where, real_callable, member, skip_first=True)
