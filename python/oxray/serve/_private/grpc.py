"""gRPC calls from the node's gRPC proxy, on the replica: the proxy sends a call's method path,
metadata and request messages as bytes (it decodes nothing); here the user's generated servicer
code (`grpc_servicer_functions`, imported once) gives each method's deserializer and
serializer, and the deployment's method of the same name runs, as in Ray. A server-streaming
method (a generator) answers in batches the proxy asks for (`grpc_next`); a client-streaming one
gets an iterator over the call's messages (read whole by the proxy before it runs).

A call is a little-endian `u32` length, its JSON head (`method`, `application`, `request_id`,
`stream_id`, `multiplexed_model_id`, `metadata`, `servicer_functions`), then each message as a
`u32` length and its bytes. A batch of the answer is the same shape: a head with `done` (and once
done `code`, `details`, `trailing`), then the response messages."""

from __future__ import annotations

import importlib
import inspect
import json
import queue
import struct
import threading

from oxray.serve.exceptions import RayServeException
from oxray.serve.grpc_util import RayServegRPCContext
from oxray.serve.handle import MODEL_ID_KWARG

# gRPC status codes this side answers with.
UNIMPLEMENTED = 12
INTERNAL = 13
CANCELLED = 1

# How many streamed messages one batch carries at most (the rest wait for the next `grpc_next`).
BATCH_MESSAGES = 64


def decode_call(raw) -> tuple:
    raw = bytes(raw)
    (size,) = struct.unpack_from("<I", raw, 0)
    head = json.loads(raw[4 : 4 + size])
    at, messages = 4 + size, []
    while at < len(raw):
        (n,) = struct.unpack_from("<I", raw, at)
        messages.append(raw[at + 4 : at + 4 + n])
        at += 4 + n
    return head, messages


def encode_batch(messages: list, status=None) -> bytes:
    """`status`: None while the call goes on, else (code, details, trailing metadata)."""
    head = {"done": status is not None}
    if status is not None:
        head.update(code=status[0], details=status[1], trailing=[list(kv) for kv in status[2]])
    raw = json.dumps(head).encode()
    parts = [struct.pack("<I", len(raw)), raw]
    for message in messages:
        parts += [struct.pack("<I", len(message)), message]
    return b"".join(parts)


class _Servicer:
    """Stands for the user's servicer while the generated code registers its methods."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


class _Registrar:
    """Takes what a generated `add_<Service>Servicer_to_server` registers: each method's handler
    (its (de)serializers and whether it streams), by the method's path."""

    def __init__(self):
        self.by_path: dict = {}
        self.generic: list = []

    def add_registered_method_handlers(self, service: str, handlers: dict) -> None:
        for name, handler in handlers.items():
            self.by_path[f"/{service}/{name}"] = handler

    def add_generic_rpc_handlers(self, handlers) -> None:
        self.generic.extend(handlers)

    def handler(self, path: str):
        if path in self.by_path:
            return self.by_path[path]
        details = _CallDetails(path)
        for generic in self.generic:
            found = generic.service(details)
            if found is not None:
                self.by_path[path] = found
                return found
        return None


class _CallDetails:
    def __init__(self, method: str):
        self.method = method
        self.invocation_metadata = ()


def _registrar(functions: tuple) -> _Registrar:
    registrar = _Registrar()
    for path in functions:
        module_name, _, function_name = path.rpartition(".")
        try:
            function = getattr(importlib.import_module(module_name), function_name)
        except (ImportError, AttributeError) as e:
            raise ImportError(
                f"grpc_servicer_functions names {path!r}, which this replica cannot import ({e}); it must be "
                "importable on every node (the module beside the application's code, or installed)"
            ) from e
        function(_Servicer(), registrar)
    return registrar


