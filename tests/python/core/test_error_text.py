"""The text of task errors and serialization errors, as Ray writes it: `ray::f() (pid=.., ip=..)`
headers over user frames only, chained and dependency failures, exceptions that cannot be
pickled (or unpickled), custom exception serializers, and `inspect_serializability` reports."""

import logging
import pickle
import re
import threading

import cloudpickle
import pytest

import oxray as ray
from oxray.exceptions import RayActorError, RayError, RayTaskError, UnserializableException

TIMEOUT = 60


def _helper(n):
    raise ValueError(n)


@ray.remote
def fails():
    return _helper(7)


@ray.remote
def divide():
    return 1 / 0


@ray.remote
def gets_divide():
    return ray.get(divide.remote())


@ray.remote
def takes(*args):
    return args


@ray.remote
class Calculator:
    def explode(self):
        return _helper(3)

    def __repr__(self):
        return "Calculator(42)"


@ray.remote
class BrokenInit:
    def __init__(self):
        _helper(5)

    def ping(self):
        return "pong"


def _lines(text: str) -> list:
    # Python 3.11+ underlines the failing expression; those lines are not part of the contract.
    return [line for line in text.splitlines() if not re.fullmatch(r"\s*[~^]+\s*", line)]


def test_task_error_header_and_user_frames_only(ray_cluster):
    with pytest.raises(ValueError) as info:
        ray.get(fails.remote(), timeout=TIMEOUT)
    err = info.value
    assert isinstance(err, RayTaskError)
    lines = _lines(str(err))
    assert re.fullmatch(r"ray::fails\(\) \(pid=\d+, ip=\d+\.\d+\.\d+\.\d+\)", lines[0]), lines
    assert lines[1].endswith(", in fails") and lines[2].strip() == "return _helper(7)"
    assert lines[3].endswith(", in _helper") and lines[4].strip() == "raise ValueError(n)"
    assert lines[5:] == ["ValueError: 7"]
    assert "oxray" not in str(err)  # none of the worker's own frames
    assert err.pid == int(lines[0].split("pid=")[1].split(",")[0])


def test_named_task_header_uses_the_name(ray_cluster):
    with pytest.raises(ValueError) as info:
        ray.get(fails.options(name="custom").remote(), timeout=TIMEOUT)
    assert str(info.value).startswith("ray::custom() (pid=")


def test_actor_call_header_names_actor_id_and_repr(ray_cluster):
    calc = Calculator.remote()
    with pytest.raises(ValueError) as info:
        ray.get(calc.explode.remote(), timeout=TIMEOUT)
    first = str(info.value).splitlines()[0]
    assert re.fullmatch(
        rf"ray::Calculator\.explode\(\) \(pid=\d+, ip=[\d.]+, actor_id={calc._actor_id.hex()}, repr=Calculator\(42\)\)",
        first,
    ), first
    assert _lines(str(info.value))[-1] == "ValueError: 3"


def test_constructor_error_surfaces_as_actor_error(ray_cluster):
    actor = BrokenInit.remote()
    with pytest.raises(RayActorError) as info:
        ray.get(actor.ping.remote(), timeout=TIMEOUT)
    lines = _lines(str(info.value))
    assert lines[0].startswith(
        "The actor died because of an error raised in its creation task, ray::BrokenInit.__init__() (pid="
    ), lines
    assert f"actor_id={actor._actor_id.hex()}, repr=<" in lines[0]
    assert lines[1].endswith(", in __init__") and lines[-1] == "ValueError: 5"


def test_error_from_get_inside_a_task_is_chained_not_nested(ray_cluster):
    with pytest.raises(ZeroDivisionError) as info:
        ray.get(gets_divide.remote(), timeout=TIMEOUT)
    err = info.value
    assert isinstance(err, RayTaskError)
    assert isinstance(err.cause, ZeroDivisionError)  # the root cause, not a RayTaskError in a RayTaskError
    lines = _lines(str(err))
    assert lines[0].startswith("ray::gets_divide() (pid=")
    assert lines[2].strip() == "return ray.get(divide.remote())"
    assert lines[3].startswith("ray.exceptions.RayTaskError(ZeroDivisionError): ray::divide() (pid=")
    assert lines[-1] == "ZeroDivisionError: division by zero"


