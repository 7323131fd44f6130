"""Turning values into object bytes and back.

Values are pickled with cloudpickle at protocol 5, so large buffers (numpy,
Arrow) travel out-of-band and are read back as zero-copy views of shared memory.
ObjectRefs found while pickling are reported so the runtime keeps them alive.
"""

from __future__ import annotations

import json
import pickle
import threading
import types

import cloudpickle

from oxray import exceptions

FLAG_VALUE = 0
FLAG_APPLICATION_ERROR = 1
FLAG_SYSTEM_ERROR = 2

_context = threading.local()

_DYNAMIC_CODE_FILENAME = "<dynamic-code>"


def _keep_code_filenames() -> None:
    """cloudpickle 3.1.3 and later write "<dynamic-code>" as the file name of every code
    object pickled by value (a script's or a notebook's functions), so a task's traceback
    loses its source lines. Ray's own (vendored) cloudpickle keeps the name: so do we."""
    table = cloudpickle.CloudPickler.dispatch_table
    reduce_code = table.get(types.CodeType)
    if reduce_code is None or getattr(reduce_code, "_oxray_keeps_filename", False):
        return

    def reduce_keeping_filename(code: types.CodeType):
        constructor, args = reduce_code(code)
        return constructor, tuple(
            code.co_filename if isinstance(arg, str) and arg == _DYNAMIC_CODE_FILENAME else arg for arg in args
        )

    reduce_keeping_filename._oxray_keeps_filename = True
    table[types.CodeType] = reduce_keeping_filename


_keep_code_filenames()


def note_nested_ref(object_id: bytes) -> None:
    refs = getattr(_context, "refs", None)
    if refs is not None:
        refs.append(object_id)


# Values whose pickle is the same from the standard pickler as from cloudpickle's (no function,
# class or reference inside): most calls' arguments and results, pickled without building a
# CloudPickler each time.
_PLAIN_TYPES = frozenset((type(None), bool, int, float, str, bytes))


def serialize(value, what: str = "value"):
    """(pickle bytes, out-of-band buffers, ids of ObjectRefs inside)."""
    if type(value) in _PLAIN_TYPES:
        return pickle.dumps(value, protocol=5), [], []
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


def unserializable(header: str, value, error: BaseException) -> TypeError:
    """Ray's error for a value that cannot be pickled: `header`, then what
    `inspect_serializability` finds in it."""
    import io

    from oxray.util.check_serialize import inspect_serializability

    out = io.StringIO()
    try:
        inspect_serializability(value, print_file=out)
    except Exception as e:  # noqa: BLE001 - the report is a help; the error must still be raised
        out.write(f"(could not inspect it: {e!r})\n{error}")
    failure = TypeError(f"{header}:\n{out.getvalue()}")
    failure.__cause__ = error
    return failure


def serialize_error(error: BaseException) -> bytes:
    """An application error's object bytes: Ray's text of the error beside its pickle, so
    a reader that cannot unpickle it still gets the text (as UnserializableException)."""
    text = f"{exceptions.type_name(type(error))}: {error}"
    return pickle.dumps((text, cloudpickle.dumps(error, protocol=5)), protocol=5)


def payload_size(data: bytes, buffers) -> int:
    return len(data) + sum(b.nbytes for b in buffers)


def deserialize(buf, as_cause: bool = True):
    """The value an ObjectBuffer holds; raises the stored error for error objects (a
    task's error as an instance of its cause's class too, unless `as_cause` is False)."""
    flags, (p0, p1), ranges = buf.layout()
    view = memoryview(buf)
    if flags == FLAG_SYSTEM_ERROR:
        info = json.loads(bytes(view[p0:p1]))
        raise exceptions.system_error(info.get("type", ""), info.get("message", ""))
    if flags == FLAG_APPLICATION_ERROR:
        error = _load_error(view[p0:p1])
        if as_cause and isinstance(error, exceptions.RayTaskError):
            raise error.as_instanceof_cause()
        raise error
    return pickle.loads(view[p0:p1], buffers=[view[a:b] for a, b in ranges])


def _load_error(data) -> BaseException:
    text, payload = pickle.loads(data)
    try:
        return pickle.loads(payload)
    except Exception:  # noqa: BLE001 - e.g. the class's __init__ wants arguments its pickle lacks
        return exceptions.UnserializableException(text)
