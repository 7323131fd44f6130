"""`oxray.serve` driven as Ray Serve's docs drive it: deployments of classes and
functions, application graphs composed through handles, `serve.run`/`status`/
`delete`/`shutdown`, `user_config` with `reconfigure`, a constructor that raises,
health checks, a crashed replica, a rolling redeploy, and options refused by name."""

import os
import signal

import pytest

import oxray as ray
from oxray import serve
from oxray.serve import handle as handles
from oxray.serve.exceptions import RequestCancelledError
from oxray.serve.handle import DeploymentHandle
from oxray_testutil import wait_until

pytestmark = pytest.mark.usefixtures("clean_serve")
LIGHT = {"num_cpus": 0.1}
# Each test deployment stops after 0.1 s of no requests rather than Ray's 2 s wait loop.


@serve.deployment(ray_actor_options=LIGHT, graceful_shutdown_wait_loop_s=0.1)
class Adder:
    def __init__(self, increment):
        self.increment = increment

    def __call__(self, x):
        return x + self.increment

    async def pid(self):
        return os.getpid()


@serve.deployment(ray_actor_options=LIGHT, graceful_shutdown_wait_loop_s=0.1)
class Ingress:
    def __init__(self, adder: DeploymentHandle):
        self.adder = adder

    async def __call__(self, x):
        # A response passed on, and one awaited.
        doubled = self.adder.remote(x)
        return await self.adder.remote(doubled)


def test_a_graph_runs_through_handles_and_reports_ray_statuses():
    handle = serve.run(Ingress.bind(Adder.options(num_replicas=2).bind(10)), name="math")
    assert handle.remote(1).result(timeout_s=30) == 21
    status = serve.status()
    app = status.applications["math"]
    assert app.status == "RUNNING" and app.status.value == "RUNNING"
    assert app.deployments["Adder"].replica_states == {"RUNNING": 2}
    assert app.deployments["Ingress"].status == "HEALTHY"
    assert app.deployments["Ingress"].status_trigger == "CONFIG_UPDATE_COMPLETED"
    adder = serve.get_deployment_handle("Adder", "math")
    pids = {adder.pid.remote().result() for _ in range(40)}
    assert len(pids) == 2, "calls spread over both replicas"
    assert serve.get_app_handle("math").remote(5).result() == 25
    # A response passed into another call reaches it as its value; the inner one, never collected,
    # is no longer counted in flight once it finished (the autoscaler's metric).
    assert adder.remote(adder.remote(1)).result() == 21
    router = handles._router("math", "Adder")
    router.prune()
    assert router.load() == 0

    serve.delete("math")
    assert "math" not in serve.status().applications
    with pytest.raises(serve.exceptions.RayServeException, match="Application 'math' does not exist"):
        serve.get_app_handle("math")
    # Deployed again under the same name (its replica ids repeat): calls reach the new replicas.
    handle = serve.run(Ingress.bind(Adder.bind(10)), name="math")
    assert handle.remote(1).result(timeout_s=30) == 21


@serve.deployment(ray_actor_options=LIGHT, graceful_shutdown_wait_loop_s=0.1)
class Sum:
    def __init__(self, first: DeploymentHandle, rest: list):
        self.handles = [first, *rest]

    async def __call__(self, x):
        return [await h.remote(x) for h in self.handles]


def test_a_deployment_bound_twice_is_two_deployments_and_lists_of_them_are_resolved():
    # As Ray's build_app: the second Adder is renamed Adder_1 and keeps its own arguments.
    handle = serve.run(Sum.bind(Adder.bind(1), [Adder.bind(100)]), name="sum", route_prefix="/sum")
    assert handle.remote(1).result(timeout_s=30) == [2, 101]
    assert set(serve.status().applications["sum"].deployments) == {"Sum", "Adder", "Adder_1"}


@serve.deployment(ray_actor_options=LIGHT, graceful_shutdown_wait_loop_s=0.1)
def shout(text):
    return text.upper()


@serve.deployment(ray_actor_options=LIGHT, graceful_shutdown_wait_loop_s=0.1, user_config={"threshold": 0.5})
class Thresholded:
    def __init__(self):
        self.threshold = None

    def reconfigure(self, config):
        self.threshold = config["threshold"]

    def __call__(self, x):
        return x > self.threshold


