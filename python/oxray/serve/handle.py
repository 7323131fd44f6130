"""`DeploymentHandle` and `DeploymentResponse`: calling a deployment from a driver
or from another replica. The handle routes in the caller's process, as Ray's
does: power of two choices over the replicas serving, by the calls this process
has in flight to each. A response passed into another call is handed over as
its object reference, so the value never comes back through the caller."""

from __future__ import annotations

import collections
import random
import threading
import time
import uuid
from typing import Any, Optional

import oxray as ray
from oxray.serve.exceptions import BackPressureError, RayServeException, RequestCancelledError

CONTROLLER_NAME = "SERVE_CONTROLLER_ACTOR"
SERVE_NAMESPACE = "serve"
# The keyword a call's model id travels under (the replica takes it out before the user's code).
MODEL_ID_KWARG = "__serve_multiplexed_model_id__"
# How long a handle trusts its list of serving replicas before asking the controller again.
REPLICAS_REFRESH_S = 1.0
# How often while calls wait here for room.
WAITING_REFRESH_S = 0.1
# How long a call waits for its deployment to have a serving replica.
NO_REPLICA_TIMEOUT_S = 60.0


def replica_actor_name(app: str, deployment: str, replica: str) -> str:
    return f"SERVE_REPLICA::{app}#{deployment}#{replica}"


