"""Ray's `serve.grpc_util`: `RayServegRPCContext`, what a deployment method called over gRPC gets
as its `grpc_context` argument (when it takes one): the call's metadata, and the code, details
and trailing metadata it sets for its answer."""

from __future__ import annotations

from typing import Optional


class RayServegRPCContext:
    """The context of one gRPC call to a deployment, as Ray's: read the call's metadata, set the
    answer's status code, details and trailing metadata. A code other than OK set by a method that
    returns is the call's status, as in Ray."""

    def __init__(self, invocation_metadata: list, peer: str = ""):
        self._invocation_metadata = [tuple(kv) for kv in invocation_metadata]
        self._peer = peer
        self._code = None
        self._details = ""
        self._trailing_metadata: list = []

    def invocation_metadata(self) -> list:
        return list(self._invocation_metadata)

    def peer(self) -> str:
        return self._peer

    def code(self):
        return self._code

    def set_code(self, code) -> None:
        """`code`: a `grpc.StatusCode`."""
        if not hasattr(code, "value") or not isinstance(code.value, tuple):
            raise TypeError(f"set_code({code!r}): expected a grpc.StatusCode")
        self._code = code

    def details(self) -> str:
        return self._details

    def set_details(self, details: str) -> None:
        self._details = str(details)

    def trailing_metadata(self) -> list:
        return list(self._trailing_metadata)

    def set_trailing_metadata(self, trailing_metadata) -> None:
        pairs = [tuple(kv) for kv in trailing_metadata]
        for pair in pairs:
            if len(pair) != 2 or not all(isinstance(x, str) for x in pair):
                raise TypeError(f"set_trailing_metadata: expected (str, str) pairs, got {pair!r}")
        self._trailing_metadata = pairs

    def time_remaining(self) -> Optional[float]:
        return None

    def set_compression(self, compression) -> None:
        raise NotImplementedError("RayServegRPCContext.set_compression: oxray's gRPC proxy sends uncompressed messages")

    def auth_context(self) -> dict:
        return {}

    def peer_identities(self):
        return None

    def peer_identity_key(self):
        return None

    def _status(self) -> tuple:
        """(code number, details, trailing metadata) of the answer."""
        number = 0 if self._code is None else int(self._code.value[0])
        return number, self._details, self._trailing_metadata