class GrpcCalls:
    """A replica's gRPC side: its servicer registries and its streams in flight."""

    def __init__(self, replica):
        self.replica = replica
        self.registrars: dict = {}
        self.streams: dict = {}
        self.takes_context: dict = {}
        self.lock = threading.Lock()

    def handle(self, raw) -> bytes:
        head, messages = decode_call(raw)
        try:
            return self._handle(head, messages)
        except Exception as e:  # noqa: BLE001 - the call's error is its answer
            self.replica.log.failure(e, head.get("request_id", ""))
            return encode_batch([], (INTERNAL, f"{type(e).__name__}: {e}", []))

    def _handle(self, head: dict, messages: list) -> bytes:
        path = head["method"]
        functions = tuple(head.get("servicer_functions") or ())
        with self.lock:
            registrar = self.registrars.get(functions)
            if registrar is None:
                registrar = self.registrars[functions] = _registrar(functions)
        handler = registrar.handler(path)
        if handler is None:
            return encode_batch(
                [],
                (
                    UNIMPLEMENTED,
                    f"Method {path} is not in the services of grpc_servicer_functions ({', '.join(functions)})",
                    [],
                ),
            )
        decode = handler.request_deserializer or (lambda b: b)
        requests = [decode(m) for m in messages]
        if handler.request_streaming:
            argument = iter(requests)
        elif len(requests) == 1:
            argument = requests[0]
        else:
            return encode_batch([], (INTERNAL, f"a unary call to {path} carried {len(requests)} messages", []))
        method_name = path.rsplit("/", 1)[-1]
        context = RayServegRPCContext(head.get("metadata") or [])
        kwargs = {MODEL_ID_KWARG: head.get("multiplexed_model_id", "")}
        if self._takes_context(method_name):
            kwargs["grpc_context"] = context
        encode = handler.response_serializer or (lambda m: m)
        if handler.response_streaming:
            # The handles' streaming path: the generator (sync or async) runs with the model id set,
            # and the call counts as ongoing until it ends.
            stream = _Stream(self.replica.handle_request_streaming(method_name, argument, **kwargs), encode, context)
            with self.lock:
                self.streams[head["stream_id"]] = stream
            return self.next_batch(head["stream_id"])
        try:
            result = self.replica.handle_request(method_name, argument, **kwargs)
        except Exception as e:  # noqa: BLE001 - the user's error is the call's status
            return encode_batch([], _error_status(context, e))
        return encode_batch([encode(result)], context._status())

    def _takes_context(self, method_name: str) -> bool:
        """Whether the deployment's method takes `grpc_context` (looked up once per method)."""
        takes = self.takes_context.get(method_name)
        if takes is None:
            try:
                takes = "grpc_context" in inspect.signature(self.replica._method(method_name)).parameters
            except RayServeException:
                return False  # no such method: the call itself fails, naming it
            except (TypeError, ValueError):
                takes = False
            self.takes_context[method_name] = takes
        return takes

    def next_batch(self, stream_id: str) -> bytes:
        with self.lock:
            stream = self.streams.get(stream_id)
        if stream is None:
            return encode_batch([], (INTERNAL, f"no gRPC stream {stream_id} on this replica", []))
        messages, status = stream.take()
        if status is not None:
            with self.lock:
                self.streams.pop(stream_id, None)
        return encode_batch(messages, status)

    def cancel(self, stream_id: str) -> None:
        with self.lock:
            stream = self.streams.pop(stream_id, None)
        if stream is not None:
            stream.cancelled.set()


def _error_status(context: RayServegRPCContext, error: BaseException) -> tuple:
    """A failed call's status: the code the method set on its context, else INTERNAL."""
    code, details, trailing = context._status()
    if code == 0:
        code, details = INTERNAL, details or str(error) or type(error).__name__
    return code, details, trailing


class _Stream:
    """A server-streaming answer: the replica's streaming generator runs on a thread of its own, its
    messages queued for the proxy's `grpc_next`."""

    def __init__(self, items, encode, context: RayServegRPCContext):
        self.items: queue.Queue = queue.Queue()
        self.cancelled = threading.Event()
        threading.Thread(
            target=self._produce, args=(items, encode, context), name="serve-grpc-stream", daemon=True
        ).start()

    def _produce(self, items, encode, context: RayServegRPCContext) -> None:
        try:
            for item in items:
                if self.cancelled.is_set():
                    items.close()
                    break
                self.items.put(("message", encode(item)))
            status = (CANCELLED, "cancelled", []) if self.cancelled.is_set() else context._status()
        except Exception as e:  # noqa: BLE001 - the stream ends with the error's status (the replica logged it)
            status = _error_status(context, e)
        self.items.put(("end", status))

    def take(self) -> tuple:
        """The messages made since the last batch (waiting for one at least), and the status
        once the generator ended."""
        kind, value = self.items.get()
        messages, status = [], None
        while True:
            if kind == "end":
                status = value
                break
            messages.append(value)
            if len(messages) >= BATCH_MESSAGES:
                break
            try:
                kind, value = self.items.get_nowait()
            except queue.Empty:
                break
        return messages, status
