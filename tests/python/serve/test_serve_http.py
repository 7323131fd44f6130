"""Serve over HTTP: requests through the node's Rust proxy to replicas, as Ray Serve's
docs write deployments (a plain `__call__(request)`, and FastAPI through `@serve.ingress`),
checked against Ray's status codes, texts and headers."""

import http.client
import json
import socket
import threading
import urllib.error
import urllib.request

import pytest

from oxray import serve
from oxray_testutil import wait_until


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def port(clean_serve):
    port = free_port()
    serve.start(http_options={"port": port})
    return port


def fetch(port, path, method="GET", body=None, headers=None, timeout=30):
    """(status, headers, body) of one request."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def test_a_plain_deployments_return_values_become_rays_responses(port):
    @serve.deployment
    class Echo:
        def __call__(self, request):
            kind = request.query_params["kind"]
            return {
                "str": "hello",
                "dict": {"a": 1, "b": [1, 2]},
                "bytes": b"raw-bytes",
                "none": None,
                "int": 42,
                "path": f"{request.url.path} {request.scope['root_path']}",
            }[kind]

    serve.run(Echo.bind(), name="plain", route_prefix="/plain")
    expected = {
        "str": ("text/plain; charset=utf-8", b"hello"),
        "dict": ("application/json", b'{"a":1,"b":[1,2]}'),
        "bytes": ("text/plain", b"raw-bytes"),
        "none": ("text/plain", b""),
        "int": ("application/json", b"42"),
        "path": ("text/plain; charset=utf-8", b"/plain/sub/x /plain"),
    }
    for kind, (content_type, body) in expected.items():
        path = "/plain/sub/x" if kind == "path" else "/plain"
        status, headers, got = fetch(port, f"{path}?kind={kind}")
        assert (status, headers["content-type"], got) == (200, content_type, body), kind


def test_request_ids_routes_health_and_unknown_paths(port):
    @serve.deployment
    def seen_id(request):
        return request.headers["x-request-id"]

    serve.run(seen_id.bind(), name="ids", route_prefix="/ids")
    status, headers, body = fetch(port, "/ids", headers={"x-request-id": "my-id-123"})
    assert (status, headers["x-request-id"], body) == (200, "my-id-123", b"my-id-123")
    _, headers, body = fetch(port, "/ids")
    assert len(headers["x-request-id"]) == 36 and body.decode() == headers["x-request-id"]
    status, headers, body = fetch(port, "/-/routes")
    assert (status, headers["content-type"], json.loads(body)) == (200, "application/json", {"/ids": "ids"})
    assert fetch(port, "/-/healthz")[::2] == (200, b"success")
    status, headers, body = fetch(port, "/idsx")
    assert status == 404
    assert body == b"Path '/idsx' not found. Ping http://.../-/routes for available routes."
    assert "x-request-id" in headers


def test_user_code_that_raises_is_a_500_and_the_replica_keeps_serving(port):
    @serve.deployment
    class Fragile:
        def __call__(self, request):
            if request.query_params.get("fail"):
                raise ValueError("boom")
            return "fine"

    serve.run(Fragile.bind(), name="fragile", route_prefix="/")
    status, headers, body = fetch(port, "/?fail=1")
    assert (status, body) == (500, b"Internal Server Error")
    assert "content-type" not in headers
    assert fetch(port, "/")[::2] == (200, b"fine")


def test_a_fastapi_ingress_serves_class_routes_with_the_replicas_state(port):
    from fastapi import FastAPI

    app = FastAPI()

    @serve.deployment
    @serve.ingress(app)
    class Api:
        def __init__(self, greeting: str):
            self.greeting = greeting
            self.calls = 0

        @app.get("/items/{item_id}")
        def item(self, item_id: int, q: str = ""):
            self.calls += 1
            return {"item": item_id, "q": q, "calls": self.calls, "greeting": self.greeting}

        @app.post("/echo")
        async def echo(self, payload: dict):
            return {"got": payload}

    serve.run(Api.bind("hi"), name="api", route_prefix="/api")
    status, _, body = fetch(port, "/api/items/7?q=z")
    assert (status, json.loads(body)) == (200, {"item": 7, "q": "z", "calls": 1, "greeting": "hi"})
    assert json.loads(fetch(port, "/api/items/8")[2])["calls"] == 2
    status, headers, body = fetch(
        port, "/api/echo", method="POST", body=json.dumps({"a": [1, 2]}), headers={"content-type": "application/json"}
    )
    assert (status, json.loads(body)) == (200, {"got": {"a": [1, 2]}})
    status, _, body = fetch(port, "/api/items/not-a-number")
    assert status == 422 and json.loads(body)["detail"][0]["type"] == "int_parsing"
    assert fetch(port, "/api/openapi.json")[0] == 200


def test_a_streaming_response_reaches_the_client_chunk_by_chunk(port):
    import asyncio

    from fastapi import FastAPI
    from fastapi.responses import StreamingResponse

    app = FastAPI()

    @serve.deployment
    @serve.ingress(app)
    class Streamer:
        def __init__(self):
            self.release = None

        @app.get("/stream")
        def stream(self):
            self.release = asyncio.Event()

            async def chunks():
                yield b"first;"
                await self.release.wait()  # the client must have the first chunk to let this go on
                yield b"second"

            return StreamingResponse(chunks(), media_type="text/plain")

        @app.get("/release")
        def release_stream(self):
            self.release.set()
            return "released"

    serve.run(Streamer.bind(), name="stream", route_prefix="/s")
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/s/stream")
    response = conn.getresponse()
    assert response.status == 200 and response.getheader("transfer-encoding") == "chunked"
    assert response.read1() == b"first;"
    assert fetch(port, "/s/release")[::2] == (200, b'"released"')
    assert response.read() == b"second"
    conn.close()


def test_a_request_past_its_timeout_is_408_and_its_task_is_cancelled(port):
    import asyncio

    from fastapi import FastAPI

    app = FastAPI()

    @serve.deployment
    @serve.ingress(app)
    class Slow:
        def __init__(self):
            self.cancelled = asyncio.Event()

        @app.get("/hang")
        async def hang(self):
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled.set()
                raise

        @app.get("/was-cancelled")
        async def was_cancelled(self):
            await self.cancelled.wait()
            return "cancelled"

    serve.run(Slow.bind(), name="slow", route_prefix="/slow")
    status, headers, body = fetch(port, "/slow/hang", headers={"x-request-timeout-seconds": "0.5"})
    assert status == 408
    assert body.decode() == f"Request {headers['x-request-id']} timed out after 0.5s."
    assert fetch(port, "/slow/was-cancelled")[::2] == (200, b'"cancelled"')


def test_backpressure_past_max_queued_requests_is_rays_503(port):
    import asyncio

    import oxray as ray

    @ray.remote
    class Signal:
        def __init__(self):
            self.event = asyncio.Event()
            self.waiting = 0
            self.entered = asyncio.Event()

        async def wait(self):
            self.waiting += 1
            self.entered.set()
            await self.event.wait()

        async def wait_entered(self):
            await self.entered.wait()

        def send(self):
            self.event.set()

    signal = Signal.remote()

    @serve.deployment(max_ongoing_requests=1, max_queued_requests=1)
    class Gate:
        def __init__(self, signal):
            self.signal = signal

        def __call__(self, request):
            ray.get(self.signal.wait.remote())
            return "passed"

    serve.run(Gate.bind(signal), name="gate", route_prefix="/gate")
    results = {}

    def call(key):
        results[key] = fetch(port, "/gate")

    threads = [threading.Thread(target=call, args=("first",))]
    threads[0].start()
    ray.get(signal.wait_entered.remote())  # the only replica is busy with the first request
    threads.append(threading.Thread(target=call, args=("second",)))
    threads[1].start()
    # A probe is refused once the second waits in the proxy's queue; one that got there first waits
    # instead, until its timeout (and then the second may be the one refused).
    while True:
        status, _, body = fetch(port, "/gate", headers={"x-request-timeout-seconds": "0.3"})
        if status == 503:
            break
        assert status == 408, status
        if "second" in results:
            status, _, body = results["second"]
            break
    assert (status, body) == (
        503,
        b"Request dropped due to backpressure (num_queued_requests=1, max_queued_requests=1).",
    )
    ray.get(signal.send.remote())
    for thread in threads:
        thread.join()
    assert results["first"][::2] == (200, b"passed")
    assert results["second"][0] in (200, 503)


def test_a_body_over_the_limit_is_413(clean_serve, monkeypatch):
    monkeypatch.setenv("OXRAY_SERVE_MAX_REQUEST_BODY_BYTES", "1000")
    port = free_port()
    serve.start(http_options={"port": port})

    @serve.deployment
    async def size(request):
        return len(await request.body())

    serve.run(size.bind(), name="size", route_prefix="/size")
    assert fetch(port, "/size", method="POST", body=b"x" * 1000)[::2] == (200, b"1000")
    assert fetch(port, "/size", method="POST", body=b"x" * 1001)[0] == 413


def test_bad_http_options_are_refused_by_name(clean_serve):
    with pytest.raises(ValueError, match="port=70000"):
        serve.start(http_options={"port": 70000})
    with pytest.raises(TypeError, match="'colour'"):
        serve.start(http_options={"colour": "blue"})
    with pytest.raises(NotImplementedError, match="ssl_keyfile_password"):
        serve.start(http_options={"ssl_keyfile": "k.pem", "ssl_certfile": "c.pem", "ssl_keyfile_password": "x"})
    with pytest.raises(ValueError, match="HTTPS needs both"):
        serve.start(http_options={"ssl_keyfile": "k.pem"})
    with pytest.raises(ValueError, match="proxy_location='Moon'"):
        serve.start(proxy_location="Moon")


def test_a_port_in_use_is_a_clear_error(clean_serve):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        with pytest.raises(Exception, match=f"cannot listen on 127.0.0.1:{busy}"):
            serve.start(http_options={"port": busy})


def test_urllib_sees_the_same(port):
    """Ray's docs call deployments with `requests`; urllib is the same HTTP."""

    @serve.deployment
    class Doubler:
        async def __call__(self, request):
            return {"result": (await request.json())["x"] * 2}

    serve.run(Doubler.bind(), name="doubler", route_prefix="/double")
    request = urllib.request.Request(f"http://127.0.0.1:{port}/double", data=b'{"x": 21}', method="POST")
    assert json.loads(urllib.request.urlopen(request, timeout=30).read()) == {"result": 42}
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/missing", timeout=30)
    assert e.value.code == 404


