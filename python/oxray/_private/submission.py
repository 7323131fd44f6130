"""Turning a call into a task submission: functions shipped once by id,
arguments encoded (large ones put in the object store), refs for the returns."""

from __future__ import annotations

import hashlib
import os

import cloudpickle

from oxray import _native
from oxray._private import serialization
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
        data = cloudpickle.dumps(obj, protocol=5)
    except Exception as e:  # noqa: BLE001
        raise TypeError(f"Could not serialize {getattr(obj, '__qualname__', obj)!r} to ship it to workers: {e}") from e
    fid = hashlib.blake2b(data, digest_size=16).digest()
    client.register_function(fid, data, job_id)
    key = (STATE.epoch, STATE.functions_generation)
    jobs = cached[3] if cached is not None and cached[:2] == key and cached[2] == fid else frozenset()
    cache_owner._oxray_fid = (*key, fid, jobs | {job_id})
    return fid


def encode_args(client, args, kwargs, name):
    """([(is_ref, bytes)], kwarg names, nested ref ids, refs to keep alive until submitted)."""
    encoded = []
    nested_all = []
    keep = []
    values = list(args) + list(kwargs.values())
    for i, value in enumerate(values):
        if isinstance(value, ObjectRef):
            encoded.append((True, value._id))
            continue
        what = (
            f"argument {i} of {name}"
            if i < len(args)
            else f"keyword argument {list(kwargs)[i - len(args)]!r} of {name}"
        )
        data, buffers, nested = serialization.serialize(value, what)
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


def new_return_refs(num_returns: int):
    ids = [os.urandom(16) for _ in range(num_returns)]
    return ids, [ObjectRef(i) for i in ids]


def returns_for(refs, num_returns):
    if num_returns == 1:
        return refs[0]
    if num_returns == 0:
        return None
    return refs
