"""The replica's side of HTTP. The node's proxy (Rust) calls `handle_http` with the request:
a length-prefixed JSON of the ASGI scope's fields, then the body. The replica runs the
deployment as Ray's does (an ASGI app from `@serve.ingress`, or a plain `__call__` that takes a
`starlette.requests.Request`, its return value turned into a response by Ray's rules) and
answers with a batch of the response: complete, or its start and first chunks when the body
streams, the rest fetched by the proxy with `http_next`. `http_cancel` (the client went away,
or the request timed out) cancels the request's asyncio task and tells it the client
disconnected."""

from __future__ import annotations

import asyncio
import collections
import inspect
import json
import struct
import sys
import threading
import time
import traceback
from urllib.parse import unquote

from oxray.serve.context import _multiplexed_model_id, _request_route

_U32 = struct.Struct("<I")
_HEAD = struct.Struct("<BH")
# Ray's replica-built 500 (a Starlette `Response("Internal Server Error", 500)`).
_ERROR_START = (500, [(b"content-length", b"21")])
_ERROR_BODY = b"Internal Server Error"
# How many cancelled requests a replica remembers (a cancel may overtake the request itself).
_CANCELLED_KEPT = 1024


def decode_request(payload) -> tuple:
    """(ASGI scope, body, stream id) of a request from the proxy (the stream id is the proxy's own
    key for the request, never the client's `x-request-id`)."""
    view = memoryview(payload)
    (n,) = _U32.unpack_from(view, 0)
    meta = json.loads(bytes(view[4 : 4 + n]))
    body = bytes(view[4 + n :])
    raw_path = meta["path"]
    client, server = meta.get("client"), meta.get("server")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": meta["http_version"],
        "method": meta["method"],
        "scheme": meta["scheme"],
        "path": unquote(raw_path),
        "raw_path": raw_path.encode("latin-1"),
        "query_string": meta["query_string"].encode("latin-1"),
        "root_path": meta["root_path"],
        # The route prefix the proxy matched, for the replica's metrics (taken out before the app sees it).
        "oxray_route": meta.get("route", ""),
        "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in meta["headers"]],
        "client": tuple(client) if client else None,
        "server": tuple(server) if server else None,
        "state": {},
    }
    if meta.get("kind") == "websocket":
        scope["type"] = "websocket"
        del scope["method"]
        protocols = next((v for k, v in scope["headers"] if k == b"sec-websocket-protocol"), b"")
        scope["subprotocols"] = [p.strip() for p in protocols.decode("latin-1").split(",") if p.strip()]
    return scope, body, meta["stream_id"]


def encode_batch(done: bool, start, chunks) -> bytes:
    """One batch of a response, as the proxy decodes it (`serve_proxy/wire.rs`)."""
    parts = []
    if start is None:
        parts.append(_HEAD.pack(done, 0))
    else:
        status, headers = start
        parts.append(_HEAD.pack(done, status))
        parts.append(_U32.pack(len(headers)))
        for name, value in headers:
            parts += (_U32.pack(len(name)), name, _U32.pack(len(value)), value)
    parts.append(_U32.pack(len(chunks)))
    for chunk in chunks:
        parts += (_U32.pack(len(chunk)), chunk)
    return b"".join(parts)


def plain_response(result) -> tuple:
    """Ray's rules for a plain deployment's return value (`http_util.py`): (start, body)."""
    if isinstance(result, str):
        return (200, [(b"content-type", b"text/plain; charset=utf-8")]), result.encode()
    if isinstance(result, (bytes, bytearray, memoryview)):
        return (200, [(b"content-type", b"text/plain")]), bytes(result)
    if result is None:
        return (200, [(b"content-type", b"text/plain")]), b""
    try:
        from fastapi.encoders import jsonable_encoder

        result = jsonable_encoder(result)
    except ImportError:
        pass
    body = json.dumps(result, separators=(",", ":")).encode()
    return (200, [(b"content-type", b"application/json")]), body


