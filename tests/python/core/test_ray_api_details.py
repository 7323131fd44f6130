"""Details of Ray's public API that Ray's own tests rely on, written the way those
tests use them: `JobConfig`, `ObjectRef.job_id()` and `_on_completed`, `as_future()`,
namespace and `get_if_exists` checks, `validate_placement_group`, a request that fits
no bundle, the top-level functions, `timeline()`, the runtime context's deprecated
properties and names, and killing an actor that has not started yet."""

import asyncio
import json
import threading
import warnings
from inspect import getmembers, isfunction

import pytest

import oxray as ray
from oxray.util.placement_group import VALID_PLACEMENT_GROUP_STRATEGIES, validate_placement_group
from oxray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
from oxray_testutil import wait_until


@ray.remote
def job_of_new_refs(new_thread):
    """The job ids the runtime context, a task's ref and a put's ref report, here or in a thread."""
    seen = []

    def look():
        seen.append(
            (
                ray.get_runtime_context().get_job_id(),
                echo.remote(1).job_id().hex(),
                ray.put(1).job_id().hex(),
            )
        )

    if new_thread:
        t = threading.Thread(target=look)
        t.start()
        t.join()
    else:
        look()
    return seen[0]


@ray.remote
def echo(x):
    return x


@ray.remote
class Named:
    def name(self):
        return ray.get_runtime_context().get_actor_name()

    def ready(self):
        return True


def test_refs_and_actor_ids_carry_their_job(ray_cluster):
    job_id = ray.get_runtime_context().get_job_id()
    assert ray.put(1).job_id().hex() == job_id
    assert echo.remote(1).job_id().hex() == job_id
    actor = Named.remote()
    assert actor._actor_id.job_id.hex() == job_id
    for new_thread in (False, True):
        assert ray.get(job_of_new_refs.remote(new_thread)) == (job_id, job_id, job_id)


def test_on_completed_calls_back_with_the_value(ray_cluster):
    got = threading.Event()
    values = []

    def callback(value):
        values.append(value)
        got.set()

    echo.remote(41)._on_completed(callback)
    assert got.wait(30)
    assert values == [41]


def test_as_future_is_an_asyncio_future_that_can_time_out_and_be_awaited_again(ray_cluster):
    @ray.remote
    class Gate:
        def __init__(self):
            self.event = threading.Event()

        def wait(self):
            return self.event.wait(60)

        def open(self):
            self.event.set()

    gate = Gate.options(max_concurrency=2).remote()
    waiting = gate.wait.remote()

    async def main():
        future = waiting.as_future()
        assert isinstance(future, asyncio.Future)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(future, timeout=0.1)
        assert future.cancelled()
        await gate.open.remote()
        assert await waiting is True
        assert await waiting is True

    asyncio.run(main())


def test_async_def_is_refused_for_tasks():
    with pytest.raises(ValueError, match="'async def' should not be used for remote tasks"):

        @ray.remote
        async def f():
            pass


def test_namespaces_and_get_if_exists_are_checked(ray_cluster):
    with pytest.raises(TypeError, match="namespace must be None or a string"):
        Named.options(namespace=123).remote()
    with pytest.raises(ValueError, match="not a valid namespace"):
        Named.options(namespace="").remote()
    with pytest.raises(TypeError, match="namespace must be None or a string"):
        ray.get_actor("a", namespace=123)
    with pytest.raises(ValueError, match="not a valid namespace"):
        ray.get_actor("a", namespace="")
    with pytest.raises(TypeError):
        Named.options(name=object(), get_if_exists=True).remote()
    with pytest.raises(ValueError, match="name must be specified to use `get_if_exists`"):
        Named.options(num_cpus=1, get_if_exists=True).remote()


def test_init_checks_its_namespace(fresh_cluster):
    with pytest.raises(TypeError, match="namespace must be None or a string"):
        fresh_cluster(namespace=123)
    with pytest.raises(ValueError, match="not a valid namespace"):
        fresh_cluster(namespace="")
    assert not ray.is_initialized()


def test_job_config_sets_the_namespace_and_refuses_what_it_cannot_do(fresh_cluster):
    from oxray.job_config import JobConfig

    with pytest.raises(NotImplementedError, match="metadata"):
        JobConfig(metadata={"owner": "me"})
    with pytest.raises(ValueError, match="Default actor lifetime"):
        JobConfig(default_actor_lifetime="forever")
    with pytest.raises(TypeError, match="expects a JobConfig"):
        fresh_cluster(job_config={"ray_namespace": "x"})

    fresh_cluster(job_config=ray.job_config.JobConfig(ray_namespace="from_config"))
    assert ray.get_runtime_context().namespace == "from_config"
    named = Named.options(name="in_config_ns").remote()
    assert ray.get(named.ready.remote())
    assert ray.get_actor("in_config_ns", namespace="from_config") == named


@ray.remote
class Owner:
    def make_child(self, lifetime=None):
        options = {} if lifetime is None else {"lifetime": lifetime}
        child = Named.options(**options).remote()
        ray.get(child.ready.remote())
        return child


