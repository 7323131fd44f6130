"""`@remote` on a class: actor creation, handles and method calls."""

from __future__ import annotations

import inspect
import os

from oxray._native import TaskKind
from oxray._private import options as opts
from oxray._private.state import STATE, current_job_id, current_task_id
from oxray._private.submission import encode_args, function_id_for, new_return_refs, returns_for


def method(**options):
    """`@ray.method(num_returns=2)` on an actor method."""
    opts.validate(dict(options), "method")

    def decorate(fn):
        fn.__oxray_method_options__ = options
        return fn

    return decorate


def _public_methods(cls):
    names = {}
    for name, member in inspect.getmembers(cls):
        if callable(member) and (not name.startswith("__") or name == "__call__"):
            names[name] = dict(getattr(member, "__oxray_method_options__", {}))
    return names


class ActorClass:
    def __init__(self, cls, options: dict):
        self._cls = cls
        self._options = opts.validate(dict(options), "actor")
        self._methods = _public_methods(cls)
        self.__name__ = cls.__name__
        self.__doc__ = cls.__doc__

    def __call__(self, *args, **kwargs):
        raise TypeError(
            f"Actors cannot be instantiated directly. Instead of '{self.__name__}()', use '{self.__name__}.remote()'."
        )

    def __getattr__(self, name):
        # The class's own attributes (constants, static and class methods), as on Ray's actor class,
        # which derives from the user's class.
        cls = self.__dict__.get("_cls")
        if cls is None or name.startswith("__"):
            raise AttributeError(name)
        try:
            return getattr(cls, name)
        except AttributeError:
            raise AttributeError(f"actor class '{cls.__name__}' has no attribute '{name}'") from None

    def options(self, **options):
        return opts.WithOptions(self, {**self._options, **opts.validate(dict(options), "actor")})

    def remote(self, *args, **kwargs):
        return self._remote(args, kwargs, self._options)

    def _remote(self, args, kwargs, options):
        from oxray._private.api import _client

        client = _client()
        fid = function_id_for(client, self._cls, self)
        encoded, kwarg_names, nested, keep = encode_args(client, args, kwargs, self.__name__)
        holds = opts.resource_request(options, default_cpus=0)
        # Like Ray: an actor with no resources given needs 1 CPU to be placed but holds none.
        explicit = any(options.get(k) is not None for k in ("num_cpus", "num_gpus", "resources", "memory"))
        placement = holds if explicit else {**holds, "CPU": 1.0}
        holds, placement = opts.in_placement_group(holds, options), opts.in_placement_group(placement, options)
        namespace = options.get("namespace")
        namespace = STATE.namespace if namespace is None else namespace
        actor_id = os.urandom(16)
        created = client.submit(
            kind=TaskKind.ACTOR_CREATION,
            task_id=os.urandom(16),
            function_id=fid,
            # `_display_name` (internal) names the actor in its log prefix.
            name=options.get("_display_name") or self.__name__,
            args=encoded,
            kwarg_names=kwarg_names,
            return_ids=[],
            resources=holds,
            actor_id=actor_id,
            env_vars={
                **STATE.job_env_vars,
                **opts.env_vars({"runtime_env": STATE.runtime_env}),
                **opts.env_vars(options),
            },
            nested_refs=nested,
            job_id=current_job_id(),
            max_restarts=options.get("max_restarts") or 0,
            max_task_retries=options.get("max_task_retries") or 0,
            max_concurrency=options.get("max_concurrency") or 1,
            actor_name=options.get("name") or "",
            namespace=namespace,
            detached=options.get("lifetime") == "detached",
            placement_resources=placement,
            get_if_exists=bool(options.get("get_if_exists", False)),
            job_namespace=STATE.namespace,
            parent_task_id=current_task_id(),
        )
        del keep
        return ActorHandle(created.actor_id, self.__name__, self._methods)


class ActorMethod:
    def __init__(self, handle, name, options):
        self._handle = handle
        self._name = name
        self._options = options

    def __call__(self, *args, **kwargs):
        raise TypeError(
            f"Actor methods cannot be called directly. Instead of '{self._name}()', try '{self._name}.remote()'."
        )

    def options(self, **options):
        merged = {**self._options, **opts.validate(dict(options), "method")}
        return ActorMethod(self._handle, self._name, merged)

    def remote(self, *args, **kwargs):
        return self._handle._call(self._name, args, kwargs, self._options)


class ActorHandle:
    def __init__(self, actor_id: bytes, class_name: str, methods: dict | None):
        self._actor_id = actor_id
        self._class_name = class_name
        self._methods = methods

    @classmethod
    def _from_info(cls, info):
        names = info.method_names or None
        return cls(info.actor_id, info.class_name, {n: {} for n in names} if names else None)

    def __dir__(self):
        # Its methods too, as in Ray (tab completion, `hasattr` checks by listing).
        return sorted(set(super().__dir__()) | set(self.__dict__.get("_methods") or ()))

    def __getattr__(self, name):
        if name.startswith("_") and name != "__call__":
            raise AttributeError(name)
        methods = self.__dict__.get("_methods")
        if methods is not None and name not in methods:
            raise AttributeError(f"'{self._class_name}' actor has no method '{name}'")
        return ActorMethod(self, name, (methods or {}).get(name, {}))

    def _call(self, method_name, args, kwargs, options):
        from oxray._private.api import _client

        client = _client()
        name = f"{self._class_name}.{method_name}"
        encoded, kwarg_names, nested, keep = encode_args(client, args, kwargs, name)
        num_returns = options.get("num_returns", 1)
        return_ids, refs = new_return_refs(num_returns)
        client.submit(
            kind=TaskKind.ACTOR_TASK,
            task_id=os.urandom(16),
            function_id=b"",
            name=name,
            args=encoded,
            kwarg_names=kwarg_names,
            return_ids=return_ids,
            resources={},
            actor_id=self._actor_id,
            method_name=method_name,
            nested_refs=nested,
            job_id=current_job_id(),
            parent_task_id=current_task_id(),
        )
        del keep
        return returns_for(refs, num_returns)

    def __reduce__(self):
        return (ActorHandle, (self._actor_id, self._class_name, self._methods))

    def __repr__(self):
        return f"Actor({self._class_name}, {self._actor_id.hex()})"

    def __eq__(self, other):
        return isinstance(other, ActorHandle) and other._actor_id == self._actor_id

    def __hash__(self):
        return hash(self._actor_id)