def _is_starlette_response(value) -> bool:
    module = type(value).__module__
    if not (module.startswith("starlette.") or module.startswith("fastapi.")) and "starlette" not in sys.modules:
        return False
    try:
        from starlette.responses import Response
    except ImportError:
        return False
    return isinstance(value, Response)


class Exchange:
    """One request's response as the app sends it (on the replica's event loop, or on the
    calling thread for sync code), taken in batches by `handle_http` and `http_next`."""

    __slots__ = (
        "cond",
        "start",
        "chunks",
        "done",
        "failed",
        "task",
        "loop",
        "disconnected",
        "tracked",
        "cancel_requested",
    )

    def __init__(self, tracked):
        self.cond = threading.Condition()
        self.start = None
        self.chunks = []
        self.done = False
        self.failed = None
        self.task = None
        self.loop = None
        # Set (on the loop) when the client went away.
        self.disconnected = asyncio.Event()
        self.tracked = tracked
        self.cancel_requested = False

    def send_message(self, message: dict) -> None:
        kind = message["type"]
        with self.cond:
            if kind == "http.response.start":
                self.start = (message["status"], [(bytes(k), bytes(v)) for k, v in message.get("headers", ())])
            elif kind == "http.response.body":
                body = message.get("body", b"")
                if body:
                    self.chunks.append(bytes(body))
                if not message.get("more_body", False):
                    self.done = True
            self.cond.notify_all()
        if self.done:
            self.tracked.end(None, self.start[0] if self.start else None)

    def fail(self, error: BaseException) -> None:
        with self.cond:
            if self.start is None:
                # Nothing sent yet: Ray's replica answers 500 itself.
                self.start, self.chunks, self.done = _ERROR_START, [_ERROR_BODY], True
            else:
                self.failed = error
            self.done = True
            status = self.start[0]
            self.cond.notify_all()
        self.tracked.end(error, status)

    def take(self, first: bool) -> bytes:
        """The next batch: the first once the response is complete or its body has begun to
        stream; later ones once a chunk is there or the response ended."""
        with self.cond:
            if first:
                self.cond.wait_for(lambda: self.done or (self.start is not None and self.chunks))
            else:
                self.cond.wait_for(lambda: self.done or self.chunks)
            if self.failed is not None and not self.chunks:
                self.tracked.delivered()
                raise RuntimeError(f"the response failed after it started: {self.failed!r}")
            start = self.start if first else None
            chunks, self.chunks = self.chunks, []
            # A body that failed is not complete: the next batch raises, and the proxy cuts the connection.
            last = self.done and self.failed is None
            if last:
                self.tracked.delivered()
            return encode_batch(last, start, chunks)


