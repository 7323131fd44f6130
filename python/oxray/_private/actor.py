"""`@remote` on a class: actor creation, handles and method calls."""

from __future__ import annotations

import inspect
import os

from oxray._native import TaskKind
from oxray._private import options as opts
from oxray._private.generator import STREAMING, default_num_returns
from oxray._private.ids import ActorIDBytes
from oxray._private.state import STATE, current_job_id, current_task_id
from oxray._private.submission import (
    check_arguments,
    encode_args,
    function_id_for,
    new_return_refs,
    returns_for,
    signature_of,
)


def method(**options):
    """`@ray.method(num_returns=2)` on an actor method."""
    opts.validate(dict(options), "method")

    def decorate(fn):
        fn.__oxray_method_options__ = options
        return fn

    return decorate


# Methods every actor has (Ray's): `__ray_ready__` resolves once the actor is up,
# `__ray_terminate__` ends it after the calls queued before it, and
# `__ray_call__(fn, *args)` runs `fn(actor, *args)` in it.
BUILTIN_METHODS = ("__ray_ready__", "__ray_terminate__", "__ray_call__")


# What callers of a reclaimed actor are told.
RECLAIMED_CAUSE = "all references to the actor were removed"
# The built-in method the agent calls to end an actor whose handles are all gone.
RECLAIM_METHOD = "__oxray_reclaim__"


# What callers of an actor that called `exit_actor()` are told.
EXIT_ACTOR_CAUSE = "exit_actor() was called"


class ActorExitRequest(BaseException):
    """Raised by `exit_actor()` (and `__ray_terminate__`) in an actor's worker, which
    then ends the actor. Not an `Exception`, so user code's `except Exception` lets it by."""

    def __init__(self, cause: str):
        super().__init__(cause)
        self.cause = cause


def exit_actor():
    """Ends the current actor on purpose: its `__ray_shutdown__` and atexit handlers
    run, the call that asked gets `RayActorError`, and it is not restarted.

    As in Ray, the actor is marked to exit first, so it ends even when user code catches
    what this raises: `AsyncioActorExit` in an async actor, `ActorExitRequest` (a
    `BaseException`, like `SystemExit`) otherwise."""
    from oxray._private.state import STATE
    from oxray.exceptions import AsyncioActorExit

    if STATE.mode != "worker" or not STATE.actor_id:
        raise TypeError(
            "exit_actor API is called on a non-actor worker: exit_actor() ends the actor it is called in; "
            "use ray.kill(handle) to end one from outside"
        )
    STATE.actor_exit_cause = EXIT_ACTOR_CAUSE
    # The worker's loop ends the actor even if user code swallows what this raises (outside a
    # call, in an async actor's background task, nothing else would wake it).
    STATE.client.wake_worker_loop()
    if STATE.async_actor:
        raise AsyncioActorExit()
    raise ActorExitRequest(EXIT_ACTOR_CAUSE)


def is_async_class(cls) -> bool:
    """An async actor: one with `async def` methods, run on an event loop."""
    return any(inspect.iscoroutinefunction(getattr(cls, n, None)) for n in dir(cls) if not n.startswith("__"))


# Ray's default cap on the calls an async actor runs at once.
ASYNC_DEFAULT_MAX_CONCURRENCY = 1000


def method_signatures(cls) -> dict:
    """Each public method's signature as its callers see it (no `self`), to check calls."""
    out = {}
    for name in public_methods(cls):
        static = inspect.getattr_static(cls, name, None)
        bound_already = isinstance(static, (staticmethod, classmethod))
        out[name] = signature_of(getattr(cls, name), drop_first=not bound_already)
    return out


def public_methods(cls):
    names = {}
    for name, member in inspect.getmembers(cls):
        if callable(member) and (not name.startswith("__") or name == "__call__"):
            names[name] = dict(getattr(member, "__oxray_method_options__", {}))
            if default_num_returns(member, names[name]) == STREAMING:
                names[name]["num_returns"] = STREAMING  # Ray's default for a generator method
            if callable(getattr(member, "__ray_invocation_decorator__", None)):
                # Ray's hook for rewriting a call's arguments (and result) on the caller's side.
                names[name]["_invocation_decorator"] = member.__ray_invocation_decorator__
    return names


