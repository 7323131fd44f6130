"""``create_remote_signal_actor``: a signal actor built with the ``ray`` module a test passes."""

import asyncio

from _ray_compat_shim import lenient_getattr

__getattr__ = lenient_getattr(__name__)


def create_remote_signal_actor(ray):
    @ray.remote
    class SignalActor:
        def __init__(self):
            self.ready_event = asyncio.Event()

        def send(self, clear=False):
            self.ready_event.set()
            if clear:
                self.ready_event.clear()

        async def wait(self, should_wait=True):
            if should_wait:
                await self.ready_event.wait()

    return SignalActor