def test_function_deployments_and_user_config_reach_the_replicas():
    assert serve.run(shout.bind(), name="fn", route_prefix="/fn").remote("hi").result() == "HI"
    handle = serve.run(Thresholded.bind(), name="cfg", route_prefix="/cfg")
    assert handle.remote(0.7).result() is True
    # serve.run again with another user_config: a new version, rolled in.
    handle = serve.run(Thresholded.options(user_config={"threshold": 0.9}).bind(), name="cfg", route_prefix="/cfg")
    assert handle.remote(0.7).result() is False
    assert serve.status().applications["cfg"].deployments["Thresholded"].replica_states == {"RUNNING": 1}


@serve.deployment(ray_actor_options=LIGHT, graceful_shutdown_wait_loop_s=0.1)
class NoWeights:
    def __init__(self):
        raise ValueError("no weights at /models/missing.pt")


def test_a_constructor_that_raises_fails_the_deploy_with_its_traceback():
    with pytest.raises(RuntimeError, match="no weights at /models/missing.pt"):
        serve.run(NoWeights.bind(), name="broken", route_prefix="/broken")
    app = serve.status().applications["broken"]
    assert app.status == "DEPLOY_FAILED"
    deployment = app.deployments["NoWeights"]
    assert deployment.status == "DEPLOY_FAILED" and deployment.status_trigger == "REPLICA_STARTUP_FAILED"
    assert "Traceback" in deployment.message and "ValueError" in deployment.message
    assert deployment.replica_states == {}, "no retry loop"


@serve.deployment(
    ray_actor_options=LIGHT, graceful_shutdown_wait_loop_s=0.1, health_check_period_s=0.2, health_check_timeout_s=5
)
class Flaky:
    def __init__(self, flag):
        self.flag = flag

    def check_health(self):
        if os.path.exists(self.flag):
            raise RuntimeError("the GPU fell off")

    def __call__(self):
        return os.getpid()


def test_failed_health_checks_and_a_crash_replace_the_replica(tmp_path):
    flag = str(tmp_path / "unhealthy")
    handle = serve.run(Flaky.bind(flag), name="flaky", route_prefix="/flaky")
    first = handle.remote().result()
    open(flag, "w").close()
    wait_until(
        "the unhealthy replica to be reported",
        lambda: serve.status().applications["flaky"].deployments["Flaky"].status == "UNHEALTHY",
        timeout=60,
    )
    assert "the GPU fell off" in serve.status().applications["flaky"].deployments["Flaky"].message
    os.remove(flag)
    wait_until(
        "a healthy replacement",
        lambda: serve.status().applications["flaky"].deployments["Flaky"].status == "HEALTHY",
        timeout=60,
    )
    second = handle.remote().result(timeout_s=30)
    assert second != first
    # A replica killed from outside is replaced too: the call that finds it dead tells the
    # controller, and `.result()` sends it once more, to the replacement.
    os.kill(second, signal.SIGKILL)
    assert handle.remote().result(timeout_s=60) != second


def test_bad_and_unsupported_options_are_refused_by_name():
    with pytest.raises(ValueError, match="num_replicas is expected to larger than 0"):
        serve.deployment(num_replicas=0)
    with pytest.raises(ValueError, match="ray_actor_options has keys \\['max_restarts'\\]"):
        serve.deployment(ray_actor_options={"max_restarts": 3})
    with pytest.raises(TypeError, match="unexpected option 'colour'"):
        Adder.options(colour="blue")
    with pytest.raises(ValueError, match="max_queued_requests=0"):
        Adder.options(max_queued_requests=0)
    with pytest.raises(ValueError, match="status_code=500"):
        Adder.options(backpressure_config={"status_code": 500})
    with pytest.raises(RuntimeError, match="Use `.bind\\(\\)`"):
        Adder(1)
    with pytest.raises(ValueError, match="function deployments take no init_args"):
        shout.bind("x")
    with pytest.raises(ValueError, match="graceful_shutdown_wait_loop_s=-1"):
        Adder.options(graceful_shutdown_wait_loop_s=-1)
    with pytest.raises(ValueError, match="max_constructor_retry_count='3'"):
        Adder.options(max_constructor_retry_count="3")
    # num_replicas="auto" allows up to 100 replicas: a min above 1 is no error.
    Adder.options(num_replicas="auto", autoscaling_config={"min_replicas": 2})
    serve.run(Adder.bind(1), name="first", route_prefix="/same")
    with pytest.raises(Exception, match='route_prefix "/same" is already used by application "first"'):
        serve.run(Adder.bind(2), name="second", route_prefix="/same")
    # Actor options Ray refuses fail the deploy with Ray's message, instead of a replica left STARTING.
    with pytest.raises(RuntimeError, match="The option 'num_cpus' must be >= 0, got -1"):
        serve.run(Adder.options(ray_actor_options={"num_cpus": -1}).bind(1), name="bad", route_prefix="/bad")
    assert serve.status().applications["bad"].deployments["Adder"].replica_states == {}
    # A handle to a deployment that failed fails at once, not after waiting for a replica.
    with pytest.raises(serve.exceptions.RayServeException, match="DEPLOY_FAILED"):
        serve.get_app_handle("bad").remote(1)