class ActorClassInheritanceException(TypeError):
    """Raised when a class derives from an actor class (Ray's: derive from the plain class)."""


class ActorClass:
    def __mro_entries__(self, bases):
        # `class Derived(SomeActor)` where SomeActor came from @remote: refused as Ray refuses it.
        raise ActorClassInheritanceException(
            f"Inheriting from actor classes is not currently supported: derive {self.__name__}'s plain class "
            "instead and apply @remote to the subclass."
        )

    def __init__(self, cls, options: dict):
        self._cls = cls
        self._options = opts.validate(dict(options), "actor")
        self._methods = public_methods(cls)
        self._signatures = None  # read on first use: most classes' are never needed
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

    def __dir__(self):
        # As Ray lists an actor class: its methods beside options/remote/bind.
        return sorted(set(super().__dir__()) | set(self.__dict__.get("_methods") or ()))

    bind = staticmethod(opts.refuse_bind)

    def options(self, **options):
        return opts.WithOptions(self, {**self._options, **opts.validate(dict(options), "actor")})

    def remote(self, *args, **kwargs):
        return self._submit(args, kwargs, self._options)

    def _remote(self, args=None, kwargs=None, **options):
        """Ray's `_remote(args=, kwargs=, **options)`: `.options(**options).remote(*args, **kwargs)`."""
        merged = {**self._options, **opts.validate(dict(options), "actor")} if options else self._options
        return self._submit(tuple(args or ()), dict(kwargs or {}), merged)

    def _submit(self, args, kwargs, options):
        from oxray._private.api import _client

        if self._signatures is None:
            self._signatures = {"__init__": signature_of(self._cls), **method_signatures(self._cls)}
        check_arguments(self._signatures["__init__"], args, kwargs, self.__name__)
        opts.check_whole_devices(options)
        client = _client()
        options = opts.with_captured_placement(options)
        fid = function_id_for(client, self._cls, self)
        encoded, kwarg_names, nested, keep = encode_args(client, args, kwargs, self.__name__, callee=self._cls)
        holds = opts.resource_request(options, default_cpus=0)
        # Like Ray: an actor with no resources given needs 1 CPU to be placed but holds none.
        explicit = any(options.get(k) is not None for k in ("num_cpus", "num_gpus", "resources", "memory"))
        placement = holds if explicit else {**holds, "CPU": 1.0}
        opts.check_fits_placement_group(options, holds, placement, self._cls.__qualname__)
        namespace = options.get("namespace")
        namespace = STATE.namespace if namespace is None else namespace
        # As in Ray, an actor without a lifetime of its own takes its job's default (JobConfig).
        detached = (options.get("lifetime") or opts.default_actor_lifetime()) == "detached"
        # Ray's layout: unique bytes, then the creating job's id (what `_actor_id.job_id` reads).
        actor_id = os.urandom(12) + current_job_id()[-4:].rjust(4, b"\0")
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
            env_vars=opts.submitted_env_vars(options),
            nested_refs=nested,
            job_id=current_job_id(),
            max_restarts=options.get("max_restarts") or 0,
            max_task_retries=options.get("max_task_retries") or 0,
            max_concurrency=options.get("max_concurrency")
            or (ASYNC_DEFAULT_MAX_CONCURRENCY if is_async_class(self._cls) else 1),
            concurrency_groups=dict(options.get("concurrency_groups") or {}),
            actor_name=options.get("name") or "",
            namespace=namespace,
            detached=detached,
            placement_resources=placement,
            get_if_exists=bool(options.get("get_if_exists", False)),
            job_namespace=STATE.namespace,
            parent_task_id=current_task_id(),
            capture_child_tasks=opts.captures_child_tasks(options),
            **opts.strategy_fields(options),
        )
        del keep
        # A new non-detached actor is reclaimed once no strong handle is left anywhere: this one
        # and its copies (pickled into arguments, returns, puts) hold its token. As in Ray, a name
        # does not keep it alive: handles from `get_actor` (or an existing actor's) are weak.
        strong = not created.existing and not detached
        token = _put_handle_token(client, created.actor_id) if strong else None
        return ActorHandle(created.actor_id, self.__name__, self._methods, self._signatures, token)


def handle_token_id(actor_id: bytes) -> bytes:
    """The object whose references are an actor's strong handles: the actor id's bytes
    reversed (the agent derives the same, in `agent/state/actors.rs`)."""
    return bytes(reversed(actor_id))


