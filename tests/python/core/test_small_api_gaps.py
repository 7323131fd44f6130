"""Small pieces of Ray's public API, written the way Ray's own tests use them:
`ray.wait([])`, `ray.ObjectID` and `ray.types`, `dir()` on an actor handle, and a
class's attributes reached through its actor class."""

import pytest

import oxray as ray
from oxray_testutil import wait_until


def test_wait_on_no_refs_returns_two_empty_lists(ray_cluster):
    assert ray.wait([]) == ([], [])
    assert ray.wait([], num_returns=3, timeout=0) == ([], [])


def test_object_id_and_ray_types_name_object_ref(ray_cluster):
    from oxray.types import ObjectRef

    ref = ray.put(1)
    assert ray.ObjectID is ray.ObjectRef is ObjectRef is ray.types.ObjectRef
    assert isinstance(ref, ray.ObjectID)


@ray.remote
class Config:
    LIMIT = 7
    NAMES = ("a", "b")

    @staticmethod
    def double(x):
        return 2 * x

    def limit(self):
        return self.LIMIT


def test_dir_of_an_actor_handle_lists_its_methods(ray_cluster):
    handle = Config.remote()
    assert ray.get(handle.limit.remote()) == 7
    names = dir(handle)
    assert "limit" in names and "double" in names
    assert names == sorted(names)


def test_class_attributes_are_reached_through_the_actor_class(ray_cluster):
    assert Config.LIMIT == 7
    assert Config.NAMES == ("a", "b")
    assert Config.double(4) == 8
    with pytest.raises(AttributeError, match="actor class 'Config' has no attribute 'MISSING'"):
        _ = Config.MISSING


def test_named_actors_are_listed_and_actor_classes_are_not_inherited(ray_cluster):
    from oxray.actor import ActorClassInheritanceException
    from oxray.util import list_named_actors

    @ray.remote
    class Named:
        def ping(self):
            return "pong"

    named = Named.options(name="listed-one").remote()
    ray.get(named.ping.remote())
    assert "listed-one" in list_named_actors()
    assert {"name": "listed-one", "namespace": ray.get_runtime_context().namespace} in list_named_actors(
        all_namespaces=True
    )
    with pytest.raises(ActorClassInheritanceException, match="Inheriting from actor classes"):

        class Derived(Named):
            pass

    assert ray.put(5).future().result(timeout=60) == 5
    assert set(dir(named)) == {"__init__", "__ray_ready__", "__ray_call__", "__ray_terminate__", "ping"}
    assert {n for n in dir(Named) if not n.startswith("_")} == {"ping", "options", "remote", "bind"}
    with pytest.raises(NotImplementedError, match="bind"):
        Named.bind()
    ray.kill(named)


def test_auto_connect_can_be_switched_off(monkeypatch):
    ray.shutdown()

    @ray.remote
    def one():
        return 1

    monkeypatch.setenv("RAY_ENABLE_AUTO_CONNECT", "0")
    with pytest.raises(ray.exceptions.RaySystemError, match="ray.init"):
        one.remote()
    assert not ray.is_initialized()
    monkeypatch.delenv("RAY_ENABLE_AUTO_CONNECT")
    try:
        assert ray.get(one.remote()) == 1  # the default: the first call starts a cluster
    finally:
        ray.shutdown()


def test_kill_of_something_else_than_an_actor_is_rays_value_error(ray_cluster):
    with pytest.raises(ValueError, match="ray.kill\\(\\) only supported for actors. For tasks, try ray.cancel\\(\\)"):
        ray.kill("not_an_actor_handle")


def test_a_functions_invocation_decorator_rewrites_its_calls(ray_cluster):
    def reverse_and_report(f):
        def call(args, kwargs):
            return f(args[::-1], {"d": 5}), kwargs

        return call

    def f(a, b, c, d=None):
        return a, b, c, d

    f.__ray_invocation_decorator__ = reverse_and_report
    remote_f = ray.remote(f)
    ref, kwargs = remote_f.remote(1, 2, 3, d=4)
    assert kwargs == {"d": 4} and ray.get(ref) == (3, 2, 1, 5)


def test_ray_cloudpickle_pickles_what_tasks_send(ray_cluster):
    import oxray.cloudpickle as pickle

    def local(x):
        return x + 1

    assert pickle.loads(pickle.dumps(local))(1) == 2
    error = ray.exceptions.RayTaskError("f", "Traceback (most recent call last):\nValueError: x", ValueError("x"))
    copy = pickle.loads(pickle.dumps(error.make_dual_exception_instance()))
    assert isinstance(copy, ray.exceptions.RayTaskError) and isinstance(copy, ValueError)


def test_tasks_are_named_as_ray_names_them(ray_cluster):
    from oxray.util.state import list_tasks

    @ray.remote
    def nested():
        return ray.get_runtime_context().get_task_name()

    # Ray's default name is the function's own name, not its qualified name.
    assert ray.get(nested.remote()) == "nested"
    wait_until("the nested task listed", lambda: list_tasks(filters=[("func_or_class_name", "=", "nested")]))