def test_http_load_scales_a_deployment_up_from_zero(port):
    @serve.deployment(
        autoscaling_config={
            "min_replicas": 0,
            "initial_replicas": 0,
            "max_replicas": 1,
            "metrics_interval_s": 0.1,
            "upscale_delay_s": 0,
            "downscale_delay_s": 600,
        }
    )
    def woken(request):
        return "awake"

    serve.run(woken.bind(), name="woken", route_prefix="/woken")
    assert serve.status().applications["woken"].deployments["woken"].replica_states.get("RUNNING", 0) == 0
    # Only the proxy knows of this request: its report to the controller starts a replica.
    assert fetch(port, "/woken")[::2] == (200, b"awake")


def test_multiplexed_models_load_once_per_replica_and_follow_the_request(port):
    @serve.deployment
    class Models:
        def __init__(self):
            self.loads = []

        @serve.multiplexed(max_num_models_per_replica=2)
        async def get_model(self, model_id: str):
            self.loads.append(model_id)
            return f"model-{model_id}"

        async def __call__(self, request):
            model = await self.get_model(serve.get_multiplexed_model_id())
            return {"model": model, "loads": self.loads}

    handle = serve.run(Models.bind(), name="models", route_prefix="/models")
    assert handle.options(multiplexed_model_id="a").remote(None).result() == {"model": "model-a", "loads": ["a"]}
    assert handle.options(multiplexed_model_id="a").remote(None).result()["loads"] == ["a"], "loaded once"
    status, _, body = fetch(port, "/models", headers={"serve_multiplexed_model_id": "b"})
    assert (status, json.loads(body)) == (200, {"model": "model-b", "loads": ["a", "b"]})
    # A third model evicts the least recently used (a), which then loads again.
    handle.options(multiplexed_model_id="c").remote(None).result()
    assert handle.options(multiplexed_model_id="a").remote(None).result()["loads"] == ["a", "b", "c", "a"]


