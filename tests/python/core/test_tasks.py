"""Remote functions (tasks): submission, options, arguments, errors, wait/cancel,
runtime context, runtime_env and worker processes."""

import os
import time

import pytest

import oxray as ray
from oxray_testutil import printed_output, wait_until

TIMEOUT = 60  # generous upper bound for any single ray.get in this module


# ---------------------------------------------------------------- functions


@ray.remote
def add(a, b):
    return a + b


@ray.remote(num_cpus=1, max_retries=0)
def mul(a, b):
    return a * b


@ray.remote
def getpid():
    return os.getpid()


@ray.remote
def two_values(x):
    return x, x * 10


@ray.remote(num_returns=2)
def split_pair(x):
    return x + 1, x + 2


@ray.remote
def describe(*args, **kwargs):
    """Report the types/values the task actually received."""
    return (
        [(type(a).__name__, a) for a in args],
        {k: (type(v).__name__, v) for k, v in kwargs.items()},
        any(isinstance(a, ray.ObjectRef) for a in args) or any(isinstance(v, ray.ObjectRef) for v in kwargs.values()),
    )


@ray.remote
def kw_only(a, *, scale=1, offset=0):
    return a * scale + offset


@ray.remote
def chain(n):
    """Each level blocks in ray.get on the next level."""
    if n == 0:
        return 0
    return ray.get(chain.remote(n - 1), timeout=TIMEOUT) + 1


@ray.remote
def fanout(k):
    return sum(ray.get([add.remote(i, 0) for i in range(k)], timeout=TIMEOUT))


@ray.remote
def raise_value_error(x):
    raise ValueError(f"bad value {x}")


@ray.remote
def wait_for_gate(gate, started=None):
    if started:
        open(started, "w").close()
    return wait_until("the gate to open", lambda: os.path.exists(gate), timeout=60)


@ray.remote
def sleep_long(started):
    open(started, "w").close()
    # Short sleeps: a non-forced cancel interrupts Python code between
    # bytecodes (KeyboardInterrupt), as in Ray, not inside one long C call.
    for _ in range(1200):
        time.sleep(0.05)
    return "finished"


@ray.remote
def sleep_blocking(started):
    open(started, "w").close()
    time.sleep(60)
    return "finished"


@ray.remote
def context_ids():
    ctx = ray.get_runtime_context()
    return ctx.get_node_id(), ctx.get_job_id(), ctx.get_task_id(), ctx.get_actor_id()


@ray.remote
def read_env(name):
    return os.environ.get(name)


@ray.remote
def print_token(token):
    print(token, flush=True)
    return os.getpid()


def _is_hex(s):
    if not isinstance(s, str) or not s:
        return False
    int(s, 16)
    return True


# -------------------------------------------------------------------- tests


def test_bare_remote_function(ray_cluster):
    ref = add.remote(1, 2)
    assert isinstance(ref, ray.ObjectRef)
    assert ray.get(ref, timeout=TIMEOUT) == 3


def test_tasks_run_in_reused_worker_processes(ray_cluster):
    pids = [ray.get(getpid.remote(), timeout=TIMEOUT) for _ in range(30)]
    assert os.getpid() not in pids
    # 30 sequential tasks must not start 30 processes: workers are reused.
    assert len(set(pids)) <= 4, pids
    # Concurrent tasks also run outside the driver.
    assert os.getpid() not in ray.get([getpid.remote() for _ in range(6)], timeout=TIMEOUT)


def test_remote_function_with_decorator_options(ray_cluster):
    assert ray.get(mul.remote(6, 7), timeout=TIMEOUT) == 42


def test_calling_remote_function_directly_is_an_error(ray_cluster):
    # Ray: "Remote functions cannot be called directly. Use f.remote()".
    with pytest.raises(TypeError, match="remote"):
        add(1, 2)


def test_options_returns_new_callable_and_keeps_original(ray_cluster):
    tuned = add.options(num_cpus=0.5, max_retries=2)
    assert ray.get(tuned.remote(20, 22), timeout=TIMEOUT) == 42
    # The original remote function is unchanged and still works.
    assert ray.get(add.remote(1, 1), timeout=TIMEOUT) == 2
    # A single-return task returning a tuple returns the tuple as one value.
    assert ray.get(two_values.remote(3), timeout=TIMEOUT) == (3, 30)


