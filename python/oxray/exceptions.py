"""Exceptions raised by oxray, with Ray's names so `except ray.exceptions.X` works."""

from __future__ import annotations


class RayError(Exception):
    """Base class of every error oxray raises."""


class RaySystemError(RayError):
    """The runtime itself failed."""


class RayTaskError(RayError):
    """A task or actor method raised. `str()` holds the remote traceback.

    `get()` raises it as an instance of both RayTaskError and the user's
    exception class, so `except ValueError` still catches a remote ValueError.
    """

    def __init__(self, function_name="", traceback_str="", cause=None, proctitle="", pid=None, ip=None):
        self.function_name = function_name
        self.traceback_str = traceback_str
        self.cause = cause
        self.proctitle = proctitle
        self.pid = pid
        self.ip = ip
        super().__init__(self._message())

    def _message(self):
        where = f" (pid={self.pid}, ip={self.ip})" if self.pid is not None else ""
        kind = type(self.cause).__name__ if self.cause else "Error"
        return f"{kind} in {self.function_name}(){where}:\n{self.traceback_str}"

    def __reduce__(self):
        return (RayTaskError, (self.function_name, self.traceback_str, self.cause, self.proctitle, self.pid, self.ip))

    def __str__(self):
        return self._message()

    def as_instanceof_cause(self):
        """An exception that is both this RayTaskError and the cause's class."""
        cause = self.cause
        if cause is None or not isinstance(cause, BaseException):
            return self
        cause_cls = type(cause)
        if issubclass(RayTaskError, cause_cls):
            return self
        message = self._message()
        error = self

        try:

            class _Combined(RayTaskError, cause_cls):
                def __init__(self, c):
                    self.cause = c
                    self.args = (c,)
                    self.function_name = error.function_name
                    self.traceback_str = error.traceback_str
                    self.pid = error.pid
                    self.ip = error.ip
                    self.proctitle = error.proctitle

                def __getattr__(self, name):
                    return getattr(self.cause, name)

                def __str__(self):
                    return message

                def __reduce__(self):
                    return error.__reduce__()

            name = f"RayTaskError({cause_cls.__name__})"
            _Combined.__name__ = name
            _Combined.__qualname__ = name
            return _Combined(cause)
        except TypeError:
            # Some builtin classes can't be combined (layout conflicts).
            return self


class GetTimeoutError(RayError, TimeoutError):
    """`get()` did not finish within its timeout."""


class RayActorError(RayError):
    """The actor is unavailable."""

    def __init__(self, message="The actor died unexpectedly before finishing this task."):
        super().__init__(message)


class ActorDiedError(RayActorError):
    """The actor died and will not come back."""


class ActorUnavailableError(RayActorError):
    """The actor is temporarily unavailable (e.g. restarting)."""


class ActorUnschedulableError(RayError):
    """No node can ever provide what the actor asks for."""


class TaskUnschedulableError(RayError):
    """No node can ever provide what the task asks for."""


class WorkerCrashedError(RayError):
    """The worker process running the task died."""


class ObjectLostError(RayError):
    """The object's data is gone."""


class OwnerDiedError(ObjectLostError):
    """The process that owned the object died."""


class ObjectStoreFullError(RayError):
    """The object store could not make room."""


class TaskCancelledError(RayError):
    """The task was cancelled with `cancel()`."""


class OutOfMemoryError(RayError):
    """A task was killed for using too much memory."""


class RuntimeEnvSetupError(RayError):
    """The runtime environment could not be set up."""


class AuthenticationError(RayError):
    """The cluster token was missing or wrong."""


_SYSTEM_ERRORS = {
    cls.__name__: cls
    for cls in (
        RaySystemError,
        ActorDiedError,
        ActorUnavailableError,
        ActorUnschedulableError,
        TaskUnschedulableError,
        WorkerCrashedError,
        ObjectLostError,
        OwnerDiedError,
        TaskCancelledError,
    )
}


def system_error(kind: str, message: str) -> RayError:
    """The exception for an error the runtime stored in place of a result."""
    return _SYSTEM_ERRORS.get(kind, RaySystemError)(message)
