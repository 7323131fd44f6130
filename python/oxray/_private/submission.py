"""Turning a call into a task submission: functions shipped once by id,
arguments encoded (large ones put in the object store), refs for the returns."""

from __future__ import annotations

import hashlib
import inspect
import os

import cloudpickle

from oxray import _native
from oxray._private import serialization
from oxray._private.generator import STREAMING, ObjectRefGenerator, stream_end_id
from oxray._private.object_ref import ObjectRef
from oxray._private.state import STATE, current_job_id


def function_id_for(client, obj, cache_owner) -> bytes:
    """Pickles `obj` and registers it with the agent once per session and job
    (the agent drops a job's functions when the job ends, and then bumps
    `functions_generation`, after which it is registered again); returns its id."""
    job_id = current_job_id()
    cached = getattr(cache_owner, "_oxray_fid", None)
    if (
        cached is not None
        and cached[0] == STATE.epoch
        and cached[1] == STATE.functions_generation
        and job_id in cached[3]
    ):
        return cached[2]
    try:
        # With its `__qualname__`: cloudpickle drops it for a class defined inside a function
        # (Ray's names for the class's methods use it).
        data = cloudpickle.dumps((obj, getattr(obj, "__qualname__", None)), protocol=5)
    except Exception as e:  # noqa: BLE001
        # Ray's wording names the function as `module.qualname`, an actor class by its `__init__`.
        what = "the actor class" if inspect.isclass(obj) else "the function"
        header = f"Could not serialize {what} {_descriptor(obj)}"
        raise serialization.unserializable(header, obj, e) from e
    _check_pickled_size(obj, len(data))
    fid = hashlib.blake2b(data, digest_size=16).digest()
    client.register_function(fid, data, job_id)
    key = (STATE.epoch, STATE.functions_generation)
    jobs = cached[3] if cached is not None and cached[:2] == key and cached[2] == fid else frozenset()
    cache_owner._oxray_fid = (*key, fid, jobs | {job_id})
    return fid


def encode_args(client, args, kwargs, name, callee=None):
    """([(is_ref, bytes)], kwarg names, nested ref ids, refs to keep alive until submitted).
    `callee` (the function or actor class called, None for an actor method) names it in errors."""
    encoded = []
    nested_all = []
    keep = []
    values = list(args) + list(kwargs.values())
    for value in values:
        if isinstance(value, ObjectRef):
            encoded.append((True, value._id))
            continue
        try:
            data, buffers, nested = serialization.serialize(value)
        except TypeError as e:
            # Ray's text names the callee as `module.qualname` (an actor method by its task name).
            what = _descriptor(callee) if callee is not None else name
            header = f"Could not serialize the argument {value!r} for a task or actor {what}"
            raise serialization.unserializable(header, value, e.__cause__) from e
        if serialization.payload_size(data, buffers) <= _native.INLINE_THRESHOLD:
            encoded.append((False, _native.encode_object(data, buffers, serialization.FLAG_VALUE)))
            nested_all.extend(nested)
        else:
            # Large values go through the object store once, like `put`.
            from oxray._private.api import put_serialized

            ref = put_serialized(client, data, buffers, nested)
            keep.append(ref)
            encoded.append((True, ref._id))
    return encoded, list(kwargs), nested_all, keep


def _descriptor(obj) -> str:
    """Ray's name of a function (`module.qualname`) or an actor class (`module.qualname.__init__`)."""
    name = f"{getattr(obj, '__module__', None) or '__main__'}.{getattr(obj, '__qualname__', repr(obj))}"
    return f"{name}.__init__" if inspect.isclass(obj) else name


# Ray's limits on a pickled function or class: past the first a warning, past the
# second an error (it is usually a large array captured from the enclosing scope).
FUNCTION_SIZE_WARN_THRESHOLD = 25 * 1024 * 1024
FUNCTION_SIZE_ERROR_THRESHOLD = 95 * 1024 * 1024