def _dead(actor) -> bool:
    try:
        ray.get(actor.ready.remote(), timeout=30)
        return False
    except ray.exceptions.RayActorError:
        return True


def test_job_config_default_actor_lifetime_reaches_actors_the_jobs_actors_create(fresh_cluster):
    from oxray.job_config import JobConfig

    fresh_cluster(job_config=JobConfig(default_actor_lifetime="detached"))
    owner = Owner.remote()
    by_default = ray.get(owner.make_child.remote())
    non_detached = ray.get(owner.make_child.remote("non_detached"))
    ray.kill(owner)
    # As in Ray: the job's default made the first child detached, so it outlives its owner;
    # a lifetime given in the options wins, and that child dies with its owner.
    wait_until("the non-detached child to die with its owner", lambda: _dead(non_detached), timeout=60)
    assert ray.get(by_default.ready.remote())
    created_here = Named.remote()
    from oxray.util.state import list_actors

    assert {a.actor_id: a.is_detached for a in list_actors(detail=True)}[created_here._actor_id.hex()]
    ray.kill(by_default)
    ray.kill(created_here)


def test_validate_placement_group_checks_without_creating():
    for strategy in VALID_PLACEMENT_GROUP_STRATEGIES:
        assert validate_placement_group(bundles=[{"CPU": 1}], strategy=strategy)
    with pytest.raises(ValueError, match="Invalid placement group strategy 'invalid'"):
        validate_placement_group(bundles=[{"CPU": 1}], strategy="invalid")
    with pytest.raises(ValueError, match="non-empty list of bundles"):
        validate_placement_group(bundles=[])
    with pytest.raises(ValueError, match="'bundle', a name placement groups reserve"):
        validate_placement_group(bundles=[{"bundle": 1}])


def test_a_request_that_fits_no_bundle_fails_at_submission(ray_cluster):
    pg = ray.util.placement_group([{"CPU": 1}])
    ray.get(pg.ready())
    try:

        @ray.remote(num_cpus=1, num_gpus=8)
        class Greedy:
            pass

        in_pg = PlacementGroupSchedulingStrategy(placement_group=pg)
        with pytest.raises(ValueError, match=r"Cannot schedule .*Greedy with the placement group because the "):
            Greedy.options(scheduling_strategy=in_pg, name="greedy", get_if_exists=True).remote()
        with pytest.raises(ValueError, match=r"request \{'CPU': 2\} cannot fit into any bundles"):
            echo.options(num_cpus=2, scheduling_strategy=in_pg).remote(1)
        assert ray.get(echo.options(num_cpus=1, scheduling_strategy=in_pg).remote(7)) == 7
    finally:
        ray.util.remove_placement_group(pg)


def test_top_level_functions_are_rays(ray_cluster):
    names = {name for name, _ in getmembers(ray, isfunction)}
    assert names == {
        "init",
        "is_initialized",
        "remote",
        "get",
        "wait",
        "put",
        "kill",
        "cancel",
        "get_actor",
        "get_gpu_ids",
        "shutdown",
        "method",
        "nodes",
        "timeline",
        "cluster_resources",
        "available_resources",
        "java_function",
        "java_actor_class",
        "client",
        "get_runtime_context",
        "__getattr__",
    }
    with pytest.raises(NotImplementedError, match="Java"):
        ray.java_function("Cls", "f")
    with pytest.raises(NotImplementedError, match="Java"):
        ray.java_actor_class("Cls")
    with pytest.raises(NotImplementedError, match="Ray Client"):
        ray.client("ray://127.0.0.1:10001")


def test_timeline_has_the_tasks_that_ran(ray_cluster, tmp_path):
    @ray.remote
    def traced_task():
        return 1

    ray.get([traced_task.remote() for _ in range(3)])
    events = [e for e in ray.timeline() if e["name"].endswith("traced_task")]
    assert len(events) >= 3
    for event in events:
        assert event["ph"] == "X" and event["dur"] >= 0 and event["ts"] > 0
        assert event["pid"].startswith("Node ") and "pid" in event["tid"]
    path = tmp_path / "trace.json"
    assert ray.timeline(filename=str(path)) is None
    assert any(e["name"].endswith("traced_task") for e in json.loads(path.read_text()))


@ray.remote
class AsyncNamer:
    async def function_name(self):
        return ray.get_runtime_context().get_task_function_name()


def test_runtime_context_names_and_deprecated_properties(ray_cluster):
    rtc = ray.get_runtime_context()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert rtc.node_id.hex() == rtc.get_node_id()
        assert rtc.job_id.hex() == rtc.get_job_id()
    assert any("Use get_node_id() instead" in str(w.message) for w in caught)
    assert any("Use get_job_id() instead" in str(w.message) for w in caught)

    session = rtc.get_session_name()
    assert session.startswith("session_")

    @ray.remote
    def session_and_pg():
        inner = ray.get_runtime_context()
        return inner.get_session_name(), inner.get_placement_group_id()

    assert ray.get(session_and_pg.remote()) == (session, None)
    assert rtc.get_placement_group_id() is None

    # An unnamed actor's name is "", a task's None.
    assert ray.get(Named.remote().name.remote()) == ""
    assert ray.get(Named.options(name="named_here").remote().name.remote()) == "named_here"

    def make_local_async_actor():
        @ray.remote
        class Local:
            async def function_name(self):
                return ray.get_runtime_context().get_task_function_name()

        return Local

    local = make_local_async_actor().remote()
    assert ray.get(local.function_name.remote()) == (
        f"{__name__}.test_runtime_context_names_and_deprecated_properties.<locals>."
        "make_local_async_actor.<locals>.Local.function_name"
    )