def test_num_returns_two(ray_cluster):
    refs = two_values.options(num_returns=2).remote(4)
    assert isinstance(refs, list) and len(refs) == 2
    assert all(isinstance(r, ray.ObjectRef) for r in refs)
    assert refs[0] != refs[1]
    assert ray.get(refs[0], timeout=TIMEOUT) == 4
    assert ray.get(refs[1], timeout=TIMEOUT) == 40

    a, b = split_pair.remote(10)  # num_returns=2 given in the decorator
    assert ray.get([a, b], timeout=TIMEOUT) == [11, 12]


def test_objectref_args_are_resolved_before_the_task_runs(ray_cluster):
    put_ref = ray.put(5)
    task_ref = add.remote(2, 3)  # produced by another task
    chained = add.remote(put_ref, task_ref)
    assert ray.get(chained, timeout=TIMEOUT) == 10

    args, kwargs, saw_ref = ray.get(
        describe.remote(put_ref, task_ref, "plain", k=ray.put({"x": 1}), n=7),
        timeout=TIMEOUT,
    )
    assert saw_ref is False
    assert args == [("int", 5), ("int", 5), ("str", "plain")]
    assert kwargs == {"k": ("dict", {"x": 1}), "n": ("int", 7)}


def test_kwargs(ray_cluster):
    assert ray.get(kw_only.remote(3), timeout=TIMEOUT) == 3
    assert ray.get(kw_only.remote(3, scale=4), timeout=TIMEOUT) == 12
    assert ray.get(kw_only.remote(3, offset=1, scale=2), timeout=TIMEOUT) == 7
    assert ray.get(add.remote(b=2, a=40), timeout=TIMEOUT) == 42


def test_nested_tasks_release_cpu_while_blocked(ray_cluster):
    # With 2 CPUs a chain of 6 blocking levels (and two fan-outs whose parents
    # hold both CPUs) only completes if a worker blocked in ray.get gives its
    # CPU back while it waits.
    assert ray.get(chain.remote(6), timeout=TIMEOUT * 2) == 6
    assert ray.get([fanout.remote(3), fanout.remote(4)], timeout=TIMEOUT * 2) == [3, 6]


def test_task_exception_is_value_error_and_ray_task_error(ray_cluster):
    ref = raise_value_error.remote(42)
    with pytest.raises(ValueError) as excinfo:
        ray.get(ref, timeout=TIMEOUT)
    err = excinfo.value
    assert isinstance(err, ValueError)
    assert isinstance(err, ray.exceptions.RayTaskError)
    assert isinstance(err, ray.exceptions.RayError)
    text = str(err)
    assert "raise_value_error" in text  # the remote traceback names the function
    assert "bad value 42" in text
    assert "ValueError" in text

    # The error is stored: getting it again raises again.
    with pytest.raises(ray.exceptions.RayTaskError):
        ray.get(ref, timeout=TIMEOUT)

    # A task that depends on the failed result fails too, with the cause.
    with pytest.raises(ray.exceptions.RayTaskError) as dep:
        ray.get(add.remote(ref, 1), timeout=TIMEOUT)
    assert "bad value 42" in str(dep.value)


def test_a_failed_object_among_several_raises_without_waiting_for_the_rest(ray_cluster, tmp_path):
    gate = str(tmp_path / "gate")
    slow = wait_for_gate.remote(gate)
    bad = raise_value_error.remote(7)
    try:
        # The slow task waits for a gate only this test opens, after the get: the get must
        # raise the failed task's error while the slow one still runs.
        with pytest.raises(ray.exceptions.RayTaskError) as err:
            ray.get([slow, bad, slow], timeout=TIMEOUT)
        assert "bad value 7" in str(err.value)
        assert ray.wait([slow], timeout=0)[0] == [], "the slow task is still running"
    finally:
        open(gate, "w").close()
    assert ray.get([slow, slow], timeout=TIMEOUT) == [True, True]


def test_get_timeout(ray_cluster, tmp_path):
    gate = str(tmp_path / "gate")
    ref = wait_for_gate.remote(gate)
    try:
        start = time.monotonic()
        with pytest.raises(ray.exceptions.GetTimeoutError):
            ray.get(ref, timeout=0.5)
        assert time.monotonic() - start >= 0.4  # it waited its timeout out
        # GetTimeoutError is a RayError (and a TimeoutError, as in Ray).
        assert issubclass(ray.exceptions.GetTimeoutError, ray.exceptions.RayError)
        assert issubclass(ray.exceptions.GetTimeoutError, TimeoutError)
    finally:
        open(gate, "w").close()
    assert ray.get(ref, timeout=TIMEOUT) is True


