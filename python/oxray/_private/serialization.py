"""Turning values into object bytes and back.

Values are pickled with cloudpickle at protocol 5, so large buffers (numpy,
Arrow) travel out-of-band and are read back as zero-copy views of shared memory.
ObjectRefs found while pickling are reported so the runtime keeps them alive.
"""

from __future__ import annotations

import json
import pickle
import threading

import cloudpickle

from oxray import exceptions

FLAG_VALUE = 0
FLAG_APPLICATION_ERROR = 1
FLAG_SYSTEM_ERROR = 2

_context = threading.local()


def note_nested_ref(object_id: bytes) -> None:
    refs = getattr(_context, "refs", None)
    if refs is not None:
        refs.append(object_id)


def serialize(value, what: str = "value"):
    """(pickle bytes, out-of-band buffers, ids of ObjectRefs inside)."""
    buffers = []
    _context.refs = []
    try:
        data = cloudpickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    except Exception as e:  # noqa: BLE001 - any pickling failure gets the same clear message
        raise TypeError(
            f"Could not serialize {what} of type {type(value).__name__}: {e}. "
            "Arguments and return values must be picklable (locks, sockets and open files are not)."
        ) from e
    finally:
        nested = _context.refs
        _context.refs = None
    raw = []
    for b in buffers:
        try:
            raw.append(b.raw())
        except BufferError:
            # Non-contiguous buffers are copied into a contiguous one.
            raw.append(memoryview(bytes(b)))
    return data, raw, nested


def payload_size(data: bytes, buffers) -> int:
    return len(data) + sum(b.nbytes for b in buffers)


def deserialize(buf):
    """The value an ObjectBuffer holds; raises the stored error for error objects."""
    flags, (p0, p1), ranges = buf.layout()
    view = memoryview(buf)
    if flags == FLAG_SYSTEM_ERROR:
        info = json.loads(bytes(view[p0:p1]))
        raise exceptions.system_error(info.get("type", ""), info.get("message", ""))
    value = pickle.loads(view[p0:p1], buffers=[view[a:b] for a, b in ranges])
    if flags == FLAG_APPLICATION_ERROR:
        if isinstance(value, exceptions.RayTaskError):
            raise value.as_instanceof_cause()
        raise value
    return value
