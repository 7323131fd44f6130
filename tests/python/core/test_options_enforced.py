"""Every option Ray accepts is enforced or refused by name, never ignored:
`max_calls`, `retry_exceptions=[types]`, method-level retries, `cancel(recursive)`,
`get_current_placement_group` and `placement_group_capture_child_tasks`,
`init(logging_level=)`, and the options oxray refuses."""

import logging

import pytest

import oxray as ray
from oxray.train import FailureConfig
from oxray.util.placement_group import get_current_placement_group, placement_group, remove_placement_group
from oxray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
from oxray_testutil import wait_until


@ray.remote
def pid():
    import os

    return os.getpid()


def _pid():
    import os

    return os.getpid()


def test_max_calls_retires_the_worker(ray_cluster):
    once_each = ray.remote(max_calls=1)(_pid)
    once = [ray.get(once_each.remote()) for _ in range(4)]
    assert len(set(once)) == 4
    twice_each = ray.remote(max_calls=2)(_pid)
    twice = [ray.get(twice_each.remote()) for _ in range(6)]
    assert max(twice.count(p) for p in twice) <= 2
    with pytest.raises(ValueError, match=r"Setting 'max_calls' is not supported in '\.options\(\)'"):
        pid.options(max_calls=1)


def test_option_errors_read_as_rays(ray_cluster):
    # Ray's own tests match these messages.
    def f():
        return 1

    with pytest.raises(
        TypeError, match=r"The type of keyword 'max_retries' must be \(<class 'int'>, <class 'NoneType'>\)"
    ):
        ray.remote(max_retries=0.5)(f)
    with pytest.raises(TypeError, match=r"The type of keyword 'num_returns' must be \(<class 'int'>, <class 'str'>"):
        ray.remote(num_returns=0.5)(f)
    with pytest.raises(ValueError, match="The keyword 'max_calls' only accepts None, 0 or a positive integer"):
        ray.remote(max_calls=-1)(f)
    with pytest.raises(ValueError, match="The keyword 'max_restarts' only accepts None, 0, -1 or a positive integer"):
        ray.remote(max_restarts=-2)(Counter._cls)
    with pytest.raises(ValueError, match="precision of the fractional quantity of resource num_gpus cannot go beyond"):
        ray.remote(num_gpus=0.0000001)(f)
    with pytest.raises(ValueError, match="precision of the fractional quantity of resource custom cannot go beyond"):
        ray.remote(resources={"custom": 0.0000001})(f)
    with pytest.raises(ValueError, match=r"The keyword 'num_returns' only accepts None, a non-negative integer"):
        ray.remote(num_returns="many")(f)
    # Devices are shared only below one: more than one must be whole, as Ray requires (at `.remote()`).
    with pytest.raises(ValueError, match="GPU resource quantity must be whole numbers"):
        ray.remote(num_gpus=1.5)(f).remote()
    with pytest.raises(ValueError, match="neuron_cores resource quantity must be whole numbers"):
        ray.remote(resources={"neuron_cores": 2.5})(f).remote()
    with pytest.raises(ValueError, match="TPU resource quantity must be whole numbers"):
        Counter.options(resources={"TPU": 2.5}).remote()


@ray.remote
class Counter:
    def __init__(self):
        self.n = 0

    def bump(self):
        self.n += 1
        return self.n


def flaky(counter, exc_type, failures):
    """Raises `exc_type` on its first `failures` attempts."""
    if ray.get(counter.bump.remote()) <= failures:
        raise exc_type("flaky")
    return "ok"


def test_retry_exceptions_list_retries_only_those_types(ray_cluster):
    task = ray.remote(flaky).options(max_retries=3, retry_exceptions=[ValueError])
    counter = Counter.remote()
    assert ray.get(task.remote(counter, ValueError, 2)) == "ok"
    assert ray.get(counter.bump.remote()) == 4  # 3 attempts, then this call
    counter = Counter.remote()
    with pytest.raises(TypeError, match="flaky"):
        ray.get(task.remote(counter, TypeError, 2))
    assert ray.get(counter.bump.remote()) == 2  # no retry


def test_retry_exceptions_must_be_a_bool_or_exception_types(ray_cluster):
    with pytest.raises(TypeError, match="retry_exceptions"):
        pid.options(retry_exceptions=["ValueError"])
    with pytest.raises(TypeError, match="retry_exceptions"):
        pid.options(retry_exceptions=ValueError)