def _check_pickled_size(obj, size: int) -> None:
    # Ray's wording: "The actor Counter ...", "The remote function module.f ...".
    if inspect.isclass(obj):
        what, name = "actor", getattr(obj, "__name__", repr(obj))
    else:
        what, name = "remote function", f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', repr(obj))}"
    advice = (
        "Check that its definition is not implicitly capturing a large array or other object in scope: "
        "put() it and pass the ObjectRef instead"
    )
    if size > FUNCTION_SIZE_ERROR_THRESHOLD:
        raise ValueError(
            f"The {what} {name} is too large ({size // (1 << 20)} MiB > "
            f"FUNCTION_SIZE_ERROR_THRESHOLD={FUNCTION_SIZE_ERROR_THRESHOLD // (1 << 20)} MiB). {advice}."
        )
    if size > FUNCTION_SIZE_WARN_THRESHOLD:
        import warnings

        warnings.warn(
            f"The {what} {name} is very large ({size // (1 << 20)} MiB). {advice}.", UserWarning, stacklevel=4
        )


class ArgumentCheck:
    """A function's signature, checked at `.remote()` as Ray does. The common call (positional
    arguments only, against plain parameters) is a count comparison; anything else binds."""

    __slots__ = ("signature", "min_positional", "max_positional")

    def __init__(self, signature: inspect.Signature):
        self.signature = signature
        kinds = [p.kind for p in signature.parameters.values()]
        positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        required_keyword_only = any(
            p.kind == inspect.Parameter.KEYWORD_ONLY and p.default is inspect.Parameter.empty
            for p in signature.parameters.values()
        )
        # None: no count-only answer (a required keyword-only parameter always needs binding).
        self.min_positional = None
        self.max_positional = None
        if not required_keyword_only:
            params = [p for p in signature.parameters.values() if p.kind in positional]
            self.min_positional = sum(1 for p in params if p.default is inspect.Parameter.empty)
            self.max_positional = None if inspect.Parameter.VAR_POSITIONAL in kinds else len(params)

    def __reduce__(self):
        # Only the parameters' names and kinds travel (with a handle or a function passed to a
        # task): their defaults and annotations may not pickle, and binding never looks at them.
        shape = tuple(
            (p.name, int(p.kind), p.default is not inspect.Parameter.empty) for p in self.signature.parameters.values()
        )
        return (_check_from_shape, (shape,))

    def check(self, args, kwargs, name: str) -> None:
        if (
            not kwargs
            and self.min_positional is not None
            and self.min_positional <= len(args)
            and (self.max_positional is None or len(args) <= self.max_positional)
        ):
            return
        try:
            self.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{name}.remote(): {e}") from None


def _check_from_shape(shape) -> ArgumentCheck:
    params = [
        inspect.Parameter(
            name,
            type(inspect.Parameter.POSITIONAL_ONLY)(kind),
            default=None if has_default else inspect.Parameter.empty,
        )
        for name, kind, has_default in shape
    ]
    return ArgumentCheck(inspect.Signature(params))


def signature_of(target, drop_first: bool = False) -> ArgumentCheck | None:
    """The check `.remote()` calls go through (as Ray's, at call time), or None when
    Python cannot read a signature (some builtins)."""
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return None
    if drop_first:
        params = list(signature.parameters.values())[1:]
        signature = signature.replace(parameters=params)
    return ArgumentCheck(signature)


def check_arguments(check: ArgumentCheck | None, args, kwargs, name: str) -> None:
    """Raises the TypeError a direct call would, before anything is submitted."""
    if check is not None:
        check.check(args, kwargs, name)


def new_return_refs(num_returns, task_id: bytes, actor_call: bool = False, actor_id: bytes | None = None):
    if num_returns == STREAMING:
        ids = [stream_end_id(task_id)]
    else:
        ids = [os.urandom(16) for _ in range(num_returns)]
    return ids, [ObjectRef(i, task_id, actor_call, actor_id=actor_id) for i in ids]


def returns_for(refs, num_returns):
    if num_returns == STREAMING:
        return ObjectRefGenerator(refs[0])
    if num_returns == 1:
        return refs[0]
    if num_returns == 0:
        return None
    return refs