def _put_handle_token(client, actor_id: bytes):
    """Stores the actor's (empty) handle token, referenced by the creator's handle."""
    from oxray._private import serialization
    from oxray._private.object_ref import ObjectRef

    token = ObjectRef(handle_token_id(actor_id))
    data, buffers, nested = serialization.serialize(None)
    client.seal(client.prepare(token._id, data, buffers, serialization.FLAG_VALUE), nested)
    return token


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

    bind = staticmethod(opts.refuse_bind)

    def remote(self, *args, **kwargs):
        decorator = self._options.get("_invocation_decorator")
        if decorator is not None:

            def invoke(call_args, call_kwargs):
                return self._handle._call(self._name, tuple(call_args), dict(call_kwargs), self._options)

            return decorator(invoke)(args, kwargs)
        return self._handle._call(self._name, args, kwargs, self._options)


class ActorHandle:
    def __init__(
        self,
        actor_id: bytes,
        class_name: str,
        methods: dict | None,
        signatures: dict | None = None,
        token=None,
    ):
        self._actor_id = ActorIDBytes(actor_id)
        self._class_name = class_name
        self._methods = methods
        # Where known (the creator's handle, and its copies), calls are checked against them.
        self._signatures = signatures or {}
        # A strong handle's ref to its actor's handle token (see `_put_handle_token`); None for a
        # weak one (`get_actor`, `current_actor`). When every ref to the token is gone, the agent
        # that created the actor ends it gracefully, after the calls already made.
        self._token = token

    @property
    def _ray_actor_id(self):
        """Ray's name for the handle's actor id (used by code written against Ray's internals)."""
        return self._actor_id

    @classmethod
    def _from_info(cls, info):
        names = info.method_names or None
        return cls(info.actor_id, info.class_name, {n: {} for n in names} if names else None)

    def __dir__(self):
        # As Ray lists a handle (tab completion): its methods and the built-in ones only.
        return sorted({"__init__", *BUILTIN_METHODS, *(self.__dict__.get("_methods") or ())})

    def __getattr__(self, name):
        if name in BUILTIN_METHODS:
            return ActorMethod(self, name, {})
        if name.startswith("_") and name != "__call__":
            raise AttributeError(name)
        methods = self.__dict__.get("_methods")
        if methods is not None and name not in methods:
            raise AttributeError(f"'{self._class_name}' actor has no method '{name}'")
        return ActorMethod(self, name, (methods or {}).get(name, {}))

    def _call(self, method_name, args, kwargs, options):
        from oxray._private.api import _client

        check_arguments(self._signatures.get(method_name), args, kwargs, f"{self._class_name}.{method_name}")
        client = _client()
        name = options.get("name") or f"{self._class_name}.{method_name}"
        encoded, kwarg_names, nested, keep = encode_args(client, args, kwargs, name)
        num_returns = options.get("num_returns", 1)
        task_id = os.urandom(16)
        return_ids, refs = new_return_refs(num_returns, task_id, actor_call=True, actor_id=self._actor_id)
        retry_exceptions, retry_types = opts.retry_policy(options)
        client.submit(
            kind=TaskKind.ACTOR_TASK,
            task_id=task_id,
            function_id=b"",
            name=name,
            args=encoded,
            kwarg_names=kwarg_names,
            return_ids=return_ids,
            resources={},
            actor_id=self._actor_id,
            method_name=method_name,
            call_max_task_retries=options.get("max_task_retries"),
            concurrency_group=options.get("concurrency_group") or "",
            retry_exceptions=retry_exceptions,
            retry_exception_types=retry_types,
            nested_refs=nested,
            job_id=current_job_id(),
            parent_task_id=current_task_id(),
        )
        del keep
        return returns_for(refs, num_returns)

    def __reduce__(self):
        # The token travels as a nested ref: a copy elsewhere keeps the actor alive, as in Ray.
        return (ActorHandle, (self._actor_id, self._class_name, self._methods, self._signatures, self._token))

    def __repr__(self):
        return f"Actor({self._class_name}, {self._actor_id.hex()})"

    def __eq__(self, other):
        return isinstance(other, ActorHandle) and other._actor_id == self._actor_id

    def __hash__(self):
        return hash(self._actor_id)
