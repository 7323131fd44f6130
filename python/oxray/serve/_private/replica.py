"""A replica: the actor that runs one copy of a deployment's code. It builds the
user's object (or keeps the function), calls `reconfigure(user_config)` before
it serves, runs each request (an `async def` method on the replica's event-loop
thread; HTTP requests from the node's proxy through `_private/http.py`, gRPC calls
from its gRPC proxy through `_private/grpc.py`), answers
health checks (the user's `check_health` too), and on a stop
waits for its requests to finish, then calls the user's `__del__` once. A
controller started after a head restart asks each replica it finds which
versions it runs (`recovery_info`) and adopts it."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import pickle
import threading
import time
from typing import Optional

from oxray import cloudpickle
from oxray.serve._private.grpc import GrpcCalls
from oxray.serve._private.http import HttpServer, WebSockets
from oxray.serve._private.metrics import ReplicaMetrics
from oxray.serve._private.replica_log import ReplicaLog, file_name
from oxray.serve.context import ReplicaContext, ReplicaID, _multiplexed_model_id, set_replica_context
from oxray.serve.exceptions import RayServeException
from oxray.serve.handle import MODEL_ID_KWARG


class ServeReplica:
    def __init__(self, app: str, deployment: str, replica_id: str):
        self.replica_id = ReplicaID(replica_id, deployment, app)
        self.target = None
        self.is_function = False
        self.ongoing = 0
        self.idle = threading.Condition()
        self.loop = None
        self.loop_lock = threading.Lock()
        self.deleted = False
        self.http = HttpServer(self)
        self.websockets = WebSockets(self.http)
        self.grpc = GrpcCalls(self)
        self.started_at = time.time()
        # The code and config versions it runs, for a controller that adopts it after a restart.
        self.versions = ("", "")
        self.metrics = ReplicaMetrics(app, deployment, replica_id, lambda: self.ongoing)
        self.log = ReplicaLog(app, deployment, replica_id)
        from oxray.serve import multiplex

        multiplex._on_models_changed = self._report_models

    def _report_models(self, model_ids: list) -> None:
        """Tells the controller which multiplexed models this replica holds (its routers send a
        model's requests here first)."""
        from oxray.serve.handle import controller

        replica = self.replica_id
        controller().record_multiplexed_models.remote(
            replica.app_name, replica.deployment_name, replica.unique_id, model_ids
        )

    def initialize(
        self,
        definition: bytes,
        arguments: bytes,
        user_config,
        has_user_config: bool,
        versions: tuple = ("", ""),
        logging_config: Optional[dict] = None,
    ) -> dict:
        """Builds the user's object; its constructor's exception fails the replica (the controller
        reports the traceback). `versions`: the code and config versions it runs; `logging_config`:
        Ray's `LoggingConfig` for its log. Returns where it runs (`identity`)."""
        self.log.open(logging_config)
        func_or_class = cloudpickle.loads(definition)
        args, kwargs = cloudpickle.loads(arguments)
        set_replica_context(ReplicaContext(self.replica_id, None))
        if inspect.isclass(func_or_class):
            self.target = func_or_class(*args, **kwargs)
        else:
            self.target, self.is_function = func_or_class, True
        set_replica_context(ReplicaContext(self.replica_id, self.target))
        self.http.prepare(self.target, self.is_function)
        if has_user_config:
            self.reconfigure(user_config)
        self.versions = tuple(versions)
        self.metrics.starts.inc()
        return self.identity()

    def identity(self) -> dict:
        """Where the replica runs, as Ray's replica details show it."""
        import os

        from oxray import get_runtime_context

        context = get_runtime_context()
        return {
            "node_id": context.get_node_id(),
            "node_ip": os.environ.get("OXRAY_AGENT_ADDRESS", "127.0.0.1:0").rsplit(":", 1)[0],
            "worker_id": context.get_worker_id(),
            "pid": os.getpid(),
            "log_file_path": self._log_file_path(),
        }

    def reconfigure(self, user_config, config_version=None) -> None:
        method = None if self.is_function else getattr(self.target, "reconfigure", None)
        if method is None:
            raise RayServeException(
                f"user_config specified but deployment {self.replica_id.deployment_name!r} is missing a "
                "reconfigure method"
            )
        self._run(method, (user_config,), {})
        if config_version is not None:
            self.versions = (self.versions[0], config_version)

    def _log_file_path(self) -> str:
        """Ray's `log_file_path`: relative to the session's `logs/` when the log is there."""
        replica = self.replica_id
        default = "/serve/" + file_name(replica.app_name, replica.deployment_name, replica.unique_id)
        if self.log.path is None or self.log.path.endswith("/logs" + default):
            return default
        return self.log.path

    def recovery_info(self):
        """What a controller started after a head restart needs to adopt this replica: the
        versions it runs and when it started; None when its constructor has not finished (then
        it is stopped, and a new one started)."""
        if self.target is None:
            return None
        return {
            "code_version": self.versions[0],
            "config_version": self.versions[1],
            "started_at": self.started_at,
            "identity": self.identity(),
        }

    def _method(self, method_name: str):
        if self.is_function:
            if method_name != "__call__":
                raise RayServeException(
                    f"deployment {self.replica_id.deployment_name!r} is a function: call it with "
                    f"handle.remote(), not .{method_name}"
                )
            return self.target
        method = getattr(self.target, method_name, None)
        if method is None:
            raise RayServeException(f"deployment {self.replica_id.deployment_name!r} has no method {method_name!r}")
        return method

    @contextlib.contextmanager
    def _handle_call(self, label: str):
        """A handle's call: counted ongoing while it runs, then recorded and logged (`label` in the
        access line). A handle's call has no route (Ray's `route` tag is empty for it)."""
        with self.idle:
            self.ongoing += 1
        started, error = time.perf_counter(), None
        try:
            yield
        except GeneratorExit:
            # A stream its caller closed early: cancelled, as an HTTP client gone is (no traceback).
            error = asyncio.CancelledError("the stream was closed before its end")
            raise
        except BaseException as e:
            error = e
            raise
        finally:
            with self.idle:
                self.ongoing -= 1
                self.idle.notify_all()
            access = f"CALL {label} {'OK' if error is None else 'ERROR'}"
            self.request_finished("", (time.perf_counter() - started) * 1000, error, access, "")

    def handle_request(self, method_name: str, *args, **kwargs):
        model_id = kwargs.pop(MODEL_ID_KWARG, "")
        with self._handle_call(method_name):
            result = self._run(self._method(method_name), args, kwargs, model_id)
            if inspect.isgenerator(result) or inspect.isasyncgen(result):
                raise TypeError(
                    f"Method '{method_name}' returned a generator. You must use `handle.options(stream=True)` "
                    "to call generators on a deployment."
                )
            return result

    def handle_request_streaming(self, method_name: str, *args, **kwargs):
        """A call through `handle.options(stream=True)`: a streaming actor call yielding what the
        deployment's generator method yields (an async one runs on the replica's loop), the
        request's model id set while it runs. The request counts as ongoing until it ends."""
        model_id = kwargs.pop(MODEL_ID_KWARG, "")
        with self._handle_call(f"{method_name} (stream)"):
            result = self._run(self._method(method_name), args, kwargs, model_id)
            if inspect.isasyncgen(result):
                loop = self._event_loop()
                while True:
                    try:
                        item = asyncio.run_coroutine_threadsafe(_next_item(result, model_id), loop).result()
                    except StopAsyncIteration:
                        break
                    yield item
            elif inspect.isgenerator(result):
                while True:
                    token = _multiplexed_model_id.set(model_id)
                    try:
                        item = next(result)
                    except StopIteration:
                        break
                    finally:
                        _multiplexed_model_id.reset(token)
                    yield item
            else:
                raise TypeError(
                    f"Method '{method_name}' returned a non-generator object ({type(result).__name__}) but was "
                    "called with `handle.options(stream=True)`: call it without stream=True"
                )

    def request_finished(self, route: str, latency_ms: float, error, access: str, request_id: str) -> None:
        """A request ended: counted in the replica's metrics, and logged (`access`: what it was and
        how it ended; a failure's traceback too, a cancel's not)."""
        self.metrics.record(route, latency_ms, error)
        self.log.access(f"{access} {latency_ms:.1f}ms", request_id)
        if error is not None and not isinstance(error, asyncio.CancelledError):
            self.log.failure(error, request_id)

    # HTTP, called by the node's proxy: each returns one batch of the response, out of band.

    def handle_http(self, request) -> pickle.PickleBuffer:
        return pickle.PickleBuffer(self.http.handle(request))

    def http_next(self, request_id) -> pickle.PickleBuffer:
        return pickle.PickleBuffer(self.http.next_batch(bytes(request_id).decode()))

    def http_cancel(self, request_id) -> None:
        self.http.cancel(bytes(request_id).decode())

    def ws_open(self, request) -> pickle.PickleBuffer:
        return pickle.PickleBuffer(self.websockets.open_socket(request))

    def ws_receive(self, message) -> pickle.PickleBuffer:
        self.websockets.receive(message)
        return pickle.PickleBuffer(b"")  # a reply the proxy reads as delivered

    def ws_next(self, request_id) -> pickle.PickleBuffer:
        return pickle.PickleBuffer(self.websockets.next_batch(bytes(request_id).decode()))

    # gRPC, called by the node's gRPC proxy: each returns one batch of the answer, out of band.

    def handle_grpc(self, request) -> pickle.PickleBuffer:
        return pickle.PickleBuffer(self.grpc.handle(request))

    def grpc_next(self, stream_id) -> pickle.PickleBuffer:
        return pickle.PickleBuffer(self.grpc.next_batch(bytes(stream_id).decode()))

    def grpc_cancel(self, stream_id) -> None:
        self.grpc.cancel(bytes(stream_id).decode())

    def check_health(self) -> None:
        method = None if self.is_function else getattr(self.target, "check_health", None)
        if method is not None:
            self._run(method, (), {})

    def graceful_shutdown(self, wait_loop_s: float) -> None:
        """Waits `wait_loop_s` first, as Ray's replica does (handles still holding this replica in
        their list, refreshed every second, may send it a request meanwhile), then (checking every
        `wait_loop_s`) until no request runs, then the user's `__del__`."""
        if self.target is not None:  # one that never started never served: nothing to drain
            time.sleep(wait_loop_s)
        with self.idle:
            while self.ongoing > 0:
                self.idle.wait(wait_loop_s)
        if not self.deleted and self.http.lifespan is not None:
            try:
                self.http.lifespan.shutdown()
            except Exception as e:  # noqa: BLE001 - logged; the replica stops anyway
                self.log.failure(e)
        if not self.deleted and not self.is_function and self.target is not None:
            self.deleted = True
            destructor = getattr(type(self.target), "__del__", None)
            if destructor is not None:
                self._run(destructor, (self.target,), {})

    def _run(self, method, args: tuple, kwargs: dict, model_id: str = ""):
        """Runs user code with the request's model id set (`serve.get_multiplexed_model_id()`); a
        coroutine on the replica's loop, where it is set again (a task has its own context)."""
        token = _multiplexed_model_id.set(model_id)
        try:
            result = method(*args, **kwargs)
        finally:
            _multiplexed_model_id.reset(token)
        if inspect.isawaitable(result):
            return asyncio.run_coroutine_threadsafe(_awaited(result, model_id), self._event_loop()).result()
        return result

    def _event_loop(self):
        """The loop `async def` user code runs on: one per replica, on a thread of its own."""
        with self.loop_lock:
            if self.loop is None:
                self.loop = asyncio.new_event_loop()
                threading.Thread(target=self.loop.run_forever, name="serve-user-code", daemon=True).start()
            return self.loop


async def _awaited(awaitable, model_id: str = ""):
    _multiplexed_model_id.set(model_id)
    return await awaitable


async def _next_item(generator, model_id: str):
    _multiplexed_model_id.set(model_id)
    return await generator.__anext__()
