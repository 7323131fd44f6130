"""`ray.get_runtime_context()` as Ray's tests use it: ids as objects with `.hex()`,
the task's name, function and resources, the current actor and whether it was
restarted, cancellation, the dashboard URL, and `ObjectRef.task_id()`."""

import os
import signal
import warnings

import pytest

import oxray as ray
from oxray.util.placement_group import placement_group, remove_placement_group
from oxray.util.scheduling_strategies import PlacementGroupSchedulingStrategy


def test_id_properties_are_id_objects(ray_cluster):
    ctx = ray.get_runtime_context()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert isinstance(ctx.job_id, ray.JobID)
        assert ctx.job_id.hex() == ctx.get_job_id()
        assert isinstance(ctx.node_id, ray.NodeID)
        assert ctx.node_id.hex() == ctx.get_node_id()
        assert ctx.task_id is None and ctx.actor_id is None
    assert ctx.get_task_id() is None and ctx.get_actor_id() is None
    got = ctx.get()
    assert set(got) == {"job_id", "node_id", "namespace"}
    assert got["job_id"] == ray.JobID.from_hex(ctx.get_job_id())


@ray.remote
def describe():
    ctx = ray.get_runtime_context()
    return {
        "task_id": ctx.get_task_id(),
        "task_id_obj": ctx.get()["task_id"].hex(),
        "name": ctx.get_task_name(),
        "function": ctx.get_task_function_name(),
        "resources": ctx.get_assigned_resources(),
    }


def test_a_task_knows_its_id_name_function_and_resources(ray_cluster):
    ref = describe.options(num_cpus=1, resources={"custom_a": 1}).remote()
    got = ray.get(ref)
    assert got["task_id"] == got["task_id_obj"] == ref.task_id().hex()
    assert got["name"] == "describe"
    assert got["function"] == f"{__name__}.describe"
    assert got["resources"] == {"CPU": 1.0, "custom_a": 1.0}
    named = ray.get(describe.options(name="renamed", num_cpus=0.5).remote())
    assert named["name"] == "renamed"
    assert named["resources"] == {"CPU": 0.5}


def test_resources_in_a_placement_group_use_the_plain_names(ray_cluster):
    pg = placement_group([{"CPU": 1}])
    ray.get(pg.ready())
    try:
        strategy = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=0)
        got = ray.get(describe.options(num_cpus=1, scheduling_strategy=strategy).remote())
        assert got["resources"] == {"CPU": 1.0}
    finally:
        remove_placement_group(pg)


def test_put_and_task_refs_name_their_task(ray_cluster):
    @ray.remote
    def put_inside():
        return ray.put(1).task_id().hex(), ray.get_runtime_context().get_task_id()

    put_task, task = ray.get(put_inside.remote())
    assert put_task == task
    assert not ray.put(2).task_id().is_nil()
    assert ray.ObjectRef(os.urandom(16)).task_id().is_nil()


@ray.remote(max_restarts=1)
class Phoenix:
    def who(self):
        ctx = ray.get_runtime_context()
        return ctx.get_actor_id(), ctx.was_current_actor_reconstructed, ctx.get_task_function_name()

    def me(self):
        return ray.get_runtime_context().current_actor

    def crash(self):
        os.kill(os.getpid(), signal.SIGKILL)


def test_an_actor_knows_itself_and_whether_it_was_restarted(ray_cluster):
    a = Phoenix.remote()
    actor_id, restarted, function = ray.get(a.who.remote())
    assert actor_id == a._actor_id.hex()
    assert restarted is False
    assert function == f"{__name__}.Phoenix.who"
    handle = ray.get(a.me.remote())
    assert handle == a and ray.get(handle.who.remote())[0] == actor_id
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(a.crash.remote())
    assert ray.get(a.who.remote())[1] is True


def test_current_actor_outside_an_actor_raises(ray_cluster):
    with pytest.raises(RuntimeError, match="inside an actor"):
        _ = ray.get_runtime_context().current_actor


def test_a_task_can_see_it_was_cancelled(ray_cluster, tmp_path):
    started, seen = tmp_path / "started", tmp_path / "seen"

    @ray.remote
    def patient():
        import threading

        ctx = ray.get_runtime_context()
        before = ctx.is_canceled()
        started.touch()
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            seen.write_text(f"{before} {ctx.is_canceled()}")
            raise

    ref = patient.remote()
    while not started.exists():
        ray.wait([ref], timeout=0.05)
    ray.cancel(ref)
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(ref)
    assert seen.read_text() == "False True"


def test_get_runtime_context_starts_a_cluster_and_gives_the_dashboard_url(fresh_cluster):
    ray.shutdown()
    ctx = ray.get_runtime_context()
    assert ray.is_initialized()
    assert ctx.get_dashboard_url() == ""
    ray.shutdown()
    info = fresh_cluster(include_dashboard=True, dashboard_port=0)
    assert ray.get_runtime_context().get_dashboard_url() == info.dashboard_url