def test_a_multiplexed_models_calls_and_requests_go_to_the_replica_that_holds_it(port):
    import os

    @serve.deployment(num_replicas=2, ray_actor_options={"num_cpus": 0})
    class Models:
        @serve.multiplexed(max_num_models_per_replica=4)
        async def get_model(self, model_id: str):
            return model_id

        async def __call__(self, _):
            return await self.get_model(serve.get_multiplexed_model_id()), os.getpid()

    handle = serve.run(Models.bind(), name="affinity", route_prefix="/aff")
    for model in ("m1", "m2", "m3"):
        served_by = {handle.options(multiplexed_model_id=model).remote(None).result() for _ in range(12)}
        assert len(served_by) == 1, f"{model}'s calls went to {served_by}: one replica holds it"
    # Through the HTTP proxy too: a model new to every replica, and one a handle's call loaded.
    for model in ("m4", "m1"):
        answers = set()
        for _ in range(12):
            status, _, body = fetch(port, "/aff", headers={"serve_multiplexed_model_id": model})
            assert status == 200, body
            answers.add(tuple(json.loads(body)))
        assert len(answers) == 1, f"{model}'s requests went to {answers}"
    # The controller learns which replica holds which model; a new handle (another process's,
    # say) routes by that too.
    from oxray.serve.handle import forget_routers

    forget_routers()
    served = {handle.options(multiplexed_model_id="m1").remote(None).result() for _ in range(12)}
    assert len(served) == 1, served