@serve.deployment(ray_actor_options=LIGHT, graceful_shutdown_wait_loop_s=0.1, max_ongoing_requests=2)
class Gate:
    def __init__(self, directory):
        self.directory = directory

    def __call__(self, i):
        import time

        open(os.path.join(self.directory, f"in-{i}"), "w").close()
        while not os.path.exists(os.path.join(self.directory, "open")):
            time.sleep(0.01)
        return i


def test_max_ongoing_requests_bounds_what_runs_in_a_replica_at_once(tmp_path):
    handle = serve.run(Gate.bind(str(tmp_path)), name="gate", route_prefix="/gate")
    responses = [handle.remote(i) for i in range(5)]
    wait_until("two requests to run", lambda: len([n for n in os.listdir(tmp_path) if n.startswith("in-")]) == 2)
    # Health checks still run beside them (their own group): the deployment stays HEALTHY.
    assert serve.status().applications["gate"].deployments["Gate"].status == "HEALTHY"
    ray.get(ray.remote(lambda: 0).remote())  # one more round trip: nothing else started meanwhile
    assert len([n for n in os.listdir(tmp_path) if n.startswith("in-")]) == 2
    # A call still waiting in the handle, cancelled, is never sent.
    responses[4].cancel()
    assert responses[4].cancelled()
    with pytest.raises(RequestCancelledError):
        responses[4].result(timeout_s=30)
    open(tmp_path / "open", "w").close()
    assert sorted(r.result(timeout_s=30) for r in responses[:4]) == [0, 1, 2, 3]
    assert not os.path.exists(tmp_path / "in-4")


@serve.deployment(
    ray_actor_options=LIGHT,
    graceful_shutdown_wait_loop_s=0.1,
    max_ongoing_requests=1,
    autoscaling_config={
        "min_replicas": 1,
        "max_replicas": 3,
        "target_ongoing_requests": 1,
        "metrics_interval_s": 0.1,
        "look_back_period_s": 0.5,
        "upscale_delay_s": 0,
        "downscale_delay_s": 0.5,
    },
)
class Busy:
    def __init__(self, directory):
        self.directory = directory

    def __call__(self, i):
        import time

        with open(os.path.join(self.directory, f"started-{i}"), "w") as f:
            f.write(str(os.getpid()))
        while not os.path.exists(os.path.join(self.directory, "open")):
            time.sleep(0.01)
        return os.getpid()


def _started_on(directory):
    pids = set()
    for name in os.listdir(directory):
        if name.startswith("started-"):
            text = open(os.path.join(directory, name)).read()
            if text:
                pids.add(int(text))
    return pids


def test_a_load_step_scales_the_deployment_up_and_back_down(tmp_path):
    handle = serve.run(Busy.bind(str(tmp_path)), name="auto", route_prefix="/auto")

    def running():
        return serve.status().applications["auto"].deployments["Busy"].replica_states.get("RUNNING", 0)

    assert running() == 1
    responses = [handle.remote(i) for i in range(3)]
    # Three calls against one per replica: the two beyond max_ongoing_requests wait in the handle,
    # the deployment scales to three, and the waiting calls go to the new replicas.
    wait_until("each call on a replica of its own", lambda: len(_started_on(tmp_path)) == 3, timeout=60)
    assert running() == 3
    assert serve.status().applications["auto"].status == "RUNNING"
    open(tmp_path / "open", "w").close()
    assert len({r.result(timeout_s=30) for r in responses}) == 3
    wait_until("back to one replica", lambda: running() == 1 and _settled(), timeout=60)


def _settled():
    deployment = serve.status().applications["auto"].deployments["Busy"]
    return deployment.status == "HEALTHY" and deployment.replica_states == {"RUNNING": 1}


def test_autoscaling_options_are_checked():
    with pytest.raises(ValueError, match="Manually setting num_replicas is not allowed"):
        serve.deployment(num_replicas=2, autoscaling_config={"max_replicas": 3})
    with pytest.raises(ValueError, match="unknown fields \\['max_replica'\\]"):
        serve.deployment(autoscaling_config={"max_replica": 3})
    with pytest.raises(ValueError, match="min_replicas=4, max_replicas=2"):
        serve.deployment(autoscaling_config={"min_replicas": 4, "max_replicas": 2})
    with pytest.raises(NotImplementedError, match="policy"):
        serve.deployment(autoscaling_config={"policy": "my.module:policy"})