class HttpServer:
    """A replica's requests over HTTP: the user's ASGI app or callable, and the streams open."""

    def __init__(self, replica):
        self.replica = replica
        self.streams: dict = {}
        self.cancelled: collections.OrderedDict = collections.OrderedDict()
        self.lock = threading.Lock()
        self.asgi_app = None
        self.lifespan = None
        self.call_takes_request = True

    def prepare(self, target, is_function: bool) -> None:
        """Finds what serves HTTP: the `@serve.ingress` app (built and bound to the replica's
        object, its lifespan started), else the deployment's `__call__`."""
        from oxray.serve._private.lifespan import Lifespan
        from oxray.serve.ingress import build_asgi_app

        self.asgi_app = None if is_function else build_asgi_app(target)
        if self.asgi_app is not None:
            self.lifespan = Lifespan(self.asgi_app, self.replica._event_loop())
            self.lifespan.startup()
        call = target if is_function else getattr(target, "__call__", None)  # noqa: B004 - a method, not callable()
        if self.asgi_app is None and call is not None:
            try:
                self.call_takes_request = len(inspect.signature(call).parameters) > 0
            except (TypeError, ValueError):
                self.call_takes_request = True

    def handle(self, payload) -> bytes:
        scope, body, request_id = decode_request(payload)
        route = scope.pop("oxray_route", "")
        if self.lifespan is not None:
            scope["state"] = dict(self.lifespan.state)
        tracked = _Tracked(
            self.replica, self.lock, self.streams, request_id, route, scope["method"], _request_id_of(scope)
        )
        exchange = Exchange(tracked)
        with self.lock:
            cancelled = self.cancelled.pop(request_id, None) is not None
            if not cancelled:
                self.streams[request_id] = exchange
        if cancelled:  # its cancel came first: never run (ending takes the lock, so outside it)
            exchange.fail(asyncio.CancelledError())
            return exchange.take(True)
        receive = _receiver(body, exchange)
        model_id = _model_id_of(scope)
        if self.asgi_app is not None:
            self._on_loop(exchange, self.asgi_app(scope, receive, _sender(exchange)), model_id)
        else:
            self._call(scope, receive, exchange, model_id)
        return exchange.take(True)

    def next_batch(self, request_id: str) -> bytes:
        with self.lock:
            exchange = self.streams.get(request_id)
        if exchange is None:
            return encode_batch(True, None, [])
        return exchange.take(False)

    def cancel(self, request_id: str) -> None:
        with self.lock:
            exchange = self.streams.get(request_id)
            if exchange is None:
                self.cancelled[request_id] = True
                while len(self.cancelled) > _CANCELLED_KEPT:
                    self.cancelled.popitem(last=False)
                return
        exchange.cancel_requested = True  # seen by its task if it has not started yet
        exchange.tracked.abandon()  # the proxy asks for no more batches
        if exchange.loop is not None:
            exchange.loop.call_soon_threadsafe(_cancel_on_loop, exchange)

    def _call(self, scope, receive, exchange, model_id: str) -> None:
        """A plain deployment: sync code runs here, on the calling thread; a coroutine, or a
        Starlette response to send, on the replica's loop."""
        replica = self.replica
        method = replica.target if replica.is_function else replica.target.__call__
        token = _multiplexed_model_id.set(model_id)
        route_token = _request_route.set(exchange.tracked.route)
        try:
            args = ()
            if self.call_takes_request:
                from starlette.requests import Request

                args = (Request(scope, receive),)
            result = method(*args)
        except BaseException as e:  # noqa: BLE001 - the user's error is a 500, logged here
            _log_failure(e)
            exchange.fail(e)
            return
        finally:
            _multiplexed_model_id.reset(token)
            _request_route.reset(route_token)
        if inspect.isawaitable(result) or _is_starlette_response(result):
            self._on_loop(exchange, _finish(result, scope, receive, exchange), model_id)
            return
        try:
            start, body = plain_response(result)
        except BaseException as e:  # noqa: BLE001
            _log_failure(e)
            exchange.fail(e)
            return
        exchange.send_message({"type": "http.response.start", "status": start[0], "headers": start[1]})
        exchange.send_message({"type": "http.response.body", "body": body})

    def _on_loop(self, exchange, coroutine, model_id: str) -> None:
        loop = self.replica._event_loop()
        exchange.loop = loop

        async def run():
            exchange.task = asyncio.current_task()
            _multiplexed_model_id.set(model_id)  # the task's own context
            _request_route.set(exchange.tracked.route)
            try:
                if exchange.cancel_requested:
                    coroutine.close()
                    raise asyncio.CancelledError()
                await coroutine
            except BaseException as e:  # noqa: BLE001 - a 500 (or a cut body), logged
                if not isinstance(e, asyncio.CancelledError):
                    _log_failure(e)
                exchange.fail(e)
                return
            if not exchange.done:
                exchange.fail(RuntimeError("the ASGI app returned without completing its response"))

        asyncio.run_coroutine_threadsafe(run(), loop)