def test_dependency_failure_text(ray_cluster):
    inner = takes.remote(fails.remote())
    with pytest.raises(RayTaskError) as info:
        ray.get(takes.remote(inner), timeout=TIMEOUT)
    lines = _lines(str(info.value))
    note = "  At least one of the input arguments for this task could not be computed:"
    assert lines[0].startswith("ray::takes() (pid=") and lines[1] == note
    assert lines[2].startswith("ray.exceptions.RayTaskError: ray::takes() (pid=") and lines[3] == note
    assert lines[4].startswith("ray.exceptions.RayTaskError: ray::fails() (pid=")
    assert lines[-1] == "ValueError: 7"
    # The root cause is kept, so the failure can still be caught by its class.
    assert isinstance(info.value, ValueError) and isinstance(info.value.cause, ValueError)


def test_exception_that_cannot_be_unpickled_by_the_caller(ray_cluster):
    class NeedsArgument(OSError):
        def __init__(self, arg):
            pass

    @ray.remote
    def raise_it():
        raise NeedsArgument("x")

    with pytest.raises(UnserializableException) as info:
        ray.get(raise_it.remote(), timeout=TIMEOUT)
    text = str(info.value)
    assert text.startswith("Failed to deserialize exception. Refer to https://docs.ray.io/")
    lines = _lines(text)
    assert lines[1] == "Original exception:"
    assert lines[2].startswith("ray.exceptions.RayTaskError: ray::raise_it() (pid=")
    assert lines[-1].endswith(".NeedsArgument")


def test_exception_that_cannot_be_pickled_by_the_task(ray_cluster):
    class HoldsLock(Exception):
        def __init__(self):
            self.lock = threading.Lock()

    @ray.remote
    def raise_it():
        raise HoldsLock

    with pytest.raises(RayTaskError) as info:
        ray.get(raise_it.remote(), timeout=TIMEOUT)
    assert type(info.value.cause) is RayError
    assert "HoldsLock isn't serializable" in str(info.value.cause)


def test_registered_serializer_carries_the_exception(ray_cluster):
    class Custom(Exception):
        def __init__(self, msg):
            self.msg = msg

        def __str__(self):
            return f"custom: {self.msg}"

    def serializer(e):
        return {"msg": e.msg}

    def deserializer(state):
        return Custom(state["msg"] + " (rebuilt)")

    @ray.remote
    def raise_it():
        ray.util.register_serializer(Custom, serializer=serializer, deserializer=deserializer)
        raise Custom("boom")

    with pytest.raises(Custom) as info:
        ray.get(raise_it.remote(), timeout=TIMEOUT)
    assert isinstance(info.value, RayTaskError)
    assert str(info.value.cause) == "custom: boom (rebuilt)"
    assert "rebuilt" not in str(info.value)  # the text is the task's own

    # Here, in the driver: registered, then gone.
    ray.util.register_serializer(Custom, serializer=serializer, deserializer=deserializer)
    try:
        assert str(pickle.loads(cloudpickle.dumps(Custom("a")))) == "custom: a (rebuilt)"
    finally:
        ray.util.deregister_serializer(Custom)
    assert str(pickle.loads(cloudpickle.dumps(Custom("a")))) == "custom: a"


def test_read_only_args_exception(ray_cluster):
    class ReadOnlyArgs(Exception):
        def __init__(self, msg):
            self._msg = msg

        @property
        def args(self):
            return (self._msg,)

        def __str__(self):
            return self._msg

    @ray.remote
    def raise_it():
        raise ReadOnlyArgs("boom")

    with pytest.raises(ReadOnlyArgs) as info:
        ray.get(raise_it.remote(), timeout=TIMEOUT)
    assert isinstance(info.value, RayTaskError)
    assert info.value.args == (info.value.cause,)
    assert str(info.value.cause) == "boom"


