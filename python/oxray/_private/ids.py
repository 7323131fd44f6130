"""Ray's id types (`JobID`, `TaskID`, `ActorID`, ...): bytes with `.hex()`, `.binary()` and a nil value."""

from __future__ import annotations


class BaseID:
    """An id: compares and hashes by its bytes, prints as `ClassName(hex)`."""

    __slots__ = ("_binary",)

    def __init__(self, binary: bytes):
        if not isinstance(binary, bytes):
            raise TypeError(f"{type(self).__name__} needs bytes, got {type(binary).__name__}: {binary!r}")
        self._binary = binary

    @classmethod
    def from_binary(cls, binary: bytes):
        return cls(binary)

    @classmethod
    def from_hex(cls, hex_id: str):
        try:
            return cls(bytes.fromhex(hex_id))
        except (TypeError, ValueError):
            raise ValueError(f"{cls.__name__}.from_hex() expects a hex string, got {hex_id!r}") from None

    @classmethod
    def nil(cls):
        return cls(b"")

    def is_nil(self) -> bool:
        return not any(self._binary)

    def binary(self) -> bytes:
        return self._binary

    def hex(self) -> str:
        return self._binary.hex()

    def size(self) -> int:
        return len(self._binary)

    def __eq__(self, other):
        return type(other) is type(self) and other._binary == self._binary

    def __hash__(self):
        return hash((type(self).__name__, self._binary))

    def __repr__(self):
        return f"{type(self).__name__}({self.hex()})"

    def __reduce__(self):
        return type(self), (self._binary,)


class JobID(BaseID):
    __slots__ = ()


class TaskID(BaseID):
    __slots__ = ()


class ActorID(BaseID):
    __slots__ = ()


class NodeID(BaseID):
    __slots__ = ()


class WorkerID(BaseID):
    __slots__ = ()


class PlacementGroupID(BaseID):
    __slots__ = ()


class ActorIDBytes(bytes):
    """An actor handle's id: the bytes the runtime takes, plus Ray's `ActorID` accessors.
    As in Ray, its last 4 bytes are the id of the job that created the actor."""

    __slots__ = ()

    @property
    def job_id(self) -> JobID:
        return JobID(bytes(self[-4:]))

    def binary(self) -> bytes:
        return bytes(self)

    def __repr__(self):
        return f"ActorID({self.hex()})"
