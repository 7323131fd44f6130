"""The public test utilities of Ray's ``ray._common.test_utils``, written for the harness
on oxray's public API. Other names are Ray internals: a test file may import them at
module level (they are placeholders then), and the tests using them are excluded."""

import asyncio
import contextlib
import inspect
import os
import socket
import subprocess
import sys
import time
import traceback
import uuid

from _ray_compat_shim import lenient_getattr

import oxray as ray

__getattr__ = lenient_getattr(__name__)


@ray.remote(num_cpus=0)
class SignalActor:
    """Coordinates tests: ``wait()`` returns once ``send()`` was called."""

    def __init__(self):
        self.ready_event = asyncio.Event()
        self.num_waiters = 0

    def send(self, clear: bool = False):
        self.ready_event.set()
        if clear:
            self.ready_event.clear()

    async def wait(self, should_wait: bool = True):
        if should_wait:
            self.num_waiters += 1
            await self.ready_event.wait()
            self.num_waiters -= 1

    async def cur_num_waiters(self) -> int:
        return self.num_waiters


@ray.remote(num_cpus=0)
class Semaphore:
    """An asyncio semaphore in an actor."""

    def __init__(self, value: int = 1):
        self._sema = asyncio.Semaphore(value=value)

    async def acquire(self):
        await self._sema.acquire()

    async def release(self):
        self._sema.release()

    async def locked(self) -> bool:
        return self._sema.locked()


def wait_for_condition(condition_predictor, timeout=10, retry_interval_ms=100, raise_exceptions=False, **kwargs):
    """Polls ``condition_predictor(**kwargs)`` until it is true; RuntimeError after ``timeout`` s."""
    start = time.monotonic()
    last_error = None
    while time.monotonic() - start <= timeout:
        try:
            if condition_predictor(**kwargs):
                return
        except Exception as e:
            if raise_exceptions:
                raise
            last_error = e, traceback.format_exc()
        time.sleep(retry_interval_ms / 1000.0)
    message = "The condition wasn't met before the timeout expired."
    if last_error is not None:
        # The exception's own line first (the line a summary shows), then its traceback.
        error, formatted = last_error
        summary = "".join(traceback.format_exception_only(type(error), error)).strip().splitlines()
        message += f" Last exception: {summary[0] if summary else type(error).__name__}\n{formatted}"
    raise RuntimeError(message)


async def async_wait_for_condition(condition_predictor, timeout=10, retry_interval_ms=100, **kwargs):
    """``wait_for_condition`` for a coroutine function (or a plain one) in an event loop."""
    start = time.monotonic()
    last_error = None
    while time.monotonic() - start <= timeout:
        try:
            if inspect.iscoroutinefunction(condition_predictor):
                if await condition_predictor(**kwargs):
                    return
            elif condition_predictor(**kwargs):
                return
        except Exception as e:
            last_error = e
        await asyncio.sleep(retry_interval_ms / 1000.0)
    message = "The condition wasn't met before the timeout expired."
    if last_error is not None:
        message += f" Last exception: {last_error}"
    raise RuntimeError(message)


def driver_env(env=None):
    """The environment for a driver subprocess: ``env`` (default: ours), keeping the
    harness's PYTHONPATH and PATH entries so that ``import ray`` is oxray there too."""
    if env is None:
        return None
    env = dict(env)
    for key in ("PYTHONPATH", "PATH"):
        ours = [p for p in os.environ.get(key, "").split(os.pathsep) if p]
        theirs = [p for p in env.get(key, "").split(os.pathsep) if p]
        env[key] = os.pathsep.join(theirs + [p for p in ours if p not in theirs])
    for key, value in os.environ.items():
        if key.startswith(("RAY_COMPAT_", "OXRAY_TEMP_DIR")):
            env.setdefault(key, value)
    return env


class DriverFailed(subprocess.CalledProcessError):
    """A driver subprocess exited non-zero; its message ends with the driver's last output line."""

    def __str__(self):
        lines = [line for line in (self.output or b"").decode(errors="replace").splitlines() if line.strip()]
        return super().__str__() + (f" Last output: {lines[-1].strip()}" if lines else "")


def run_driver(driver_script: str, env=None, encode: str = "utf-8", stderr=subprocess.PIPE):
    """Runs ``driver_script`` as ``python -`` in a new process, to the end: (the finished Popen,
    its stdout bytes, its stderr bytes or None when ``stderr`` is ``subprocess.STDOUT``)."""
    proc = subprocess.Popen(
        [sys.executable, "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        env=driver_env(env),
    )
    with proc:
        out, err = proc.communicate(driver_script.encode(encoding=encode))
    return proc, out, err


def run_string_as_driver(driver_script: str, env=None, encode: str = "utf-8") -> str:
    """Runs ``driver_script`` in a new Python process; its stdout and stderr together.
    Raises CalledProcessError when it exits non-zero."""
    proc, output, _ = run_driver(driver_script, env, encode, stderr=subprocess.STDOUT)
    out = output.decode(encode, errors="replace")
    if proc.returncode:
        print(out)
        raise DriverFailed(proc.returncode, proc.args, output, None)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def simulate_s3_bucket(port: int = 5002, region: str = "us-west-2"):
    """A moto S3 server on localhost; yields an ``s3://`` URI of a fresh bucket with
    pyarrow's query options (the bucket is created on first write, as with Ray's)."""
    from moto.server import ThreadedMotoServer

    old_env = dict(os.environ)
    os.environ.update(
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_SECURITY_TOKEN="testing",
        AWS_SESSION_TOKEN="testing",
    )
    server = ThreadedMotoServer(port=port)
    server.start()
    try:
        yield f"s3://{uuid.uuid4().hex}?region={region}&endpoint_override=http://localhost:{port}"
    finally:
        server.stop()
        os.environ.clear()
        os.environ.update(old_env)