@ray.remote
class Flaky:
    def __init__(self):
        self.calls = 0

    def call(self, failures):
        self.calls += 1
        if self.calls <= failures:
            raise ValueError(f"attempt {self.calls}")
        return self.calls


def test_method_options_set_retries_per_call(ray_cluster):
    a = Flaky.remote()
    with pytest.raises(ValueError, match="attempt 1"):
        ray.get(a.call.remote(1))  # the actor's default: no retries
    b = Flaky.remote()
    assert ray.get(b.call.options(max_task_retries=2, retry_exceptions=True).remote(2)) == 3
    c = Flaky.remote()
    with pytest.raises(ValueError, match="attempt 1"):
        ray.get(c.call.options(max_task_retries=2, retry_exceptions=[KeyError]).remote(2))


@ray.remote
class Board:
    """Holds refs for a test and lets a waiter block until they are posted."""

    def __init__(self):
        import asyncio

        self.posted = asyncio.Event()
        self.released = asyncio.Event()
        self.refs = None

    async def post(self, refs):
        self.refs = refs
        self.posted.set()

    async def refs_posted(self):
        await self.posted.wait()
        return self.refs

    async def release(self):
        self.released.set()

    async def wait_release(self):
        await self.released.wait()
        return "released"


@ray.remote
def child(board):
    return ray.get(board.wait_release.remote())


@ray.remote
def parent(board):
    kid = child.remote(board)
    ray.get(board.post.remote([kid]))
    return ray.get(kid)


@pytest.mark.parametrize("recursive", [True, False])
def test_cancel_recursive_reaches_the_tasks_a_task_submitted(ray_cluster, recursive):
    board = Board.remote()
    top = parent.remote(board)
    [kid] = ray.get(board.refs_posted.remote())
    ray.cancel(top, recursive=recursive)
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(top)
    if recursive:
        with pytest.raises(ray.exceptions.TaskCancelledError):
            ray.get(kid)
    else:
        ray.get(board.release.remote())
        assert ray.get(kid) == "released"


@ray.remote
def current_group():
    pg = get_current_placement_group()
    return pg.id.hex() if pg else None


@ray.remote
def spawn_and_report():
    return ray.get(current_group.remote())


def test_get_current_placement_group_and_capture_child_tasks(ray_cluster):
    assert get_current_placement_group() is None
    assert ray.get(current_group.remote()) is None
    pg = placement_group([{"CPU": 1}])  # the other CPU stays outside, for the uncaptured child
    ray.get(pg.ready())
    try:
        inside = PlacementGroupSchedulingStrategy(pg)
        assert ray.get(current_group.options(scheduling_strategy=inside).remote()) == pg.id.hex()
        # Without capture a child runs outside the group; with it, inside.
        assert ray.get(spawn_and_report.options(num_cpus=0, scheduling_strategy=inside).remote()) is None
        capture = PlacementGroupSchedulingStrategy(pg, placement_group_capture_child_tasks=True)
        assert ray.get(spawn_and_report.options(num_cpus=0, scheduling_strategy=capture).remote()) == pg.id.hex()
    finally:
        remove_placement_group(pg)


def test_init_logging_level_sets_the_library_logger(fresh_cluster):
    fresh_cluster(logging_level="debug")
    assert logging.getLogger("oxray").level == logging.DEBUG
    ray.shutdown()
    fresh_cluster(logging_level=logging.WARNING)
    assert logging.getLogger("oxray").level == logging.WARNING


@pytest.mark.parametrize(
    "kwargs, named",
    [
        ({"local_mode": True}, "local_mode"),
        ({"_system_config": {"x": 1}}, "_system_config"),
        ({"_node_ip_address": "10.0.0.1"}, "_node_ip_address"),
    ],
)
def test_init_refuses_what_it_does_not_do(kwargs, named):
    ray.shutdown()
    with pytest.raises(NotImplementedError, match=named):
        ray.init(**kwargs)
    assert not ray.is_initialized()


def test_init_rejects_bad_logging_options():
    ray.shutdown()
    with pytest.raises(ValueError, match="logging_level"):
        ray.init(logging_level="chatty")
    with pytest.raises(TypeError, match="unexpected keyword"):
        ray.init(no_such_option=1)