def test_multiplexed_refuses_sync_functions_and_bad_limits(clean_serve):
    with pytest.raises(TypeError, match="async functions"):

        @serve.multiplexed
        def load(model_id):
            return model_id

    with pytest.raises(ValueError, match="max_num_models_per_replica=0"):
        serve.multiplexed(max_num_models_per_replica=0)


def test_a_fastapi_websocket_echoes_through_the_proxy(port):
    import asyncio

    import websockets
    from fastapi import FastAPI, WebSocket, WebSocketDisconnect

    app = FastAPI()

    @serve.deployment
    @serve.ingress(app)
    class Chat:
        def __init__(self):
            self.closed = []

        @app.websocket("/ws")
        async def chat(self, ws: WebSocket):
            await ws.accept()
            try:
                while True:
                    text = await ws.receive_text()
                    if text == "bye":
                        await ws.close(code=1000)
                        return
                    await ws.send_text(f"echo: {text}")
                    await ws.send_bytes(text.encode()[::-1])
            except WebSocketDisconnect as e:
                self.closed.append(e.code)

        @app.get("/closed")
        def closed_codes(self):
            return self.closed

    serve.run(Chat.bind(), name="chat", route_prefix="/chat")

    async def talk():
        async with websockets.connect(f"ws://127.0.0.1:{port}/chat/ws") as ws:
            await ws.send("hi")
            assert await ws.recv() == "echo: hi"
            assert await ws.recv() == b"ih"
            await ws.send("bye")
            with pytest.raises(websockets.ConnectionClosedOK):
                await ws.recv()
        # A client that leaves without a close frame's answer: the app hears a disconnect.
        ws = await websockets.connect(f"ws://127.0.0.1:{port}/chat/ws")
        await ws.send("once")
        assert await ws.recv() == "echo: once"
        await ws.close()

    asyncio.run(talk())
    from oxray_testutil import wait_until

    closed = wait_until(
        "the app to hear the second client leave",
        lambda: (lambda r: r[0] == 200 and json.loads(r[2]))(fetch(port, "/chat/closed")),
        timeout=30,
    )
    assert closed == [1000]


