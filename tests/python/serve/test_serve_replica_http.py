"""The replica's HTTP side without a cluster (`serve/_private/http.py`): a streamed body's last
chunks and a WebSocket's close still reach the proxy when it asks for them only after the app
has ended, and the replica stops counting a request once it ends."""

import asyncio
import json
import struct
import threading

from oxray.serve._private.http import HttpServer, WebSockets


class FakeReplica:
    """What the HTTP side reads of its replica: the ongoing count and the event loop."""

    def __init__(self, app):
        self.idle = threading.Condition()
        self.ongoing = 0
        self.is_function = False
        self.target = None
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.server = HttpServer(self)
        self.server.asgi_app = app

    def _event_loop(self):
        return self.loop

    def wait_idle(self):
        with self.idle:
            assert self.idle.wait_for(lambda: self.ongoing == 0, timeout=30)


def request(stream_id: str, kind: str = "http") -> bytes:
    meta = {
        "kind": kind,
        "method": "GET",
        "scheme": "http",
        "path": "/",
        "query_string": "",
        "root_path": "",
        "http_version": "1.1",
        "headers": [],
        "client": None,
        "server": None,
        "request_id": "client-id",
        "stream_id": stream_id,
    }
    raw = json.dumps(meta).encode()
    return struct.pack("<I", len(raw)) + raw


def decode(batch: bytes):
    """(done, status, chunks) of a batch, as the proxy reads it."""
    done, status = batch[0] == 1, struct.unpack_from("<H", batch, 1)[0]
    at = 3
    if status:
        (n,) = struct.unpack_from("<I", batch, at)
        at += 4
        for _ in range(2 * n):
            (size,) = struct.unpack_from("<I", batch, at)
            at += 4 + size
    (n,) = struct.unpack_from("<I", batch, at)
    at += 4
    chunks = []
    for _ in range(n):
        (size,) = struct.unpack_from("<I", batch, at)
        chunks.append(batch[at + 4 : at + 4 + size])
        at += 4 + size
    return done, status, chunks


def test_a_streamed_bodys_last_chunk_reaches_a_proxy_that_asks_after_the_app_ended():
    go = threading.Event()

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"a", "more_body": True})
        await asyncio.get_running_loop().run_in_executor(None, go.wait)
        await send({"type": "http.response.body", "body": b"b", "more_body": False})

    replica = FakeReplica(app)
    assert decode(replica.server.handle(request("s1"))) == (False, 200, [b"a"])
    go.set()
    replica.wait_idle()  # the app ended before the proxy asks for the rest
    assert decode(replica.server.next_batch("s1")) == (True, 0, [b"b"])
    assert replica.server.streams == {}, "forgotten once its last batch is out"


def test_a_websockets_close_reaches_a_proxy_that_asks_after_the_app_ended():
    async def app(scope, receive, send):
        assert (await receive())["type"] == "websocket.connect"
        await send({"type": "websocket.accept"})
        message = await receive()
        await send({"type": "websocket.send", "text": "echo: " + message["text"]})
        await send({"type": "websocket.close", "code": 1000})

    replica = FakeReplica(app)
    sockets = WebSockets(replica.server)
    assert decode(sockets.open_socket(request("w1", kind="websocket")))[:2] == (False, 101)
    sockets.receive(struct.pack("<I", 2) + b"w1" + b"\x00hi")
    replica.wait_idle()
    done, _, chunks = decode(sockets.next_batch("w1"))
    assert (done, chunks) == (True, [b"\x00echo: hi", b"\x02" + (1000).to_bytes(2, "little")])
    assert sockets.open == {}