def controller():
    try:
        return ray.get_actor(CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
    except ValueError:
        raise RayServeException(
            "There is no Serve instance running on this Ray cluster (call serve.run first)."
        ) from None


class _Router:
    """The serving replicas of one deployment, this process's calls in flight to each, and the
    calls waiting here because every replica has `max_ongoing_requests` of this process's calls
    (as Ray's router holds them): a dispatcher thread sends each to the first replica with room,
    a new replica included."""

    def __init__(self, app: str, deployment: str):
        self.app, self.deployment = app, deployment
        self.source = f"handle-{uuid.uuid4().hex[:12]}"
        self.lock = threading.Lock()
        # Serving replica id -> its actor.
        self.actors: dict = {}
        # Replica -> the responses sent to it and not known to be finished.
        self.sent: dict = {}
        self.waiting: collections.deque = collections.deque()
        self.dispatcher = None
        self.fetched = 0.0
        self.refreshing = False
        self.max_ongoing = None
        self.max_queued = -1
        # How often this handle reports its load to the deployment's autoscaler (None: not autoscaled).
        self.report_every_s = None
        self.metrics = None
        # Replica -> the multiplexed models it holds (the controller's list), and model -> the
        # replica this handle sent it to last.
        self.models: dict = {}
        self.model_home: dict = {}

    def load(self) -> int:
        """Calls in flight from this process plus those waiting here (the autoscaler's metric)."""
        with self.lock:
            return sum(len(v) for v in self.sent.values()) + len(self.waiting)

    def prune(self, wait_s: float = 0.0) -> None:
        """Forgets the calls that finished, waiting up to `wait_s` for one. A response nobody
        collects (fire and forget, or one passed into another call) is otherwise counted as in
        flight for ever: the autoscaler would never scale down, and the router would hold its
        arguments."""
        with self.lock:
            refs = {r._ref: (rid, r) for rid, sent in self.sent.items() for r in sent if r._ref is not None}
        if not refs:
            return
        finished, _ = ray.wait(list(refs), num_returns=1, timeout=wait_s)
        if finished:
            finished, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
        for ref in finished:
            self.done(*refs[ref])

    def refresh(self, fresh: bool = False) -> None:
        """Learns the serving replicas: waiting for them when none is known (or `fresh`: one just
        died), else in the background once the list is `REPLICAS_REFRESH_S` old, so that a call
        (say, from an async replica's event loop) never waits on the controller for it."""
        if not fresh and self.actors:
            if time.monotonic() - self.fetched > REPLICAS_REFRESH_S and not self.refreshing:
                self.refreshing = True
                threading.Thread(target=self._refresh_in_background, name="serve-replicas", daemon=True).start()
            return
        self._fetch()

    def _refresh_in_background(self) -> None:
        try:
            self._fetch()
        except Exception:  # noqa: BLE001 - kept as it was; the next call after the period asks again
            pass
        finally:
            self.refreshing = False

    def _fetch(self) -> None:
        # The controller hands over the replicas' actors, not their names: replica ids repeat when
        # an application is deleted and deployed again, and a handle cached by id would be the
        # killed actor's.
        actors, self.report_every_s, self.max_ongoing, self.max_queued, state, models = ray.get(
            controller().wait_serving.remote(
                self.app, self.deployment, NO_REPLICA_TIMEOUT_S, self.source, self.load() + 1
            )
        )
        if self.report_every_s is not None:
            _LoadReporter.watch(self)
        if not actors:
            raise RayServeException(
                f"Deployment {self.deployment!r} of application {self.app!r} has no running replica "
                f"({state}); see serve.status()"
            )
        with self.lock:
            self.actors, self.fetched = dict(actors), time.monotonic()
            self.models = {rid: set(ids) for rid, ids in models.items()}

    def submit(self, response: "DeploymentResponse", fresh: bool = False) -> None:
        if self.metrics is None:
            self.metrics = _handle_metrics(self)
        self.metrics.request()
        self.refresh(fresh)
        with self.lock:
            if not self.waiting and self._send(response):
                return
            if 0 <= self.max_queued <= len(self.waiting):
                raise BackPressureError(num_queued_requests=len(self.waiting), max_queued_requests=self.max_queued)
            self.waiting.append(response)
            if self.dispatcher is None:
                self.dispatcher = threading.Thread(target=self._dispatch, name="serve-router", daemon=True)
                self.dispatcher.start()

    def _send(self, response: "DeploymentResponse") -> bool:
        """Sends `response`'s call to a replica with room (power of two choices); False if none has.
        Called with the lock held."""
        room = [r for r in self.actors if self.max_ongoing is None or len(self.sent.get(r, ())) < self.max_ongoing]
        if not room:
            return False
        model = response._kwargs.get(MODEL_ID_KWARG)
        if model:
            # As Ray's router: a multiplexed model's call goes to a replica that holds it, if one has
            # room: the one this handle sent it to last, else any the controller lists.
            home = self.model_home.get(model)
            holding = [home] if home in room else [r for r in room if model in self.models.get(r, ())]
            room = holding or room
        rid = min(random.sample(room, min(2, len(room))), key=lambda r: len(self.sent.get(r, ())))
        if model:
            self.model_home[model] = rid
        # Sent first, counted after: a call that cannot be sent (an argument that does not
        # pickle) must not hold a slot of the replica for ever.
        response._send_to(rid, self.actors[rid])
        self.sent.setdefault(rid, []).append(response)
        return True

    def forget(self, rid: str) -> None:
        """A replica found dead: no call goes there until the controller lists it again."""
        with self.lock:
            if self.actors.pop(rid, None) is not None:
                self.fetched = 0.0

    def done(self, rid: str, response: "DeploymentResponse") -> None:
        with self.lock:
            sent = self.sent.get(rid)
            if sent is not None and response in sent:
                sent.remove(response)

    def _dispatch(self) -> None:
        """Sends the waiting calls as replicas finish calls or appear; ends when none waits."""
        while True:
            with self.lock:
                if not self.waiting:
                    self.dispatcher = None
                    return
            self.prune(WAITING_REFRESH_S)
            try:
                # Calls wait for room: a replica the autoscaler just started should take one now,
                # not at the next background renewal.
                if time.monotonic() - self.fetched > WAITING_REFRESH_S:
                    self._fetch()
            except Exception as e:  # noqa: BLE001 - no replica at all: the waiting calls fail with it
                with self.lock:
                    waiting, self.waiting = list(self.waiting), collections.deque()
                for response in waiting:
                    response._fail(e)
                continue
            with self.lock:
                while self.waiting:
                    try:
                        if not self._send(self.waiting[0]):
                            break
                    except Exception as e:  # noqa: BLE001 - this call cannot be sent: it fails, the rest go on
                        self.waiting[0]._fail(e)
                    self.waiting.popleft()

    def cancel(self, response: "DeploymentResponse") -> bool:
        """Takes a call that waits here out of the queue; False once it was sent."""
        with self.lock:
            if response in self.waiting:
                self.waiting.remove(response)
                return True
            return False


def _handle_metrics(router: _Router):
    """The router's series; its gauges read it through a weak reference (a forgotten router's
    read as empty)."""
    import weakref

    from oxray.serve._private.metrics import HandleMetrics

    ref = weakref.ref(router)

    def queued():
        r = ref()
        return len(r.waiting) if r is not None else 0

    def ongoing():
        r = ref()
        return 0 if r is None else sum(len(v) for v in list(r.sent.values()))

    return HandleMetrics(router.app, router.deployment, router.source, queued, ongoing)


class _LoadReporter:
    """Reports each autoscaled deployment's calls in flight from this process to the controller,
    every `metrics_interval_s` (zeros too: an idle handle lets the deployment scale down)."""

    lock = threading.Lock()
    routers: list = []
    thread = None

    @classmethod
    def watch(cls, router: "_Router") -> None:
        with cls.lock:
            if router not in cls.routers:
                cls.routers.append(router)
            if cls.thread is None:
                cls.thread = threading.Thread(target=cls._run, name="serve-handle-load", daemon=True)
                cls.thread.start()

    @classmethod
    def _run(cls) -> None:
        while True:
            with cls.lock:
                routers = list(cls.routers)
            for router in routers:
                try:
                    router.prune()
                    controller().record_requests.remote(router.app, router.deployment, router.source, router.load())
                except Exception:  # noqa: BLE001 - Serve shut down: nothing to report to
                    with cls.lock:
                        cls.routers = [r for r in cls.routers if r is not router]
            every = min((r.report_every_s for r in routers if r.report_every_s), default=1.0)
            time.sleep(every)


_routers: dict = {}
_routers_lock = threading.Lock()


def _router(app: str, deployment: str) -> _Router:
    with _routers_lock:
        router = _routers.get((app, deployment))
        if router is None:
            router = _routers[(app, deployment)] = _Router(app, deployment)
        return router


def forget_routers() -> None:
    with _routers_lock:
        _routers.clear()
    with _LoadReporter.lock:
        _LoadReporter.routers = []


def _unwrap(value):
    return value._object_ref() if isinstance(value, DeploymentResponse) else value


class DeploymentResponse:
    """A call's future result: `.result(timeout_s=)`, or `await` it. Its call is sent at once when
    a replica has room, else when one does (see `_Router`)."""

    def __init__(self, router: _Router, method: str, args: tuple, kwargs: dict):
        self._router, self._method, self._args, self._kwargs = router, method, args, kwargs
        self._replica = None
        self._actor = None
        self._ref = None
        self._error = None
        self._cancelled = False
        self._ready = threading.Event()
        router.submit(self)

    def _send_to(self, rid: str, actor) -> None:
        self._ref = actor.handle_request.remote(self._method, *self._args, **self._kwargs)
        self._replica, self._actor = rid, actor
        self._ready.set()

    def _fail(self, error: BaseException) -> None:
        self._error = error
        self._ready.set()

    def _finished(self) -> None:
        if self._replica is not None:
            self._router.done(self._replica, self)
            self._replica = None

    def _sent(self, timeout_s: Optional[float]):
        if not self._ready.wait(timeout_s):
            raise TimeoutError(
                f"Timed out resolving to ObjectRef: the call waited {timeout_s} s for a replica with room "
                "(max_ongoing_requests)"
            )
        if self._error is not None:
            raise self._error
        return self._ref

    def _object_ref(self):
        return self._sent(None)

    def result(self, *, timeout_s: Optional[float] = None, _skip_asyncio_check: bool = False) -> Any:
        started = time.monotonic()

        def left():
            return None if timeout_s is None else max(0.0, timeout_s - (time.monotonic() - started))

        timed_out = False
        try:
            ref = self._sent(timeout_s)
            try:
                return ray.get(ref, timeout=left())
            except ray.exceptions.RayActorError as e:
                # The replica died with the call: the call goes once more, to a replica that serves,
                # and a dead one is replaced now (not at its next health check).
                replica, actor = self._replica, self._actor
                self._finished()
                self._router.forget(replica)
                if isinstance(e, ray.exceptions.ActorDiedError):
                    app, deployment = self._router.app, self._router.deployment
                    ray.get(controller().replica_unreachable.remote(app, deployment, replica, actor))
                self._ready.clear()
                self._router.submit(self, fresh=True)
                return ray.get(self._sent(left()), timeout=left())
        except TimeoutError:
            timed_out = True  # the call still waits here or runs in its replica: it stays counted
            raise
        finally:
            if not timed_out:
                self._finished()

    def __await__(self):
        try:
            if not self._ready.is_set():
                import asyncio

                yield from asyncio.get_running_loop().run_in_executor(None, self._ready.wait).__await__()
            return (yield from self._sent(None).__await__())
        finally:
            self._finished()

    def cancel(self) -> None:
        """Best effort, as Ray's: a call still waiting in this process is never sent (waiting on it
        raises `RequestCancelledError`); a sent one is cancelled in its replica."""
        self._cancelled = True
        if self._router.cancel(self):
            self._fail(RequestCancelledError(f"the call to {self._router.deployment!r}.{self._method} was cancelled"))
        elif self._ref is not None:
            ray.cancel(self._ref)

    def cancelled(self) -> bool:
        return self._cancelled


class DeploymentResponseGenerator(DeploymentResponse):
    """The results of a call to a generator method (`handle.options(stream=True)`), as they are
    made: iterate it (`for`), or `async for` it in a deployment. The replica runs the method as a
    streaming actor call, so each result comes as soon as the method yields it."""

    def _send_to(self, rid: str, actor) -> None:
        method = actor.handle_request_streaming.options(num_returns="streaming")
        self._ref = method.remote(self._method, *self._args, **self._kwargs)
        self._replica, self._actor = rid, actor
        self._ready.set()

    def result(self, *args, **kwargs):
        raise TypeError("a DeploymentResponseGenerator has no single result: iterate it (for / async for)")

    def __await__(self):
        raise TypeError("a DeploymentResponseGenerator cannot be awaited: iterate it with `async for`")

    def __iter__(self):
        return self

    def __next__(self) -> Any:
        generator = self._sent(None)
        try:
            ref = next(generator)
        except StopIteration:
            self._finished()
            raise
        return ray.get(ref)

    def __aiter__(self):
        return self

    async def __anext__(self) -> Any:
        if not self._ready.is_set():
            import asyncio

            await asyncio.get_running_loop().run_in_executor(None, self._ready.wait)
        generator = self._sent(None)
        try:
            ref = await generator.__anext__()
        except StopAsyncIteration:
            self._finished()
            raise
        return await ref


class DeploymentHandle:
    """Calls a deployment: `handle.remote(...)`, `handle.method.remote(...)`,
    `handle.options(method_name=..., stream=..., multiplexed_model_id=...)`."""

    def __init__(
        self,
        deployment_name: str,
        app_name: str,
        method_name: str = "__call__",
        model_id: str = "",
        stream: bool = False,
    ):
        self.deployment_name = deployment_name
        self.app_name = app_name
        self._method = method_name
        self._model_id = model_id
        self._stream = stream

    def options(
        self,
        *,
        method_name: Optional[str] = None,
        stream: Optional[bool] = None,
        multiplexed_model_id: str = "",
        use_new_handle_api: bool = True,
    ) -> "DeploymentHandle":
        if stream is not None and not isinstance(stream, bool):
            raise TypeError(f"stream={stream!r}: expected True or False")
        if not isinstance(multiplexed_model_id, str):
            raise TypeError(f"multiplexed_model_id={multiplexed_model_id!r}: expected a string")
        return DeploymentHandle(
            self.deployment_name,
            self.app_name,
            method_name or self._method,
            multiplexed_model_id or self._model_id,
            self._stream if stream is None else stream,
        )

    def __getattr__(self, name: str) -> "DeploymentHandle":
        if name.startswith("_"):
            raise AttributeError(name)
        return DeploymentHandle(self.deployment_name, self.app_name, name, self._model_id, self._stream)

    def remote(self, *args, **kwargs) -> DeploymentResponse:
        args = tuple(_unwrap(a) for a in args)
        kwargs = {k: _unwrap(v) for k, v in kwargs.items()}
        if self._model_id:
            kwargs[MODEL_ID_KWARG] = self._model_id
        kind = DeploymentResponseGenerator if self._stream else DeploymentResponse
        return kind(_router(self.app_name, self.deployment_name), self._method, args, kwargs)

    def __reduce__(self):
        return (DeploymentHandle, (self.deployment_name, self.app_name, self._method, self._model_id, self._stream))

    def __repr__(self) -> str:
        return f"DeploymentHandle(deployment='{self.deployment_name}', app='{self.app_name}')"