def test_two_requests_with_the_same_request_id_keep_their_own_streamed_bodies(port):
    from fastapi import FastAPI
    from fastapi.responses import StreamingResponse

    app = FastAPI()

    @serve.deployment(max_ongoing_requests=4)
    @serve.ingress(app)
    class Echo:
        @app.get("/{word}")
        def stream(self, word: str):
            async def chunks():
                for i in range(20):
                    yield f"{word}{i};".encode()

            return StreamingResponse(chunks(), media_type="text/plain")

    serve.run(Echo.bind(), name="same-id", route_prefix="/same")
    bodies = {}

    def get(word):
        bodies[word] = fetch(port, f"/same/{word}", headers={"x-request-id": "shared-id"})

    threads = [threading.Thread(target=get, args=(w,)) for w in ("left", "right")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for word in ("left", "right"):
        status, headers, body = bodies[word]
        assert (status, headers["x-request-id"]) == (200, "shared-id")
        assert body.decode() == "".join(f"{word}{i};" for i in range(20))


def test_a_config_with_settings_oxray_does_not_carry_out_is_refused_by_name():
    from oxray._native import check_serve_config

    check_serve_config(json.dumps({"applications": [{"import_path": "m:app"}]}))
    with pytest.raises(ValueError, match="target_capacity"):
        check_serve_config(json.dumps({"target_capacity": 50, "applications": []}))
    with pytest.raises(ValueError, match="logging_config.log_level"):
        check_serve_config(json.dumps({"logging_config": {"log_level": "LOUD"}, "applications": []}))


def test_https_with_rays_ssl_options(clean_serve, tmp_path):
    import http.client
    import ssl

    from pki_testutil import write_test_pki

    with pytest.raises(Exception, match="cannot read ssl_certfile .*nowhere.pem"):
        serve.start(http_options={"port": free_port(), "ssl_keyfile": "nowhere.key", "ssl_certfile": "nowhere.pem"})
    pki = write_test_pki(tmp_path)
    port = free_port()
    serve.start(http_options={"port": port, "ssl_keyfile": pki["key"], "ssl_certfile": pki["cert"]})

    @serve.deployment
    def scheme(request):
        return request.url.scheme

    serve.run(scheme.bind(), name="tls", route_prefix="/tls")
    trusted = ssl.create_default_context(cafile=pki["ca"])
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=trusted, timeout=30)
    conn.request("GET", "/tls")
    reply = conn.getresponse()
    assert (reply.status, reply.read()) == (200, b"https")
    conn.close()
    # A client that does not trust the certificate's CA refuses it; plain HTTP gets no answer.
    stranger = ssl.create_default_context(cafile=pki["other_ca"])
    with pytest.raises(ssl.SSLCertVerificationError):
        http.client.HTTPSConnection("127.0.0.1", port, context=stranger, timeout=30).request("GET", "/tls")
    with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError, http.client.BadStatusLine)):
        fetch(port, "/tls")


