"""`DeploymentHandle` and `DeploymentResponse`: calling a deployment from a driver
or from another replica. The handle routes in the caller's process, as Ray's
does: power of two choices over the replicas serving, by the calls this process
has in flight to each. A response passed into another call is handed over as
its object reference, so the value never comes back through the caller."""

from __future__ import annotations

import random
import threading
import time
import uuid
from typing import Any, Optional

import oxray as ray
from oxray.serve.exceptions import RayServeException

CONTROLLER_NAME = "SERVE_CONTROLLER_ACTOR"
SERVE_NAMESPACE = "serve"
# How long a handle trusts its list of serving replicas before asking the controller again.
REPLICAS_REFRESH_S = 1.0
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
    """The serving replicas of one deployment, and this process's calls in flight to each."""

    def __init__(self, app: str, deployment: str):
        self.app, self.deployment = app, deployment
        self.source = f"handle-{uuid.uuid4().hex[:12]}"
        self.lock = threading.Lock()
        self.replicas: list = []
        self.actors: dict = {}
        self.in_flight: dict = {}
        self.fetched = 0.0
        # How often this handle reports its load to the deployment's autoscaler (None: not autoscaled).
        self.report_every_s = None

    def load(self) -> int:
        with self.lock:
            return sum(self.in_flight.values())

    def _refresh(self) -> None:
        ids, self.report_every_s = ray.get(
            controller().wait_serving.remote(
                self.app, self.deployment, NO_REPLICA_TIMEOUT_S, self.source, self.load() + 1
            )
        )
        if self.report_every_s is not None:
            _LoadReporter.watch(self)
        if not ids:
            raise RayServeException(
                f"Deployment {self.deployment!r} of application {self.app!r} has no running replica "
                f"(waited {NO_REPLICA_TIMEOUT_S:g} s); see serve.status()"
            )
        with self.lock:
            self.replicas = ids
            self.fetched = time.monotonic()
            for rid in ids:
                if rid not in self.actors:
                    self.actors[rid] = ray.get_actor(
                        replica_actor_name(self.app, self.deployment, rid), namespace=SERVE_NAMESPACE
                    )

    def choose(self, fresh: bool = False):
        if fresh or not self.replicas or time.monotonic() - self.fetched > REPLICAS_REFRESH_S:
            self._refresh()
        with self.lock:
            candidates = random.sample(self.replicas, min(2, len(self.replicas)))
            rid = min(candidates, key=lambda r: self.in_flight.get(r, 0))
            self.in_flight[rid] = self.in_flight.get(rid, 0) + 1
            return rid, self.actors[rid]

    def done(self, rid: str) -> None:
        with self.lock:
            self.in_flight[rid] = max(0, self.in_flight.get(rid, 0) - 1)


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
    """A call's future result: `.result(timeout_s=)`, or `await` it. It counts as in flight to
    its replica (for routing) until its result is taken or it is dropped."""

    def __init__(self, router: _Router, method: str, args: tuple, kwargs: dict):
        self._router, self._method, self._args, self._kwargs = router, method, args, kwargs
        self._replica = None
        self._ref = self._send(fresh=False)

    def _send(self, fresh: bool):
        self._finished()
        self._replica, actor = self._router.choose(fresh=fresh)
        return actor.handle_request.remote(self._method, *self._args, **self._kwargs)

    def _finished(self) -> None:
        if self._replica is not None:
            self._router.done(self._replica)
            self._replica = None

    def _object_ref(self):
        return self._ref

    def result(self, *, timeout_s: Optional[float] = None, _skip_asyncio_check: bool = False) -> Any:
        try:
            try:
                return ray.get(self._ref, timeout=timeout_s)
            except ray.exceptions.RayActorError:
                # The replica died with the call: once more, on a replica that serves now.
                self._ref = self._send(fresh=True)
                return ray.get(self._ref, timeout=timeout_s)
        finally:
            self._finished()

    def __await__(self):
        try:
            return (yield from self._ref.__await__())
        finally:
            self._finished()

    def cancel(self) -> None:
        ray.cancel(self._ref)

    def __del__(self):
        self._finished()


class DeploymentHandle:
    """Calls a deployment: `handle.remote(...)`, `handle.method.remote(...)`,
    `handle.options(method_name=...)`."""

    def __init__(self, deployment_name: str, app_name: str, method_name: str = "__call__"):
        self.deployment_name = deployment_name
        self.app_name = app_name
        self._method = method_name

    def options(
        self,
        *,
        method_name: Optional[str] = None,
        stream: bool = False,
        multiplexed_model_id: str = "",
        use_new_handle_api: bool = True,
    ) -> "DeploymentHandle":
        if stream:
            raise NotImplementedError("DeploymentHandle.options(stream=True): oxray's Serve does not stream yet")
        if multiplexed_model_id:
            raise NotImplementedError(
                "DeploymentHandle.options(multiplexed_model_id=...): oxray's Serve does not multiplex models yet"
            )
        return DeploymentHandle(self.deployment_name, self.app_name, method_name or self._method)

    def __getattr__(self, name: str) -> "DeploymentHandle":
        if name.startswith("_"):
            raise AttributeError(name)
        return DeploymentHandle(self.deployment_name, self.app_name, name)

    def remote(self, *args, **kwargs) -> DeploymentResponse:
        args = tuple(_unwrap(a) for a in args)
        kwargs = {k: _unwrap(v) for k, v in kwargs.items()}
        return DeploymentResponse(_router(self.app_name, self.deployment_name), self._method, args, kwargs)

    def __reduce__(self):
        return (DeploymentHandle, (self.deployment_name, self.app_name, self._method))

    def __repr__(self) -> str:
        return f"DeploymentHandle(deployment='{self.deployment_name}', app='{self.app_name}')"