def test_wait_partitions_ready_and_not_ready(ray_cluster, tmp_path):
    gate = str(tmp_path / "gate")
    slow = wait_for_gate.remote(gate)
    fast = [add.remote(i, i) for i in range(3)]
    refs = [slow] + fast
    try:
        ready, not_ready = ray.wait(refs, num_returns=3, timeout=TIMEOUT)
        assert len(ready) == 3 and len(not_ready) == 1
        assert set(ready) == set(fast)
        assert not_ready == [slow]

        # Asking for more than are ready: returns at the timeout with what is ready.
        ready, not_ready = ray.wait(refs, num_returns=4, timeout=0.5)
        assert set(ready) == set(fast) and not_ready == [slow]

        # Default num_returns=1.
        ready, not_ready = ray.wait(refs)
        assert len(ready) == 1 and len(not_ready) == 3
        assert ready[0] in fast
        assert set(ready) | set(not_ready) == set(refs)
    finally:
        open(gate, "w").close()

    ready, not_ready = ray.wait(refs, num_returns=4, timeout=TIMEOUT)
    assert set(ready) == set(refs) and not_ready == []

    # num_returns caps the ready list even when everything is done.
    ready, not_ready = ray.wait(refs, num_returns=2, timeout=TIMEOUT)
    assert len(ready) == 2 and len(not_ready) == 2
    assert set(ready) | set(not_ready) == set(refs)
    assert not set(ready) & set(not_ready)
    assert ray.get(fast, timeout=TIMEOUT) == [0, 2, 4]


def test_cancel_running_task(ray_cluster, tmp_path):
    started = str(tmp_path / "started")
    ref = sleep_long.remote(started)
    wait_until("the task to start", lambda: os.path.exists(started), timeout=60)
    ray.cancel(ref)
    # The cancel ends it (TaskCancelledError), not the get's timeout.
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(ref, timeout=60)
    # The cluster is still usable afterwards.
    assert ray.get(add.remote(1, 1), timeout=TIMEOUT) == 2


def test_force_cancel_kills_the_worker(ray_cluster, tmp_path):
    started = str(tmp_path / "started")
    ref = sleep_blocking.remote(started)
    wait_until("the task to start", lambda: os.path.exists(started), timeout=60)
    ray.cancel(ref, force=True)
    # Ray documents WorkerCrashedError for force=True (the worker exits).
    with pytest.raises((ray.exceptions.WorkerCrashedError, ray.exceptions.TaskCancelledError)):
        ray.get(ref, timeout=30)
    assert ray.get(add.remote(2, 2), timeout=TIMEOUT) == 4


def test_cancel_queued_task(ray_cluster, tmp_path):
    gate = str(tmp_path / "gate")
    # Fill both CPUs, then queue a third task behind them and cancel it.
    blockers = [wait_for_gate.remote(gate, str(tmp_path / f"s{i}")) for i in range(2)]
    try:
        wait_until(
            "both blockers to start", lambda: all(os.path.exists(tmp_path / f"s{i}") for i in range(2)), timeout=60
        )
        queued = add.remote(1, 2)
        ray.cancel(queued)
        with pytest.raises(ray.exceptions.TaskCancelledError):
            ray.get(queued, timeout=30)
    finally:
        open(gate, "w").close()
    assert ray.get(blockers, timeout=TIMEOUT) == [True, True]


def test_runtime_context_ids(ray_cluster):
    node_id, job_id, task_id, actor_id = ray.get(context_ids.remote(), timeout=TIMEOUT)
    for value in (node_id, job_id, task_id):
        assert _is_hex(value), value
    assert actor_id is None  # a normal task is not an actor

    driver_ctx = ray.get_runtime_context()
    assert driver_ctx.get_node_id() == node_id  # single-node cluster
    assert driver_ctx.get_job_id() == job_id  # same job as the driver
    assert driver_ctx.get_task_id() != task_id

    _, _, other_task_id, _ = ray.get(context_ids.remote(), timeout=TIMEOUT)
    assert _is_hex(other_task_id) and other_task_id != task_id