def test_a_placement_groups_task_knows_its_group(ray_cluster):
    pg = ray.util.placement_group([{"CPU": 1}])
    ray.get(pg.ready())
    try:

        @ray.remote
        def my_group():
            rtc = ray.get_runtime_context()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                old = rtc.current_placement_group_id.hex()
            assert any("Use get_placement_group_id() instead" in str(w.message) for w in caught)
            return rtc.get_placement_group_id(), old

        in_pg = PlacementGroupSchedulingStrategy(placement_group=pg)
        assert ray.get(my_group.options(scheduling_strategy=in_pg).remote()) == (pg.id.hex(), pg.id.hex())
    finally:
        ray.util.remove_placement_group(pg)


def test_killing_an_actor_that_may_restart_before_it_starts_keeps_it(ray_cluster):
    actor = Named.options(name="killed_early", max_restarts=1, max_task_retries=-1).remote()
    ray.kill(actor, no_restart=False)
    assert ray.get(ray.get_actor("killed_early").ready.remote())
    ray.kill(actor)
    # At once, as in Ray: the kill was made here, whether or not the process has exited yet.
    with pytest.raises(ValueError, match="Failed to look up actor with name 'killed_early'"):
        ray.get_actor("killed_early")


def test_calls_before_init_raise_when_auto_connect_is_off(monkeypatch):
    if ray.is_initialized():
        ray.shutdown()
    monkeypatch.setenv("RAY_ENABLE_AUTO_CONNECT", "0")
    for call in (
        lambda: ray.get([]),
        lambda: ray.wait([]),
        lambda: ray.cancel(None),
        lambda: ray.kill(None),
        ray.get_gpu_ids,
        lambda: ray.put(1),
    ):
        with pytest.raises(ray.exceptions.RaySystemError, match="Ray has not been started yet"):
            call()
    assert not ray.is_initialized()


def test_code_search_path_lets_workers_import_the_jobs_code(tmp_path):
    import os
    import subprocess
    import sys
    import textwrap

    code_dir = tmp_path / "code dir"  # a space, as Ray's test has
    code_dir.mkdir()
    (code_dir / "helper_module_for_search_path.py").write_text("def answer():\n    return 'found'\n")
    driver = tmp_path / "driver.py"
    driver.write_text(
        textwrap.dedent(
            f"""
            import oxray as ray

            @ray.remote
            def use_helper():
                import helper_module_for_search_path
                return helper_module_for_search_path.answer()

            ray.init(num_cpus=1, job_config=ray.job_config.JobConfig(code_search_path=[{str(code_dir)!r}]))
            print("result:", ray.get(use_helper.remote()))
            """
        )
    )
    env = {k: v for k, v in os.environ.items() if k not in ("OXRAY_ADDRESS", "RAY_ADDRESS")}
    done = subprocess.run([sys.executable, str(driver)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "result: found" in done.stdout


def test_rays_dead_actor_cache_size_bounds_the_dead_actors_listed(fresh_cluster, monkeypatch):
    from oxray.util.state import list_actors

    monkeypatch.setenv("RAY_maximum_gcs_destroyed_actor_cached_count", "3")
    fresh_cluster(num_cpus=1)
    actors = [Named.remote() for _ in range(6)]
    ray.get([a.ready.remote() for a in actors])
    assert sum(a.state == "ALIVE" for a in list_actors()) == 6
    for actor in actors:
        ray.kill(actor)
    wait_until("3 dead actors listed", lambda: len(list_actors()) == 3, timeout=60)
    assert {a.state for a in list_actors()} == {"DEAD"}


def test_a_joined_driver_finds_the_state_api_the_embedded_head_started_serving(fresh_cluster, tmp_path):
    import os
    import subprocess
    import sys

    from oxray.util.state import list_actors

    fresh_cluster(num_cpus=1)
    named = Named.options(name="seen_from_elsewhere").remote()
    ray.get(named.ready.remote())
    assert [a.name for a in list_actors()] == ["seen_from_elsewhere"]  # starts serving HTTP here
    script = tmp_path / "joined.py"
    script.write_text(
        "import oxray as ray\n"
        "from oxray.util.state import list_actors\n"
        "ray.init('auto')\n"
        "print('names:', sorted(a.name for a in list_actors()))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("OXRAY_ADDRESS", "RAY_ADDRESS")}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "names: ['seen_from_elsewhere']" in done.stdout