@ray.remote
class StoreHolder:
    def assigned(self):
        return ray.get_runtime_context().get_assigned_resources()


def test_object_store_memory_is_held_like_a_resource(ray_cluster):
    # As in Ray, the option asks for that much of a node's object store: held while the actor
    # lives, so the node promises it to nothing else, and refused where no store is that big.
    mib = 1 << 20
    total = ray.cluster_resources()["object_store_memory"]
    holder = StoreHolder.options(object_store_memory=150 * mib).remote()
    assert ray.get(holder.assigned.remote())["object_store_memory"] == 150 * mib
    # Nodes report what is free with their heartbeat: wait for the one after the actor started.
    wait_until(
        lambda: f"the actor's 150 MiB taken from the store ({ray.available_resources()})",
        lambda: ray.available_resources()["object_store_memory"] <= total - 150 * mib,
    )
    ray.kill(holder)
    with pytest.raises(ray.exceptions.TaskUnschedulableError, match="object_store_memory"):
        ray.get(pid.options(object_store_memory=total * 2).remote())
    with pytest.raises(ValueError, match="'object_store_memory' option instead"):
        pid.options(resources={"object_store_memory": 1})
    with pytest.raises(ValueError, match="object_store_memory"):
        pid.options(object_store_memory=-1)


@pytest.mark.parametrize(
    "options, named",
    [
        ({"runtime_env": {"pip": ["requests"]}}, "'pip'"),
        ({"runtime_env": {"working_dir": "."}}, "'working_dir'"),
    ],
)
def test_task_options_refused_by_name(options, named):
    with pytest.raises(NotImplementedError, match=named):
        pid.options(**options)


@pytest.mark.parametrize(
    "options, named",
    [
        ({"max_pending_calls": 10}, "max_pending_calls"),
    ],
)
def test_actor_options_refused_by_name(options, named):
    with pytest.raises(NotImplementedError, match=named):
        Counter.options(**options)


def test_failure_config_controller_failure_limit_refused():
    assert FailureConfig(controller_failure_limit=-1).controller_failure_limit == -1
    with pytest.raises(NotImplementedError, match="controller_failure_limit"):
        FailureConfig(controller_failure_limit=2)


def test_object_store_memory_in_a_bundle_warns_as_in_ray(ray_cluster):
    with pytest.warns(DeprecationWarning, match="'object_store_memory' for bundles is deprecated"):
        pg = placement_group([{"CPU": 1, "object_store_memory": 1 << 20}])
    ray.get(pg.ready())
    remove_placement_group(pg)


def test_runtime_env_class_is_a_dict_of_the_fields_given(ray_cluster):
    from oxray.runtime_env import RuntimeEnv

    env = RuntimeEnv(env_vars={"GREETING": "hi"})
    assert env == {"env_vars": {"GREETING": "hi"}} and env.env_vars() == {"GREETING": "hi"}

    @ray.remote(runtime_env=env)
    def greeting():
        import os

        return os.environ["GREETING"]

    assert ray.get(greeting.remote()) == "hi"
    with pytest.raises(NotImplementedError, match="'pip'"):
        greeting.options(runtime_env=ray.runtime_env.RuntimeEnv(pip=["requests"]))
    with pytest.raises(TypeError, match="env_vars"):
        RuntimeEnv(env_vars={"A": 1})


def test_actor_names_are_checked_as_ray_checks_them(ray_cluster):
    with pytest.raises(ValueError, match="Actor name cannot be an empty string"):
        Counter.options(name="")
    with pytest.raises(ValueError, match="namespace"):
        Counter.options(name="ok", namespace="")
    with pytest.raises(TypeError):
        Counter.options(name=1)
    first = Counter.options(name="only-one").remote()
    ray.get(first.bump.remote())
    with pytest.raises(ValueError, match="Please use a different name"):
        Counter.options(name="only-one").remote()
    ray.kill(first)


def test_dynamic_num_returns_is_refused_by_name_for_tasks_and_methods(ray_cluster):
    with pytest.raises(ValueError, match="num_returns='dynamic' is not supported"):
        pid.options(num_returns="dynamic")
    counter = Counter.remote()
    with pytest.raises(ValueError, match="num_returns='dynamic' is not supported"):
        counter.bump.options(num_returns="dynamic")