def test_a_replica_runs_in_a_placement_group_of_its_own(clean_serve):
    import oxray as ray
    from oxray.util import placement_group_table

    @serve.deployment(
        ray_actor_options={"num_cpus": 0.1},
        placement_group_bundles=[{"CPU": 0.1}, {"CPU": 0.2}],
        placement_group_strategy="PACK",
    )
    class Grouped:
        def __call__(self, _):
            from oxray.util import get_current_placement_group

            @ray.remote(num_cpus=0.2)
            def child():
                return get_current_placement_group().id.hex()

            group = get_current_placement_group()
            return group.bundle_specs, group.id.hex(), ray.get(child.remote())

    handle = serve.run(Grouped.bind(), name="grouped", route_prefix=None)
    bundles, group, childs_group = handle.remote(None).result()
    assert bundles == [{"CPU": 0.1}, {"CPU": 0.2}]
    assert childs_group == group, "the replica's tasks run in its group"
    serve.delete("grouped")
    wait_until(
        lambda: f"the replica's group removed: {placement_group_table().get(group)}",
        lambda: placement_group_table()[group]["state"] == "REMOVED",
        timeout=30,
    )

    def f(_):
        return 1

    with pytest.raises(ValueError, match=r"do not fit placement_group_bundles\[0\]"):
        serve.deployment(ray_actor_options={"num_cpus": 1}, placement_group_bundles=[{"CPU": 0.5}])(f)
    with pytest.raises(ValueError, match="placement_group_strategy was given without placement_group_bundles"):
        serve.deployment(placement_group_strategy="SPREAD")(f)
    with pytest.raises(ValueError):
        serve.deployment(
            ray_actor_options={"num_cpus": 0}, placement_group_bundles=[{"CPU": 1}], placement_group_strategy="MOON"
        )(f)


@serve.deployment(ray_actor_options=LIGHT, graceful_shutdown_wait_loop_s=0.1)
class Streamer:
    def __call__(self, n):
        for i in range(n):
            yield i * 10

    async def words(self, text):
        for word in text.split():
            yield word.upper()

    def model(self, n):
        for _ in range(n):
            yield serve.get_multiplexed_model_id()

    def plain(self, x):
        return x


@serve.deployment(ray_actor_options=LIGHT, graceful_shutdown_wait_loop_s=0.1)
class Relay:
    def __init__(self, streamer: DeploymentHandle):
        self.streamer = streamer.options(stream=True)

    async def __call__(self, text):
        return [w async for w in self.streamer.words.remote(text)]


def test_generator_methods_stream_through_handles_with_stream_true():
    handle = serve.run(Streamer.bind(), name="stream", route_prefix=None)
    streaming = handle.options(stream=True)
    gen = streaming.remote(4)
    assert isinstance(gen, serve.DeploymentResponseGenerator)
    assert list(gen) == [0, 10, 20, 30]
    assert list(streaming.words.remote("two words")) == ["TWO", "WORDS"]
    assert list(streaming.options(multiplexed_model_id="m7").model.remote(2)) == ["m7", "m7"]
    # Ray's errors for the wrong kind of call.
    with pytest.raises(TypeError, match="non-generator"):
        list(streaming.plain.remote(1))
    with pytest.raises(TypeError, match=r"handle.options\(stream=True\)"):
        handle.remote(2).result()
    with pytest.raises(TypeError, match="no single result"):
        streaming.remote(1).result()
    # A deployment iterating another's stream with `async for`.
    relay = serve.run(Relay.bind(Streamer.bind()), name="relay", route_prefix=None)
    assert relay.remote("a b c").result() == ["A", "B", "C"]


def test_run_many_deploys_every_target_and_returns_their_handles():
    first, second = serve.run_many(
        [
            serve.RunTarget(Adder.bind(1), name="one", route_prefix=None),
            serve.RunTarget(Adder.bind(2), name="two", route_prefix=None),
        ]
    )
    assert (first.remote(10).result(), second.remote(10).result()) == (11, 12)
    assert {"one", "two"} <= set(serve.status().applications)
    with pytest.raises(ValueError, match="unique"):
        serve.run_many([serve.RunTarget(Adder.bind(1), name="x"), serve.RunTarget(Adder.bind(2), name="x")])
    with pytest.raises(TypeError, match="RunTarget"):
        serve.run_many([Adder.bind(1)])