def test_final_exception_class_is_raised_as_ray_task_error(ray_cluster, caplog):
    class Final(Exception):
        def __init_subclass__(cls, **kwargs):
            raise TypeError("final")

    @ray.remote
    def raise_it():
        raise Final("from task")

    with caplog.at_level(logging.WARNING, logger="oxray.exceptions"):
        with pytest.raises(RayTaskError) as info:
            ray.get(raise_it.remote(), timeout=TIMEOUT)
    assert "This exception is raised as RayTaskError only" in caplog.text
    assert type(info.value) is RayTaskError
    assert str(info.value.cause) == "from task"


def test_dual_exception_pickles_as_both_classes():
    class TwoFields(Exception):
        def __init__(self, one, two):
            self.one, self.two = one, two

        def __reduce__(self):
            return type(self), (self.one, self.two)

    error = RayTaskError(function_name="f", traceback_str="tb", cause=TwoFields(1, 2))
    copy = pickle.loads(cloudpickle.dumps(error.make_dual_exception_instance()))
    assert isinstance(copy, RayTaskError) and isinstance(copy, TwoFields)
    assert (copy.one, copy.two) == (1, 2)
    assert str(copy) == "tb"  # no `Traceback` line: no header to put in its place


def _scrub(text: str) -> str:
    return re.sub(r"0x[0-9a-f]+", "ADDR", text)


def test_serialization_error_messages(ray_cluster):
    lock = threading.Lock()

    @ray.remote
    def capture():
        return lock

    @ray.remote
    class Capturing:
        def __init__(self):
            self.lock = lock

    @ray.remote
    class Plain:
        def __init__(self, value):
            self.value = value

        def echo(self, value):
            return value

    checks = [
        (lambda: ray.put(lock), "Could not serialize the put value <unlocked _thread.lock object at ADDR>:"),
        (
            lambda: takes.remote(1, lock),
            f"Could not serialize the argument <unlocked _thread.lock object at ADDR> for a task or actor "
            f"{__name__}.takes:",
        ),
        (
            lambda: Plain.remote(lock),
            "Could not serialize the argument <unlocked _thread.lock object at ADDR> for a task or actor "
            f"{__name__}.test_serialization_error_messages.<locals>.Plain.__init__:",
        ),
        (
            lambda: capture.remote(),
            f"Could not serialize the function {__name__}.test_serialization_error_messages.<locals>.capture:",
        ),
        (
            lambda: Capturing.remote(),
            "Could not serialize the actor class "
            f"{__name__}.test_serialization_error_messages.<locals>.Capturing.__init__:",
        ),
    ]
    for submit, header in checks:
        with pytest.raises(TypeError) as info:
            submit()
        text = _scrub(str(info.value))
        assert text.splitlines()[0] == header, text
        assert "Checking Serializability of" in text and text.rstrip().endswith("=")
    # An actor method's argument: named by the call.
    plain = Plain.remote(1)
    with pytest.raises(TypeError, match=r"for a task or actor Plain\.echo:"):
        plain.echo.remote(lock)
    assert ray.get(plain.echo.remote("ok"), timeout=TIMEOUT) == "ok"


def test_inspect_serializability_finds_the_culprit(capsys):
    lock = threading.Lock()

    def closure():
        return lock

    ok, failures = ray.util.inspect_serializability(closure, name="closure")
    assert not ok
    (failure,) = failures
    assert failure.obj is lock and failure.path == ("closure", "lock") and failure.parent is closure
    printed = capsys.readouterr().out
    assert "Checking Serializability of" in printed and "!!! FAIL serialization" in printed

    ok, failures = ray.util.inspect_serializability({"fine": [1, 2]})
    assert ok and failures == set()


def test_authentication_error_points_at_the_docs():
    text = str(ray.exceptions.AuthenticationError("Token is missing"))
    assert text.startswith("Token is missing.")
    assert "https://docs.ray.io/en/latest/ray-security/token-auth.html" in text
