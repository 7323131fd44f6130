"""Pieces of Ray's Core API that Ray's own Core tests check (issue 33 §7): the dead actor's id
on `ActorDiedError`, `ObjectRef[T]` as a generic alias, `get()` of an `ObjectRefGenerator`,
the default actor's creation CPU against a placement group without CPUs, the deprecated
`placement_group=` options, the `object_store_memory` deprecation warnings, and `init()`'s
`webui_url` with `RAY_OVERRIDE_DASHBOARD_URL`."""

import typing
import warnings

import numpy as np
import pytest

import oxray as ray
from oxray.exceptions import ActorDiedError, RayActorError
from oxray.types import ObjectRef
from oxray.util.scheduling_strategies import PlacementGroupSchedulingStrategy


@ray.remote
class Counter:
    def __init__(self):
        self.n = 0

    def incr(self):
        self.n += 1
        return self.n

    def where(self):
        return ray.get_runtime_context().get_placement_group_id()


@ray.remote
def where_am_i():
    return ray.get_runtime_context().get_placement_group_id()


@ray.remote
def count_to(n):
    yield from range(n)


# --- ActorDiedError.actor_id ---


def test_actor_died_error_names_the_dead_actor(ray_cluster):
    actor = Counter.remote()
    assert ray.get(actor.incr.remote()) == 1
    other = Counter.remote()
    ray.kill(actor)
    with pytest.raises(ActorDiedError) as info:
        ray.get(actor.incr.remote())
    assert info.value.actor_id == actor._actor_id.hex()
    # Among several refs, the failed call's actor is still named.
    with pytest.raises(ActorDiedError) as info:
        ray.get([other.incr.remote(), actor.incr.remote()])
    assert info.value.actor_id == actor._actor_id.hex()
    # Ray's attribute exists (None) when no actor is known.
    assert RayActorError().actor_id is None
    assert ActorDiedError("gone", actor_id=b"\x01" * 16).actor_id == "01" * 16


# --- ObjectRef[T] ---


def test_object_ref_is_a_generic_alias_for_type_hints(ray_cluster):
    alias = ObjectRef[np.ndarray]
    assert typing.get_origin(alias) is ObjectRef
    assert typing.get_args(alias) == (np.ndarray,)
    assert ray.ObjectRef[int] == ray.ObjectRef[int]

    @ray.remote
    def total(x: ObjectRef[np.ndarray]) -> float:
        return float(np.sum(x))

    assert typing.get_type_hints(total._function)["x"] == ObjectRef[np.ndarray]
    assert ray.get(total.remote(ray.put(np.arange(4)))) == 6.0


# --- get() of an ObjectRefGenerator ---


def test_get_of_a_generator_returns_the_generator(ray_cluster):
    gen = count_to.remote(3)
    assert ray.get(gen) is gen
    assert [ray.get(ref) for ref in gen] == [0, 1, 2]


# --- placement groups ---


def test_default_actor_cpu_must_fit_a_bundle(ray_cluster):
    pg = ray.util.placement_group([{"custom_a": 1}])
    ray.get(pg.ready())
    try:
        in_pg = PlacementGroupSchedulingStrategy(pg)
        with pytest.raises(ValueError) as info:
            Counter.options(scheduling_strategy=in_pg).remote()
        assert str(info.value) == (
            "Cannot schedule Counter with the placement group because the actor requires 1 CPU for creation, "
            "but it cannot fit into any bundles for the placement group, [{'custom_a': 1.0}]. "
            "Consider creating a placement group with CPU resources."
        )
        # Asking for no CPU (and the bundle's resource) fits.
        fits = Counter.options(num_cpus=0, resources={"custom_a": 1}, scheduling_strategy=in_pg).remote()
        assert ray.get(fits.where.remote()) == pg.id.hex()
    finally:
        ray.util.remove_placement_group(pg)


def test_deprecated_placement_group_options_warn_and_take_effect(ray_cluster):
    pg = ray.util.placement_group([{"CPU": 1}, {"CPU": 1}])
    ray.get(pg.ready())
    try:
        with pytest.warns(DeprecationWarning) as caught:
            ref = where_am_i.options(placement_group=pg, placement_group_bundle_index=1).remote()
        texts = [str(w.message) for w in caught]
        assert any(t.startswith("placement_group parameter is deprecated. Use scheduling_strategy=") for t in texts)
        assert any(t.startswith("placement_group_bundle_index parameter is deprecated.") for t in texts)
        assert ray.get(ref) == pg.id.hex()

        with pytest.warns(DeprecationWarning, match="placement_group parameter is deprecated"):
            actor = Counter.options(placement_group=pg, num_cpus=1).remote()
        assert ray.get(actor.where.remote()) == pg.id.hex()
        ray.kill(actor)

        # The index is the group's bundle's: one past the last is refused, as for the strategy.
        with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="placement_group_bundle_index=2"):
            where_am_i.options(placement_group=pg, placement_group_bundle_index=2).remote()
        with pytest.raises(ValueError, match="Placement groups should be specified via the scheduling_strategy option"):
            where_am_i.options(placement_group=pg, scheduling_strategy="SPREAD").remote()
        with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="expected a PlacementGroup"):
            where_am_i.options(placement_group="pg-name")
        # placement_group=None: outside any group (the group holds every CPU, so it asks none).
        with pytest.warns(DeprecationWarning):
            assert ray.get(where_am_i.options(placement_group=None, num_cpus=0).remote()) is None
    finally:
        ray.util.remove_placement_group(pg)


def test_object_store_memory_on_actors_and_bundles_is_deprecated(ray_cluster):
    ray_words = "is deprecated since it doesn't actually reserve the required object store memory"
    with pytest.warns(DeprecationWarning, match=f"Setting 'object_store_memory' for actors {ray_words}"):
        actor = Counter.options(object_store_memory=1024 * 1024).remote()
    assert ray.get(actor.incr.remote()) == 1
    with pytest.warns(DeprecationWarning, match="Setting 'object_store_memory' for actors"):

        @ray.remote(object_store_memory=1024)
        class Holder:
            pass

    with pytest.warns(DeprecationWarning, match=f"Setting 'object_store_memory' for bundles {ray_words}"):
        pg = ray.util.placement_group([{"CPU": 1, "object_store_memory": 1024 * 1024}])
    ray.util.remove_placement_group(pg)
    # Tasks keep the option without a warning, as in Ray.
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        assert ray.get(where_am_i.options(object_store_memory=1024).remote()) is None


# --- init()'s webui_url ---


def test_init_reports_webui_url_and_honours_the_override(fresh_cluster, monkeypatch):
    monkeypatch.delenv("RAY_OVERRIDE_DASHBOARD_URL", raising=False)
    ctx = fresh_cluster(include_dashboard=True, dashboard_port=0)
    url = ctx["webui_url"]
    assert url and "://" not in url and url == ctx.dashboard_url == ctx.address_info["webui_url"]
    assert url == ray.get_runtime_context().get_dashboard_url()
    monkeypatch.setenv("RAY_OVERRIDE_DASHBOARD_URL", "https://dashboard.example.com:443/ray")
    again = ray.init(ignore_reinit_error=True)
    assert again["webui_url"] == again.dashboard_url == "dashboard.example.com:443/ray"
