"""Small pieces of Ray's public API, written the way Ray's own tests use them:
`ray.wait([])`, `ray.ObjectID` and `ray.types`, `dir()` on an actor handle, and a
class's attributes reached through its actor class."""

import pytest

import oxray as ray


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