def test_an_ingress_apps_lifespan_runs_when_its_replica_starts_and_stops(port, tmp_path):
    from contextlib import asynccontextmanager

    from fastapi import FastAPI, Request

    stopped = str(tmp_path / "stopped")

    @asynccontextmanager
    async def lifespan(app):
        yield {"model": "loaded at startup"}
        with open(stopped, "w") as f:
            f.write("shut down")

    app = FastAPI(lifespan=lifespan)

    @serve.deployment
    @serve.ingress(app)
    class Api:
        @app.get("/")
        def model(self, request: Request):
            return request.state.model

    serve.run(Api.bind(), name="life", route_prefix="/life")
    assert fetch(port, "/life/")[::2] == (200, b'"loaded at startup"')
    serve.delete("life")  # waits for the replica to stop
    with open(stopped) as f:
        assert f.read() == "shut down"

    @asynccontextmanager
    async def broken(app):
        raise RuntimeError("the model file is missing")
        yield

    bad = FastAPI(lifespan=broken)

    @serve.deployment(max_constructor_retry_count=1)
    @serve.ingress(bad)
    class Bad:
        @bad.get("/")
        def never(self):
            return "unreachable"

    with pytest.raises(RuntimeError, match="the model file is missing"):
        serve.run(Bad.bind(), name="bad", route_prefix="/bad")


def test_logging_config_of_a_deployment_an_application_and_serve(port, tmp_path):
    import logging

    dirs = {name: str(tmp_path / name) for name in ("own", "app", "serve")}

    @serve.deployment(
        ray_actor_options={"num_cpus": 0},
        logging_config={"encoding": "JSON", "logs_dir": dirs["own"], "additional_log_standard_attrs": ["funcName"]},
    )
    def own(request):
        logging.getLogger("ray.serve").info("said by own")
        return "own"

    @serve.deployment(ray_actor_options={"num_cpus": 0})
    def app_level(request):
        logging.getLogger("ray.serve").info("said by app_level")
        return "app_level"

    @serve.deployment(ray_actor_options={"num_cpus": 0})
    def serve_level(request):
        logging.getLogger("ray.serve").info("not written at WARNING")
        logging.getLogger("ray.serve").warning("warned by serve_level")
        return "serve_level"

    serve.start(http_options={"port": port}, logging_config={"log_level": "WARNING", "logs_dir": dirs["serve"]})
    serve.run(own.bind(), name="own", route_prefix="/own")
    serve.run(
        app_level.bind(),
        name="app",
        route_prefix="/app",
        logging_config={"enable_access_log": False, "logs_dir": dirs["app"]},
    )
    serve.run(serve_level.bind(), name="serve", route_prefix="/serve")
    for path in ("/own", "/app", "/serve"):
        assert fetch(port, path)[0] == 200

    def log_of(name):
        import os

        directory = dirs[name]
        files = os.listdir(directory) if os.path.isdir(directory) else []
        return "".join(open(os.path.join(directory, f)).read() for f in files)

    own_lines = wait_until("own's log", lambda: log_of("own").count("\n") >= 2 and log_of("own"), timeout=30)
    records = [json.loads(line) for line in own_lines.splitlines()]
    said = next(r for r in records if r["message"] == "said by own")
    assert (said["deployment"], said["application"], said["levelname"]) == ("own", "own", "INFO")
    assert said["funcName"] == "own"
    assert any(r["message"].startswith("GET /own 200") for r in records), records
    app_log = wait_until("app_level's log", lambda: "said by app_level" in log_of("app") and log_of("app"), timeout=30)
    assert "GET /app" not in app_log, "access lines are off for the application"
    serve_log = wait_until("serve_level's log", lambda: "warned by serve_level" in log_of("serve") and log_of("serve"))
    assert "not written at WARNING" not in serve_log and "GET /serve" not in serve_log

    with pytest.raises(ValueError, match="Got 'XML' for encoding"):
        serve.deployment(logging_config={"encoding": "XML"})(own.func_or_class)
    with pytest.raises(ValueError, match="extra inputs are not permitted"):
        serve.run(own.bind(), name="own", route_prefix="/own", logging_config={"colour": "red"})
