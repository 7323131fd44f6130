"""oxray: Ray's API on a Rust engine. `import oxray as ray` and go."""

from oxray import actor, exceptions
from oxray._native import __version__
from oxray._private.actor import ActorClass, ActorHandle, method
from oxray._private.api import (
    available_resources,
    cancel,
    client,
    cluster_resources,
    get,
    get_actor,
    get_gpu_ids,
    init,
    is_initialized,
    java_actor_class,
    java_function,
    kill,
    nodes,
    put,
    shutdown,
    timeline,
    wait,
)
from oxray._private.generator import ObjectRefGenerator
from oxray._private.ids import ActorID, JobID, NodeID, PlacementGroupID, TaskID, WorkerID
from oxray._private.object_ref import ObjectRef
from oxray._private.options import ACTOR_OPTIONS as _ACTOR_OPTIONS
from oxray._private.options import TASK_OPTIONS as _TASK_OPTIONS
from oxray._private.remote_function import RemoteFunction
from oxray.runtime_context import get_runtime_context

# Ray's older name for ObjectRef, still exported by Ray.
ObjectID = ObjectRef
# Ray's older name for ObjectRefGenerator.
StreamingObjectRefGenerator = ObjectRefGenerator


def __getattr__(name):
    # `ray.train`, `ray.tune`, `ray.air`, `ray.serve`, `ray.util`, `ray.data`, `ray.types`, `ray.runtime_env`,
    # `ray.job_config`: subpackages load on first use, as attributes
    # (`ray.train.torch` then loads on its first use, see `oxray.train`), so
    # `import oxray as ray; ray.train.torch.TorchTrainer` works.
    if name in ("train", "tune", "air", "serve", "util", "data", "types", "runtime_env", "job_config"):
        import importlib

        return importlib.import_module(f"oxray.{name}")
    raise AttributeError(f"module 'oxray' has no attribute {name!r}")


def remote(*args, **kwargs):
    """`@remote` / `@remote(num_cpus=..., ...)` on a function or a class."""
    import inspect

    def make(target, options):
        if inspect.isclass(target):
            return ActorClass(target, options)
        if callable(target):
            return RemoteFunction(target, options)
        raise TypeError(f"@remote expects a function or a class, got {target!r}")

    if len(args) == 1 and not kwargs and callable(args[0]):
        return make(args[0], {})
    if not args and not kwargs:
        raise TypeError(
            "The @remote decorator must be applied either with no parentheses, as '@remote', "
            "or with some options, as '@remote(num_cpus=2)'"
        )
    if args:
        raise TypeError("@remote takes either a function/class or only keyword options, e.g. @remote(num_cpus=2)")
    allowed = _TASK_OPTIONS | _ACTOR_OPTIONS
    for key in kwargs:
        if key not in allowed:
            raise ValueError(f"Invalid option keyword {key!r} for @remote. Valid ones are {sorted(allowed)}.")
    return lambda target: make(target, kwargs)


__all__ = [
    "ActorClass",
    "ActorHandle",
    "ActorID",
    "JobID",
    "NodeID",
    "ObjectID",
    "ObjectRef",
    "ObjectRefGenerator",
    "PlacementGroupID",
    "TaskID",
    "WorkerID",
    "actor",
    "available_resources",
    "cancel",
    "client",
    "cluster_resources",
    "exceptions",
    "get",
    "get_actor",
    "get_gpu_ids",
    "get_runtime_context",
    "init",
    "is_initialized",
    "java_actor_class",
    "java_function",
    "kill",
    "method",
    "nodes",
    "put",
    "remote",
    "shutdown",
    "timeline",
    "wait",
    "__version__",
]
