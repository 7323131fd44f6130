"""Exceptions raised by oxray, with Ray's names so `except ray.exceptions.X` works."""

from __future__ import annotations

import builtins
import logging
import os
import socket

_logger = logging.getLogger(__name__)


class RayError(Exception):
    """Base class of every error oxray raises."""


class RaySystemError(RayError):
    """The runtime itself failed."""


class RayTaskError(RayError):
    """A task or actor method raised. `str()` is Ray's: a `ray::f() (pid=.., ip=..)` header
    in place of each `Traceback` line of the remote traceback (user frames only).

    `get()` raises it as an instance of both RayTaskError and the user's
    exception class, so `except ValueError` still catches a remote ValueError.
    """

    def __init__(
        self,
        function_name="",
        traceback_str="",
        cause=None,
        proctitle=None,
        pid=None,
        ip=None,
        actor_repr=None,
        actor_id=None,
    ):
        self.function_name = function_name
        self.traceback_str = traceback_str
        self.proctitle = proctitle or f"ray::{function_name}"
        self.pid = pid or os.getpid()
        self.ip = ip or _local_ip()
        self.actor_repr = actor_repr
        self._actor_id = actor_id
        self.cause = _picklable_cause(cause, traceback_str)
        # Exception's pickling calls the class with `args` (then restores `__dict__`).
        self.args = (function_name, traceback_str, self.cause, proctitle, pid, ip)

    def __str__(self):
        header = f"{self.proctitle}() (pid={self.pid}, ip={self.ip}"
        if self.actor_repr:
            header += f", actor_id={self._actor_id}, repr={self.actor_repr})"
        else:
            header += ")"
        lines = self.traceback_str.strip().split("\n")
        return "\n".join(header if line.startswith("Traceback ") else line for line in lines)

    def make_dual_exception_instance(self) -> RayTaskError:
        """An instance of a class deriving from both RayTaskError and the cause's class,
        with this error's text. Raises TypeError when the cause's class cannot be subclassed."""
        cause_cls = type(self.cause)
        text = str(self)
        group = _BaseExceptionGroup is not None and isinstance(self.cause, _BaseExceptionGroup)

        class Dual(RayTaskError, cause_cls):
            if group:

                def __new__(cls, cause):
                    # An exception group's constructor takes (message, exceptions).
                    return super().__new__(cls, cause.message, cause.exceptions)

            def __init__(self, cause):
                self.cause = cause
                # Kept aside: the user's class may make `args` a read-only property.
                self._ray_task_error_args = (cause,)

            @property
            def args(self):
                return self._ray_task_error_args

            @args.setter
            def args(self, value):
                self._ray_task_error_args = value

            def __reduce__(self):
                return (Dual, self._ray_task_error_args, dict(self.__dict__))

            def __getattr__(self, name):
                return getattr(self.cause, name)

            def __str__(self):
                return text

        name = f"RayTaskError({cause_cls.__name__})"
        Dual.__name__ = name
        Dual.__qualname__ = name
        dual = Dual(self.cause)
        # This error's fields too (pid, traceback_str, ...), which the cause's class lacks.
        for key, value in self.__dict__.items():
            dual.__dict__.setdefault(key, value)
        return dual

    def as_instanceof_cause(self):
        """This error as an instance of the cause's class too (see make_dual_exception_instance),
        or itself (with a warning) when that class cannot be combined with RayTaskError."""
        cause_cls = type(self.cause)
        if not isinstance(self.cause, BaseException) or issubclass(RayTaskError, cause_cls):
            return self
        try:
            return self.make_dual_exception_instance()
        except Exception as e:  # noqa: BLE001 - a class that refuses subclassing (final, layout, args)
            _logger.warning(
                f"User exception type {cause_cls} in RayTaskError can't be subclassed! "
                "This exception is raised as RayTaskError only. You can use "
                f"`ray_task_error.cause` to access the user exception. Failure in subclassing: {e}"
            )
            return self


_BaseExceptionGroup = getattr(builtins, "BaseExceptionGroup", None)


def _picklable_cause(cause, traceback_str):
    """The cause, or (as Ray) a RayError naming it when it cannot be pickled: the task's
    error must still reach the caller."""
    if cause is None:
        return None
    import cloudpickle

    try:
        cloudpickle.dumps(cause)
        return cause
    except Exception as e:  # noqa: BLE001 - any pickling failure
        err_type = f"{type(cause).__module__}.{type(cause).__name__}"
        _logger.warning(f"The original cause of the RayTaskError ({err_type}) isn't serializable: {e}")
        return RayError(f"Exception {err_type} isn't serializable: {e}.\nOriginal exception details:\n{traceback_str}")


_LOCAL_IP = None


def _local_ip() -> str:
    global _LOCAL_IP
    if _LOCAL_IP is None:
        try:
            _LOCAL_IP = socket.gethostbyname("localhost")
        except OSError:
            _LOCAL_IP = "127.0.0.1"
    return _LOCAL_IP


def type_name(cls) -> str:
    """A class's name as a traceback's last line gives it, with oxray's exceptions under
    Ray's module name (`ray.exceptions.RayTaskError`), as users of Ray read them."""
    module = getattr(cls, "__module__", None)
    if module == __name__:
        module = "ray.exceptions"
    qualname = getattr(cls, "__qualname__", cls.__name__)
    return qualname if module in (None, "builtins", "__main__") else f"{module}.{qualname}"


class UnserializableException(RayError):
    """A task's exception could not be unpickled where it was read; holds the text of
    the error as the task saw it."""

    def __init__(self, original_stack_trace: str):
        self._original_stack_trace = original_stack_trace
        super().__init__(original_stack_trace)

    def __str__(self):
        return (
            "Failed to deserialize exception. Refer to https://docs.ray.io/en/latest/ray-core/objects/"
            "serialization.html#custom-serializers-for-exceptions for more information.\n"
            f"Original exception:\n{self._original_stack_trace}"
        )


class GetTimeoutError(RayError, TimeoutError):
    """`get()` did not finish within its timeout."""


class RayActorError(RayError):
    """The actor is unavailable. `actor_id` is Ray's attribute: the actor's id as a hex
    string, or None when it is not known."""

    actor_id = None

    def __init__(self, message="The actor died unexpectedly before finishing this task.", *, actor_id=None):
        super().__init__(message)
        if actor_id is not None:
            self.actor_id = actor_id.hex() if isinstance(actor_id, bytes) else str(actor_id)


class ActorDiedError(RayActorError):
    """The actor died and will not come back."""


class AsyncioActorExit(RayError):
    """Raised by `exit_actor()` in an async actor (Ray's): the actor ends once the call (or
    the background task) that called it is over, even if user code catches this."""


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


class UserCodeException(RayError):
    """User code (a Data UDF, for one) raised; the user's exception is the `__cause__`."""


class AuthenticationError(RayError):
    """The cluster token was missing or wrong. `str()` points at Ray's token docs."""

    DOCS_URL = "https://docs.ray.io/en/latest/ray-security/token-auth.html"

    def __init__(self, message: str):
        self.message = message
        self.__suppress_context__ = True
        super().__init__(message)

    def __str__(self) -> str:
        end = "" if self.message.endswith(".") else "."
        return f"{self.message}{end} For more information, see: {self.DOCS_URL}"


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


# What a worker reports when an actor's constructor raised (Ray's text): the actor's death cause.
CREATION_TASK_FAILED = "The actor died because of an error raised in its creation task, "


def system_error(kind: str, message: str) -> RayError:
    """The exception for an error the runtime stored in place of a result."""
    return _SYSTEM_ERRORS.get(kind, RaySystemError)(message)