class _Tracked:
    """A request counted as ongoing on its replica until its app ends (`end`), and kept in its
    table (by its stream id) until the proxy took its last batch (`delivered`) or gave up on it
    (`abandon`, once the app ended too): a batch asked for after the app ended still finds it."""

    def __init__(self, replica, lock, table: dict, key: str, route: str, method: str, request_id: str):
        self.replica, self.lock, self.table, self.key, self.route = replica, lock, table, key, route
        self.method, self.request_id = method, request_id
        self.guard = threading.Lock()
        self.ended = self.abandoned = False
        self.started = time.perf_counter()
        with replica.idle:
            replica.ongoing += 1

    def end(self, error: BaseException | None = None, status=None) -> None:
        """The app ended (`error`: what it raised; `status`: the response's); counted in the
        replica's metrics and access log."""
        with self.guard:
            if self.ended:
                return
            self.ended = True
            forget = self.abandoned
        with self.replica.idle:
            self.replica.ongoing -= 1
            self.replica.idle.notify_all()
        latency_ms = (time.perf_counter() - self.started) * 1000
        access = f"{self.method} {self.route or '/'} {'-' if status is None else status}"
        self.replica.request_finished(self.route, latency_ms, error, access, self.request_id)
        if forget:
            self.delivered()

    def abandon(self) -> None:
        with self.guard:
            self.abandoned = True
            forget = self.ended
        if forget:
            self.delivered()

    def delivered(self) -> None:
        with self.lock:
            self.table.pop(self.key, None)


def _cancel_on_loop(exchange) -> None:
    exchange.disconnected.set()
    if exchange.task is not None and not exchange.task.done():
        exchange.task.cancel()


async def _finish(result, scope, receive, exchange) -> None:
    if inspect.isawaitable(result):
        result = await result
    if _is_starlette_response(result):
        await result(scope, receive, _sender(exchange))
        return
    start, body = plain_response(result)
    exchange.send_message({"type": "http.response.start", "status": start[0], "headers": start[1]})
    exchange.send_message({"type": "http.response.body", "body": body})


def _receiver(body: bytes, exchange):
    sent = False

    async def receive():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        # The whole body came with the request: what remains is the client going away.
        await exchange.disconnected.wait()
        return {"type": "http.disconnect"}

    return receive


def _sender(exchange):
    async def send(message):
        exchange.send_message(message)

    return send


def _model_id_of(scope) -> str:
    """The `serve_multiplexed_model_id` header (`-` and `_` alike, as Ray reads it)."""
    for name, value in scope["headers"]:
        if name.replace(b"-", b"_") == b"serve_multiplexed_model_id":
            return value.decode("latin-1")
    return ""


def _request_id_of(scope) -> str:
    for name, value in scope["headers"]:
        if name == b"x-request-id":
            return value.decode("latin-1")
    return ""


def _log_failure(error: BaseException) -> None:
    print("".join(traceback.format_exception(type(error), error, error.__traceback__)), file=sys.stderr, flush=True)


