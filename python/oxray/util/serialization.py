"""Ray's custom serializers: `register_serializer(cls, serializer=, deserializer=)`."""

from __future__ import annotations

from typing import Callable

import cloudpickle


def register_serializer(cls: type, *, serializer: Callable, deserializer: Callable) -> None:
    """Pickles instances of exactly `cls` (in this process) as `deserializer(serializer(obj))`.

    The deserializer travels with the pickle, so the reading process need not register
    anything; it must itself be picklable. Applies to task errors too: a worker that
    registers one for an exception class sends that exception to the caller this way.
    """

    def reduce(obj):
        return deserializer, (serializer(obj),)

    cloudpickle.CloudPickler.dispatch_table[cls] = reduce


def deregister_serializer(cls: type) -> None:
    """Drops the serializer registered for `cls`; nothing happens when there is none."""
    cloudpickle.CloudPickler.dispatch_table.pop(cls, None)
