"""Makes ``import ray`` (and every ``ray.X.Y``) resolve to ``oxray`` in this process.

Installed by this directory's ``sitecustomize.py``, so every Python process whose
PYTHONPATH starts with this directory gets it: pytest, oxray's node agents and
worker processes (they inherit the driver's environment and PYTHONPATH), and the
driver subprocesses tests start.

A ``sys.meta_path`` finder placed first resolves ``ray`` and ``ray.*`` in this order:

1. ``overlay/ray/...``: modules the harness writes itself (test utilities such as
   ``ray._common.test_utils``, and module-path aliases such as
   ``ray.train.v2.api.result``); ``fallback/ray/...`` holds those used only where
   oxray lacks the module (after step 3: Ray's module paths of public Tune classes);
2. ``ray.tests.X`` (and ``ray.data.tests.X``, any ``ray.<package>.tests.X``): the test
   or support module ``X`` of the work dir (imported by its plain name, the same module
   object pytest uses; ``conftest`` is the harness's conftest of the file's folder);
3. ``oxray.X.Y``: the very same module object (so ``ray.exceptions.RayTaskError is
   oxray.exceptions.RayTaskError``);
4. when the import comes from the module-level code of a Ray test file (and only
   then), a stub module whose attributes are placeholders, so that a test file that
   imports Ray internals at the top still collects; the tests that use them are the
   ones the filter excludes. A placeholder raises ``MissingInOxray`` when used.

The real Ray installed in the venv is never imported: the finder answers first.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import os
import sys
import types

OVERLAY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "overlay")
# Modules used only where oxray lacks them (Ray's module paths of public classes).
FALLBACK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fallback")
_SHIM_FILES = {os.path.abspath(__file__)}


class MissingInOxray(NotImplementedError):
    """A Ray name that oxray does not have, used by a test."""

    def __init__(self, name: str):
        super().__init__(f"ray compat harness: {name!r} does not exist in oxray")
        self.ray_name = name


def _test_dirs() -> list[str]:
    dirs = os.environ.get("RAY_COMPAT_TEST_DIRS", "")
    return [os.path.realpath(d) for d in dirs.split(os.pathsep) if d]


def from_test_module_level() -> bool:
    """Whether the nearest caller outside importlib and this shim is the module-level
    (or class-body) code of a Ray test file in the work dir."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith("<frozen importlib") or os.path.abspath(filename) in _SHIM_FILES:
            frame = frame.f_back
            continue
        break
    if frame is None or frame.f_code.co_flags & inspect.CO_OPTIMIZED:
        return False  # a function body, not module-level code
    if not os.path.isabs(frame.f_code.co_filename):
        return False  # "<string>", "<stdin>": not a file
    path = os.path.realpath(frame.f_code.co_filename)
    return any(path.startswith(d + os.sep) for d in _test_dirs())


