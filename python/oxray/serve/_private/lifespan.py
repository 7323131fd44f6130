"""The ASGI lifespan of an ingress app in its replica, as Ray's replica runs it: `startup` when the
replica starts (an app that fails it fails the replica's constructor, so the deployment reports
the error), `shutdown` when it stops gracefully, after its requests drained. What the startup puts
in the lifespan `state` reaches every request's scope (Starlette's `request.state`), as uvicorn
does. An app that does not speak the lifespan protocol is served without one."""

from __future__ import annotations

import asyncio
import concurrent.futures


class LifespanFailed(RuntimeError):
    """The app's lifespan startup or shutdown reported failure."""


class Lifespan:
    def __init__(self, app, loop: asyncio.AbstractEventLoop):
        self.app, self.loop = app, loop
        self.state: dict = {}
        self.supported = True
        self._inbox = None
        self._replies: dict = {}
        self._task = None

    def startup(self, timeout_s: float = 600.0) -> None:
        """Runs the app's startup on the replica's loop and waits for it."""
        asyncio.run_coroutine_threadsafe(self._begin(), self.loop).result(timeout_s)
        self._exchange("startup", timeout_s)

    def shutdown(self, timeout_s: float = 60.0) -> None:
        if self.supported and self._task is not None:
            self._exchange("shutdown", timeout_s)

    async def _begin(self) -> None:
        self._inbox = asyncio.Queue()
        for phase in ("startup", "shutdown"):
            self._replies[phase] = self.loop.create_future()
        self._task = self.loop.create_task(self._run())

    async def _run(self) -> None:
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": self.state}
        try:
            await self.app(scope, self._receive, self._send)
        except BaseException as e:  # noqa: BLE001 - an app without lifespan support raises on the scope
            startup = self._replies["startup"]
            if not startup.done():
                # Failing before it answered startup: it does not speak lifespan (uvicorn's "auto").
                self.supported = False
                startup.set_result(None)
            else:
                shutdown = self._replies["shutdown"]
                if not shutdown.done():
                    shutdown.set_exception(LifespanFailed(f"the app's lifespan raised: {e!r}"))
        finally:
            for reply in self._replies.values():
                if not reply.done():
                    reply.set_result(None)

    async def _receive(self) -> dict:
        return await self._inbox.get()

    async def _send(self, message: dict) -> None:
        kind = message["type"]
        for phase in ("startup", "shutdown"):
            reply = self._replies[phase]
            if kind == f"lifespan.{phase}.complete" and not reply.done():
                reply.set_result(None)
            elif kind == f"lifespan.{phase}.failed" and not reply.done():
                reply.set_exception(LifespanFailed(f"the app's lifespan {phase} failed: {message.get('message', '')}"))

    def _exchange(self, phase: str, timeout_s: float) -> None:
        async def ask():
            await self._inbox.put({"type": f"lifespan.{phase}"})
            return await self._replies[phase]

        try:
            asyncio.run_coroutine_threadsafe(ask(), self.loop).result(timeout_s)
        except concurrent.futures.TimeoutError:
            raise LifespanFailed(f"the app's lifespan {phase} did not finish within {timeout_s:g} s") from None