class WsExchange:
    """One WebSocket: what the client sent, queued for the app's `receive` (on the replica's
    loop), and what the app sends, taken by the proxy in batches (`ws_next`)."""

    def __init__(self, loop, tracked):
        self.loop = loop
        self.inbound = asyncio.Queue()
        self.cond = threading.Condition()
        self.accepted = None  # (101, headers) once the app accepts
        self.outbound = []
        self.done = False
        self.tracked = tracked
        self.task = None
        # The client is gone: what the app sends now raises, as uvicorn's ClientDisconnected does.
        self.client_gone = False

    def send_message(self, message: dict) -> None:
        kind = message["type"]
        with self.cond:
            if self.client_gone and kind != "websocket.accept":
                raise OSError("the WebSocket client disconnected")
            if kind == "websocket.accept":
                headers = [(bytes(k), bytes(v)) for k, v in message.get("headers") or ()]
                if message.get("subprotocol"):
                    headers.append((b"sec-websocket-protocol", message["subprotocol"].encode()))
                self.accepted = (101, headers)
            elif kind == "websocket.send":
                if message.get("text") is not None:
                    self.outbound.append(b"\x00" + message["text"].encode())
                else:
                    self.outbound.append(b"\x01" + bytes(message.get("bytes") or b""))
            elif kind == "websocket.close":
                code = message.get("code", 1000)
                self.outbound.append(b"\x02" + code.to_bytes(2, "little") + (message.get("reason") or "").encode())
                self.done = True
            self.cond.notify_all()
        if self.done:
            self.tracked.end(None, self.start[0] if self.start else None)

    def end(self) -> None:
        with self.cond:
            self.done = True
            self.cond.notify_all()
        self.tracked.end()

    def first(self) -> bytes:
        with self.cond:
            self.cond.wait_for(lambda: self.accepted is not None or self.done)
            if self.accepted is None:
                self.tracked.delivered()
                return encode_batch(True, (403, []), [])
            return encode_batch(False, self.accepted, [])

    def next_batch(self) -> bytes:
        with self.cond:
            self.cond.wait_for(lambda: self.done or self.outbound)
            chunks, self.outbound = self.outbound, []
            if self.done:
                self.tracked.delivered()
            return encode_batch(self.done, None, chunks)

    def deliver(self, raw: bytes) -> None:
        """A client message (`ws_receive`), for the app's next `receive()`."""
        kind, data = raw[0], raw[1:]
        if kind == 0:
            message = {"type": "websocket.receive", "text": data.decode()}
        elif kind == 1:
            message = {"type": "websocket.receive", "bytes": data}
        else:
            message = {"type": "websocket.disconnect", "code": int.from_bytes(data[:2], "little")}
            with self.cond:
                self.client_gone = True
                self.outbound = []
            self.tracked.abandon()  # the proxy asks for no more batches
        self.loop.call_soon_threadsafe(self.inbound.put_nowait, message)


class WebSockets:
    """A replica's WebSockets, by request id; the app runs on the replica's loop."""

    def __init__(self, server: HttpServer):
        self.server = server
        self.open: dict = {}
        self.lock = threading.Lock()

    def open_socket(self, payload) -> bytes:
        scope, _, request_id = decode_request(payload)
        route = scope.pop("oxray_route", "")
        server, replica = self.server, self.server.replica
        if server.lifespan is not None:
            scope["state"] = dict(server.lifespan.state)
        if server.asgi_app is None:
            return encode_batch(True, (403, []), [])  # only an ASGI app (FastAPI) takes WebSockets, as in Ray
        loop = replica._event_loop()
        exchange = WsExchange(
            loop, _Tracked(replica, self.lock, self.open, request_id, route, "WS", _request_id_of(scope))
        )
        with self.lock:
            self.open[request_id] = exchange
        connected = False

        async def receive():
            nonlocal connected
            if not connected:
                connected = True
                return {"type": "websocket.connect"}
            return await exchange.inbound.get()

        async def send(message):
            exchange.send_message(message)

        async def run():
            exchange.task = asyncio.current_task()
            _multiplexed_model_id.set(_model_id_of(scope))
            _request_route.set(route)
            try:
                await server.asgi_app(scope, receive, send)
            except BaseException as e:  # noqa: BLE001 - logged; the socket closes
                if not isinstance(e, asyncio.CancelledError):
                    _log_failure(e)
            finally:
                exchange.end()

        asyncio.run_coroutine_threadsafe(run(), loop)
        return exchange.first()

    def receive(self, payload) -> None:
        view = memoryview(payload)
        (n,) = _U32.unpack_from(view, 0)
        request_id = bytes(view[4 : 4 + n]).decode()
        with self.lock:
            exchange = self.open.get(request_id)
        if exchange is not None:
            exchange.deliver(bytes(view[4 + n :]))

    def next_batch(self, request_id: str) -> bytes:
        with self.lock:
            exchange = self.open.get(request_id)
        if exchange is None:
            return encode_batch(True, None, [])
        return exchange.next_batch()