class _PlaceholderMeta(type):
    """The type of placeholders: classes, so that a test file may subclass one at
    module level; calling one (outside a test file's module-level code) raises."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return placeholder(f"{cls._ray_compat_name}.{name}")

    def __call__(cls, *args, **kwargs):
        if from_test_module_level():
            return placeholder(f"{cls._ray_compat_name}()")
        raise MissingInOxray(cls._ray_compat_name)

    def __bool__(cls):
        return False

    def _compare(cls, other):
        # A module-level version check (`get_pyarrow_version() < Version("20")` in a
        # skipif or a constant): the condition is off; anywhere else, the name is missing.
        if from_test_module_level():
            return False
        raise MissingInOxray(cls._ray_compat_name)

    __lt__ = __le__ = __gt__ = __ge__ = _compare

    def _combine(cls, other):
        # A class attribute built from a missing one (`keys = BaseTrainer._keys + ["x"]` in
        # a class body): a placeholder too; anywhere else, the name is missing.
        if from_test_module_level():
            return placeholder(f"{cls._ray_compat_name}+")
        raise MissingInOxray(cls._ray_compat_name)

    __add__ = __radd__ = __or__ = __ror__ = _combine

    def __getitem__(cls, item):
        # A generic in an annotation (`MapTransformCallable[Block, Block]`, `Datasink[T]`).
        return placeholder(f"{cls._ray_compat_name}[]")

    def __iter__(cls):
        raise MissingInOxray(cls._ray_compat_name)

    def __repr__(cls):
        return f"<ray compat placeholder {cls._ray_compat_name}>"


def placeholder(name: str) -> type:
    short = name.rsplit(".", 1)[-1].strip("()") or "placeholder"
    if not short.isidentifier():
        short = "placeholder"
    return _PlaceholderMeta(short, (), {"_ray_compat_name": name, "__module__": __name__})


class StubModule(types.ModuleType):
    """A Ray module that oxray does not have (imported by a test file's module level)."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return placeholder(f"{self.__name__}.{name}")


def lenient_getattr(module_name: str, fallback=None):
    """A module ``__getattr__``: names missing from ``module_name`` are placeholders
    for a Ray test file's module-level code, and an AttributeError for anyone else."""

    def __getattr__(name):
        if name == "__path__" and from_test_module_level():
            # `from ray.x.mod.sub import y` where oxray's ray.x.mod is a module, not a
            # package: importlib asks the parent for __path__ before any finder; an empty
            # one lets the finder answer with a stub for the missing submodule.
            return []
        if fallback is not None:
            try:
                return fallback(name)
            except AttributeError:
                pass
        if not name.startswith("__") and from_test_module_level():
            return placeholder(f"{module_name}.{name}")
        raise AttributeError(f"module {module_name!r} has no attribute {name!r}")

    __getattr__._ray_compat = True
    return __getattr__


class _AliasLoader(importlib.abc.Loader):
    """Hands out an already-imported module under a second name."""

    def __init__(self, module: types.ModuleType):
        self.module = module
        self.spec = getattr(module, "__spec__", None)

    def create_module(self, spec):
        return self.module

    def exec_module(self, module):
        # importlib sets __spec__ to the alias's spec: give the module its own back.
        if self.spec is not None:
            module.__spec__ = self.spec
        _make_lenient(module)
        if module.__name__ == "oxray" or module.__name__.startswith("oxray."):
            _register_loaded_oxray_modules()


def _register_loaded_oxray_modules() -> None:
    """Enters each oxray module already imported into sys.modules under its ray name too.

    Importing ``ray.X.Y`` for the first time makes importlib set attribute ``Y`` of
    ``ray.X``: for a submodule that oxray's own package shadows with a function (as
    ``ray.util.placement_group``, the module, is shadowed by the function in
    ``ray.util``), that would replace oxray's function by the module. A module found in
    sys.modules is not loaded again, so the attribute stays as oxray left it."""
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "oxray" or name.startswith("oxray.")):
            continue
        alias = "ray" + name[len("oxray") :]
        if alias not in sys.modules:
            _make_lenient(module)
            sys.modules[alias] = module


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec):
        module = StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def _make_lenient(module: types.ModuleType) -> None:
    """Missing names of an aliased oxray module are placeholders for a test file's
    module-level imports (``from ray.train.constants import X`` still collects)."""
    current = module.__dict__.get("__getattr__")
    if getattr(current, "_ray_compat", False):
        return
    module.__getattr__ = lenient_getattr(module.__name__.replace("oxray", "ray", 1), current)


def _import_optional(name: str):
    """The module ``name``, or None when it (not one of its imports) does not exist."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name is not None and (name == e.name or name.startswith(e.name + ".")):
            return None
        raise


def _file_spec(root: str, fullname: str):
    """The spec of module ``fullname`` under ``root`` (a package or a file), or None."""
    base = os.path.join(root, *fullname.split("."))
    if os.path.isfile(os.path.join(base, "__init__.py")):
        return importlib.util.spec_from_file_location(
            fullname, os.path.join(base, "__init__.py"), submodule_search_locations=[base]
        )
    if os.path.isfile(base + ".py"):
        return importlib.util.spec_from_file_location(fullname, base + ".py")
    return None


class RayAliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname != "ray" and not fullname.startswith("ray."):
            return None
        parts = fullname.split(".")
        spec = _file_spec(OVERLAY, fullname)
        if spec is not None:
            return spec
        if len(parts) >= 3 and parts[-2] == "tests":
            # ray.tests.X, ray.data.tests.X: the work dir's test (or support) module X
            target_name = parts[-1]
        else:
            target_name = "oxray" + fullname[len("ray") :]
        lenient = from_test_module_level()
        module = _import_optional(target_name)
        if module is not None:
            return importlib.machinery.ModuleSpec(fullname, _AliasLoader(module), is_package="__path__" in vars(module))
        spec = _file_spec(FALLBACK, fullname)
        if spec is not None:
            return spec
        if lenient:
            return importlib.machinery.ModuleSpec(fullname, _StubLoader(), is_package=True)
        return None


def install() -> None:
    if any(isinstance(f, RayAliasFinder) for f in sys.meta_path):
        return
    if "ray" in sys.modules and not sys.modules["ray"].__name__.startswith("oxray"):
        sys.stderr.write("ray compat shim: the real ray was imported before the shim\n")
    sys.meta_path.insert(0, RayAliasFinder())


def chain_sitecustomize(here: str) -> None:
    """Runs the next ``sitecustomize`` on sys.path (the one this directory shadows)."""
    here = os.path.realpath(here)
    rest = [p for p in sys.path if os.path.realpath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["_ray_compat_next_sitecustomize"] = module
    spec.loader.exec_module(module)