def test_runtime_env_env_vars_via_options(ray_cluster):
    name = "OXRAY_TEST_OPTIONS_VAR"
    assert name not in os.environ
    env = {"env_vars": {name: "from-options"}}
    assert ray.get(read_env.options(runtime_env=env).remote(name), timeout=TIMEOUT) == ("from-options")
    # It does not leak into tasks that did not ask for it, nor into the driver.
    assert ray.get(read_env.remote(name), timeout=TIMEOUT) is None
    assert name not in os.environ


def test_runtime_env_env_vars_via_init(fresh_cluster):
    name = "OXRAY_TEST_INIT_VAR"
    fresh_cluster(runtime_env={"env_vars": {name: "from-init"}})
    assert ray.get(read_env.remote(name), timeout=TIMEOUT) == "from-init"
    # A task-level runtime_env env var is merged with the job-level one.
    both = read_env.options(runtime_env={"env_vars": {"OXRAY_OTHER": "x"}})
    assert ray.get(both.remote(name), timeout=TIMEOUT) == "from-init"
    assert ray.get(both.remote("OXRAY_OTHER"), timeout=TIMEOUT) == "x"


def test_print_in_task_reaches_driver_stdout(ray_cluster):
    token = "oxray-print-token-7f3a91"
    with printed_output() as printed:
        worker_pid = ray.get(print_token.remote(token), timeout=TIMEOUT)

        def token_line():
            return next((line for line in printed.out.splitlines() if token in line), None)

        line = wait_until(
            lambda: f"the task's output on the driver's stdout: {printed.out!r}", token_line, timeout=30, interval=0.1
        )
    assert f"pid={worker_pid}" in line


def test_task_output_goes_through_sys_stdout_and_stderr(ray_cluster):
    # As Ray's driver prints it: through Python's sys.stdout/sys.stderr, so a notebook cell or a
    # test's capture (which may replace sys.stdout only, not the descriptors) shows it.
    marker = f"oxray-sys-stdout-{os.getpid()}"
    with printed_output() as printed:
        ray.get(print_to_both.remote(marker), timeout=TIMEOUT)

        def both_seen():
            return (
                all(f"{marker} {what}" in printed.out for what in ("out", "partial")) and f"{marker} err" in printed.err
            )

        wait_until(
            lambda: f"the task's output on sys.stdout and sys.stderr: {printed.out!r} {printed.err!r}",
            both_seen,
            timeout=30,
            interval=0.1,
        )


@ray.remote
def print_to_both(marker):
    import sys

    print(f"{marker} out")
    print(f"{marker} err", file=sys.stderr)
    print(f"{marker} partial", end=" ")  # no newline: it still comes out while the worker lives on


@ray.remote
def print_marker(marker):
    print(marker)
    return True


def test_worker_output_is_kept_in_the_session_logs(fresh_cluster):
    ctx = fresh_cluster(num_cpus=1)
    marker = f"oxray-log-marker-{os.getpid()}"
    ray.get(print_marker.remote(marker), timeout=TIMEOUT)
    logs = os.path.join(ctx["session_dir"], "logs")

    def found():
        for name in os.listdir(logs):
            with open(os.path.join(logs, name), errors="replace") as f:
                if marker in f.read():
                    return name
        return None

    name = wait_until("the marker in the session logs", found, timeout=30)
    assert name.startswith("worker-"), os.listdir(logs)


@ray.remote
def waits_for_its_child():
    child = print_marker.remote("child ran")
    ready, _ = ray.wait([child], timeout=30)
    return len(ready)


def test_wait_inside_a_task_lends_its_cpu_to_children(fresh_cluster):
    fresh_cluster(num_cpus=1)
    assert ray.get(waits_for_its_child.remote(), timeout=60) == 1


def test_address_auto_uses_the_environment(monkeypatch):
    if ray.is_initialized():
        ray.shutdown()
    monkeypatch.delenv("OXRAY_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(ConnectionError):
        ray.init(address="auto")
    monkeypatch.setenv("OXRAY_ADDRESS", "127.0.0.1:1")
    monkeypatch.setenv("OXRAY_TOKEN", "x")
    with pytest.raises(ConnectionError, match="127.0.0.1:1"):
        ray.init(address="auto")
    assert not ray.is_initialized()
