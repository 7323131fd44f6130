"""Drivers that join a CLI-started cluster by address and then leave (cleanly or
SIGKILLed) are cleaned up: their tasks are cancelled, their non-detached actors
and placement groups removed, their objects freed. Killing a worker kills its
whole process group, so a task's own child processes die with it."""

import glob
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

import oxray as ray
from cli_cluster import MiB, running_cluster
from oxray._private.api import _client
from oxray_testutil import WaitTimeout, pid_alive, wait_until

# Joined drivers of these tests ping their agent often, and a silent one is
# dropped after this lease (the default is 30 s).
LEASE_ENV = {"OXRAY_DRIVER_LEASE_S": "3"}


@pytest.fixture
def cli_cluster(tmp_path, monkeypatch):
    """A head started with `oxray start` (not yet: `start_head`), stopped after the test."""
    with running_cluster(tmp_path / "oxray", monkeypatch, env=LEASE_ENV) as cluster:
        yield cluster


def start_head(cluster, num_cpus):
    cluster.start_head(num_cpus=num_cpus)


def node_pid(cluster):
    (record,) = cluster.records()
    return int(record["pid"])


def spill_files(cluster):
    return [p for p in glob.glob(os.path.join(cluster.root, "**", "spill", "*"), recursive=True) if os.path.isfile(p)]


def worker_pids(node):
    return [c.pid for c in psutil.Process(node).children() if "worker_main" in " ".join(c.cmdline())]


def anon_rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no RssAnon for pid {pid}")


def cpus_free(total):
    return ray.available_resources().get("CPU", 0) == total


def _wait_cpus_free(total, context=""):
    wait_until(
        lambda: f"{context}all {total} CPUs free ({ray.available_resources()})", lambda: cpus_free(total), timeout=60
    )


def run_driver(cluster, body, *, kill, while_stopped=None, address=None):
    """Runs `body` in a driver process joined to `cluster` and returns what it
    printed. The body prints READY when it has made what it makes; the driver
    then exits cleanly, or (`kill`) waits to be SIGKILLed. With `while_stopped`,
    the driver is SIGSTOPped (its connection stays open, its pings stop) and
    `while_stopped()` runs before it is killed."""
    script = "import os, sys, time\nimport numpy as np\nimport oxray as ray\n"
    script += f"ray.init(address={address or cluster.address!r})\n" + textwrap.dedent(body)
    script += "print('READY', flush=True)\n"
    if kill:
        script += "time.sleep(600)\n"
    env = cluster.env if address is None else {**cluster.env, "OXRAY_TOKEN": cluster.token}
    proc = subprocess.Popen(
        [sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    printed = []
    try:

        def ready_or_exited():
            line = proc.stdout.readline()
            printed.append(line.strip())
            return "ready" if line.strip() == "READY" else not line and proc.poll() is not None and "exited"

        try:
            outcome = wait_until("the driver to print READY", ready_or_exited, timeout=60, interval=0)
        except WaitTimeout:
            outcome = "timed out"
        if outcome != "ready":
            proc.kill()
            _, err = proc.communicate()
            raise AssertionError(f"the driver never got ready:\n{err[-3000:]}")
        if while_stopped is not None:
            proc.send_signal(signal.SIGSTOP)
            while_stopped()
        if kill:
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        if not kill:
            assert proc.returncode == 0, proc.stderr.read()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    return printed


SOAK_DRIVER = """
@ray.remote
class Holder:
    def __init__(self):
        self.data = np.ones(5 * 1024 * 1024, dtype=np.uint8)

    def pid(self):
        return os.getpid()

actors = [Holder.remote() for _ in range(2)]
print("ACTOR_PIDS", *ray.get([a.pid.remote() for a in actors], timeout=60), flush=True)
from oxray.util import placement_group
pg = placement_group([{"CPU": 1}])
ray.get(pg.ready(), timeout=60)
objects = [ray.put(np.full(25 * 1024 * 1024, i, dtype=np.uint8)) for i in range(4)]
"""


def test_joined_drivers_leave_nothing_behind_over_twenty_cycles(cli_cluster):
    """The issue's soak: 20 drivers (every other one SIGKILLed) each make two
    actors, a placement group and 100 MB of objects, then go."""
    num_cpus = 4
    start_head(cli_cluster, num_cpus)
    node = node_pid(cli_cluster)
    ray.init(address=cli_cluster.address)
    rss_early = None
    for cycle in range(20):
        printed = run_driver(cli_cluster, SOAK_DRIVER, kill=cycle % 2 == 1)
        actor_pids = [int(p) for line in printed if line.startswith("ACTOR_PIDS") for p in line.split()[1:]]
        assert len(actor_pids) == 2, printed
        _wait_cpus_free(num_cpus, f"cycle {cycle}: ")
        wait_until(
            f"cycle {cycle}: the driver's actors {actor_pids} to exit",
            lambda pids=actor_pids: not any(map(pid_alive, pids)),
            timeout=60,
        )
        if cycle == 4:
            rss_early = anon_rss(node)
    _wait_cpus_free(num_cpus)

    # No actor of theirs is alive (the head's table).
    def live_actors():
        return [(a.class_name, a.state, a.death_cause) for a in _client().list_actors() if a.state != "DEAD"]

    wait_until(lambda: f"no live actor (live: {live_actors()})", lambda: not live_actors(), timeout=60)
    # Every actor's worker is gone: what is left is the task pool (at most a worker per CPU).
    wait_until(
        lambda: f"at most {num_cpus} workers (workers: {worker_pids(node)})",
        lambda: len(worker_pids(node)) <= num_cpus,
        timeout=60,
    )
    # 2 GB went through a 256 MiB store: had any of it been kept, it would have spilled.
    assert spill_files(cli_cluster) == []
    # And the whole store is free again: 200 MB more fit without spilling.
    held = [ray.put(b"x" * (50 * MiB)) for _ in range(4)]
    assert spill_files(cli_cluster) == []
    del held
    rss_late = anon_rss(node)
    print(f"agent RssAnon after cycle 5: {rss_early / MiB:.1f} MiB, after cycle 20: {rss_late / MiB:.1f} MiB")
    assert rss_late - rss_early < 16 * MiB, (rss_early, rss_late)


def test_a_silent_driver_is_dropped_when_its_lease_runs_out(cli_cluster):
    """A stopped driver keeps its connection open but stops pinging: after the
    lease (3 s here) its actors and placement group go all the same."""
    num_cpus = 4
    start_head(cli_cluster, num_cpus)
    ray.init(address=cli_cluster.address)

    def cleaned_up_while_stopped():
        _wait_cpus_free(num_cpus, "while the driver is stopped: ")
        wait_until(
            lambda: (
                f"the stopped driver's actors to be DEAD ({[(a.class_name, a.state) for a in _client().list_actors()]})"
            ),
            lambda: all(a.state == "DEAD" for a in _client().list_actors()),
            timeout=60,
        )

    run_driver(cli_cluster, SOAK_DRIVER, kill=True, while_stopped=cleaned_up_while_stopped)


RESUMED_DRIVER = """
import sys
import oxray as ray

@ray.remote
class Keeper:
    def ping(self):
        return 1

@ray.remote
def one():
    return 1

keeper = Keeper.remote()
assert ray.get(keeper.ping.remote()) == 1
print("READY", flush=True)
sys.stdin.readline()  # the test stops this process past its lease, then resumes it
try:
    ray.get(one.remote(), timeout=30)
    print("RESULT: ran", flush=True)
except Exception as e:
    print("RESULT:", type(e).__name__, e, flush=True)
"""


def test_a_driver_resumed_after_its_lease_is_told_its_session_ended(cli_cluster):
    """A driver stopped past its lease (a debugger, SIGSTOP) finds its work cleaned
    up when it resumes: its next call fails naming the lease, instead of hanging."""
    start_head(cli_cluster, 2)
    ray.init(address=cli_cluster.address)
    script = f"import oxray as ray\nray.init(address={cli_cluster.address!r})\n" + RESUMED_DRIVER
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        env=cli_cluster.env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "READY", proc.stderr.read()[-3000:]
        proc.send_signal(signal.SIGSTOP)
        wait_until(
            "the stopped driver's actors to be DEAD",
            lambda: all(a.state == "DEAD" for a in _client().list_actors()),
            timeout=60,
        )
        proc.send_signal(signal.SIGCONT)
        out, err = proc.communicate("go\n", timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    result = [line for line in out.splitlines() if line.startswith("RESULT:")]
    assert result and "OXRAY_DRIVER_LEASE_S" in result[0], (out, err[-3000:])


SIX_SLOW_TASKS = """
@ray.remote(num_cpus=1)
def slow(marker_dir, i):
    with open(os.path.join(marker_dir, f"{i}.{os.getpid()}"), "w"):
        pass
    time.sleep(600)  # only a kill ends it in the test's time

marker_dir = os.environ["MARKERS"]
refs = [slow.remote(marker_dir, i) for i in range(6)]
while len(os.listdir(marker_dir)) < 2:
    time.sleep(0.05)
"""


@ray.remote
def one_line():
    return "ran"


def test_sigkilled_drivers_queued_tasks_are_cancelled(cli_cluster, tmp_path):
    num_cpus = 2
    start_head(cli_cluster, num_cpus)
    markers = tmp_path / "markers"
    markers.mkdir()
    cli_cluster.env["MARKERS"] = str(markers)
    run_driver(cli_cluster, SIX_SLOW_TASKS, kill=True)
    started = os.listdir(markers)
    assert len(started) == 2, started
    ray.init(address=cli_cluster.address)
    # The running two are killed (nothing else ends them or frees their CPUs in time: they sleep
    # 600 s) and the queued four dropped (none ran).
    _wait_cpus_free(num_cpus)
    for name in started:
        pid = int(name.split(".")[1])
        wait_until(f"task worker {pid} to be killed", lambda pid=pid: not pid_alive(pid), timeout=60)
    assert ray.get(one_line.remote(), timeout=60) == "ran"
    assert sorted(os.listdir(markers)) == sorted(started), "a queued task of the dead driver ran"


@ray.remote
def spawn_grandchild(path):
    child = subprocess.Popen(["sleep", "600"])
    with open(path + ".tmp", "w") as f:
        f.write(str(child.pid))
    os.replace(path + ".tmp", path)
    time.sleep(600)


@ray.remote
class Spawner:
    def spawn(self, path):
        child = subprocess.Popen(["sleep", "600"])
        with open(path + ".tmp", "w") as f:
            f.write(str(child.pid))
        os.replace(path + ".tmp", path)
        return child.pid


def read_pid(path):
    wait_until(f"{path} to appear", lambda: os.path.exists(path), timeout=60)
    with open(path) as f:
        return int(f.read())


ACROSS_NODES = """
@ray.remote(resources={"node_a": 0.1})
class Remote:
    def pid(self):
        return os.getpid()

def write_pid(marker):
    with open(marker + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(marker + ".tmp", marker)

@ray.remote(resources={"node_a": 0.1})
def nested(marker):
    write_pid(marker)
    time.sleep(600)

@ray.remote(resources={"node_a": 0.1})
def busy(marker):
    write_pid(marker)
    ray.get(nested.remote(marker + "-nested"))

from oxray.util import placement_group
pg = placement_group([{"CPU": 1}])
ray.get(pg.ready(), timeout=60)
actor = Remote.remote()
print("ACTOR_PIDS", ray.get(actor.pid.remote(), timeout=60), flush=True)
marker = os.path.join(os.environ["MARKERS"], "busy")
task = busy.remote(marker)
while not os.path.exists(marker + "-nested"):
    time.sleep(0.05)
"""


@pytest.mark.parametrize("kill", [False, True], ids=["clean_exit", "sigkill"])
def test_a_driver_joined_to_a_worker_node_is_cleaned_up_on_the_head_node_too(cli_cluster, tmp_path, kill):
    """The driver joins the second node's agent; its actor and task run on the
    head's node (forwarded there), and so does a task that task submitted (owned
    by the head's node); its placement group lives at the head."""
    cli_cluster.cli(
        "start",
        "--head",
        "--dashboard-port",
        "0",
        "--port",
        str(cli_cluster.port),
        "--num-cpus",
        "2",
        "--resources",
        '{"node_a": 1}',
    )
    cli_cluster.add_node(num_cpus=1, resources={"node_b": 1})
    agent_b = next(r for r in cli_cluster.records() if not r["head"])
    ray.init(address=cli_cluster.address)
    cli_cluster.wait_nodes(2)
    markers = tmp_path / "markers"
    markers.mkdir()
    cli_cluster.env["MARKERS"] = str(markers)
    printed = run_driver(cli_cluster, ACROSS_NODES, kill=kill, address=agent_b["address"])
    actor_pid = int(next(line for line in printed if line.startswith("ACTOR_PIDS")).split()[1])
    task_pid = int((markers / "busy").read_text())
    wait_until("the driver's actor on the head node to exit", lambda: not pid_alive(actor_pid), timeout=60)
    wait_until("the driver's task on the head node to stop", lambda: not pid_alive(task_pid), timeout=60)
    nested_pid = int((markers / "busy-nested").read_text())
    wait_until("the task's nested task to stop", lambda: not pid_alive(nested_pid), timeout=60)
    _wait_cpus_free(3)
    assert ray.util.placement_group_table() == {} or all(
        row["state"] == "REMOVED" for row in ray.util.placement_group_table().values()
    )


@pytest.mark.parametrize("how", ["force_cancel", "actor_kill"])
def test_a_tasks_grandchild_dies_with_its_worker(fresh_cluster, tmp_path, how):
    fresh_cluster(num_cpus=2)
    path = str(tmp_path / "grandchild")
    if how == "force_cancel":
        ref = spawn_grandchild.remote(path)
        grandchild = read_pid(path)
        ray.cancel(ref, force=True)
        with pytest.raises(ray.exceptions.TaskCancelledError):
            ray.get(ref, timeout=30)
    else:
        actor = Spawner.remote()
        grandchild = ray.get(actor.spawn.remote(path), timeout=30)
        ray.kill(actor)
    try:
        wait_until(f"grandchild {grandchild} to die", lambda: not pid_alive(grandchild), timeout=60)
    finally:
        if pid_alive(grandchild):
            os.kill(grandchild, signal.SIGKILL)


EMBEDDED_DRIVER_WITH_GRANDCHILD = """
import os, subprocess, sys, time
import oxray as ray

@ray.remote
def spawn(path):
    child = subprocess.Popen(["sleep", "600"])
    with open(path + ".tmp", "w") as f:
        f.write(str(child.pid))
    os.replace(path + ".tmp", path)
    time.sleep(600)

ray.init(num_cpus=1)
ref = spawn.remote(sys.argv[1])
time.sleep(600)
"""


def test_a_sigkilled_embedded_drivers_task_children_die_too(tmp_path):
    """The agent dies with an embedded driver; its workers get their parent-death
    signal and take their process group (a task's children) with them."""
    path = str(tmp_path / "grandchild")
    driver = subprocess.Popen([sys.executable, "-c", EMBEDDED_DRIVER_WITH_GRANDCHILD, path])
    try:
        grandchild = read_pid(path)
        driver.kill()
        driver.wait(timeout=30)
        wait_until(f"grandchild {grandchild} to die", lambda: not pid_alive(grandchild), timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
        if os.path.exists(path) and pid_alive(int(open(path).read())):
            os.kill(int(open(path).read()), signal.SIGKILL)


DETACHED_AND_NOT = """
@ray.remote
class Named:
    def pid(self):
        return os.getpid()

keep = Named.options(name="keep", namespace="cleanup", lifetime="detached").remote()
temp = Named.options(name="temp", namespace="cleanup").remote()
ray.get([keep.pid.remote(), temp.pid.remote()], timeout=60)
"""


@pytest.mark.parametrize("kill", [False, True], ids=["clean_exit", "sigkill"])
def test_detached_actor_survives_its_creators_exit(cli_cluster, kill):
    start_head(cli_cluster, 2)
    run_driver(cli_cluster, DETACHED_AND_NOT, kill=kill)
    ray.init(address=cli_cluster.address, namespace="cleanup")

    def temp_gone():
        try:
            ray.get_actor("temp")
        except ValueError:
            return True
        return False

    wait_until("the non-detached actor to go with its driver", temp_gone, timeout=60)
    keep = ray.get_actor("keep")
    assert ray.get(keep.pid.remote(), timeout=30) > 0
    ray.kill(keep)


DETACHED_WITH_HELPER = """
@ray.remote
def helper(x):
    return x + 1

@ray.remote(max_restarts=1)
class Keeper:
    def pid(self):
        return os.getpid()

    def call_helper(self, x):
        return ray.get(helper.remote(x), timeout=60)

keeper = Keeper.options(name="keeper", namespace="tables", lifetime="detached").remote()
assert ray.get(keeper.call_helper.remote(1), timeout=60) == 2
"""

# Each driver defines functions and a class no other driver has (the cycle number is in their code).
DISTINCT_FUNCTIONS = """
CYCLE = int(os.environ["CYCLE"])

@ray.remote
def square(x):
    return x * x + CYCLE * 0

@ray.remote
class Box:
    def __init__(self):
        self.cycle = CYCLE

    def get(self):
        return self.cycle

exec(f"@ray.remote\\ndef only_in_cycle_{CYCLE}():\\n    return {CYCLE}", globals())
assert ray.get(square.remote(3), timeout=60) == 9
assert ray.get(Box.remote().get.remote(), timeout=60) == CYCLE
assert ray.get(globals()[f"only_in_cycle_{CYCLE}"].remote(), timeout=60) == CYCLE
"""


def agent_functions():
    return _client().agent_table_sizes()[0]


def test_ended_jobs_functions_are_dropped_but_a_detached_actors_stay(cli_cluster, monkeypatch):
    """Joined drivers that register functions of their own come and go: the
    agent's function table goes back to what the surviving detached actor's job
    needs, and that actor can still be restarted and call its job's function."""
    start_head(cli_cluster, 2)
    run_driver(cli_cluster, DETACHED_WITH_HELPER, kill=False)
    ray.init(address=cli_cluster.address, namespace="tables")
    kept = agent_functions()
    assert kept >= 2, kept  # Keeper and helper, kept for the detached actor
    for cycle in range(8):
        monkeypatch.setitem(cli_cluster.env, "CYCLE", str(cycle))
        run_driver(cli_cluster, DISTINCT_FUNCTIONS, kill=cycle % 2 == 1)
        wait_until(
            f"cycle {cycle}: the agent to keep {kept} functions",
            lambda: agent_functions() == kept,
            timeout=60,
        )

    keeper = ray.get_actor("keeper")
    assert ray.get(keeper.call_helper.remote(41), timeout=60) == 42
    # Its constructor runs again on a new worker: the class is still there.
    old_pid = ray.get(keeper.pid.remote(), timeout=60)
    os.kill(old_pid, signal.SIGKILL)

    def restarted():
        try:
            return ray.get(keeper.pid.remote(), timeout=60) != old_pid
        except ray.exceptions.RayActorError:  # ActorUnavailableError while it restarts
            return False  # the call was in flight when the worker died

    wait_until("the keeper to restart", restarted, timeout=60)
    assert ray.get(keeper.call_helper.remote(1), timeout=60) == 2
    ray.kill(keeper)
    # With the job's last actor gone, its functions go too.
    wait_until(
        lambda: f"the agent to drop the job's functions (has {agent_functions()} of {kept})",
        lambda: agent_functions() < kept,
        timeout=60,
    )


@pytest.fixture
def small_history_cluster(tmp_path, monkeypatch):
    """A CLI cluster whose head and agent remember only 10 dead actors."""
    with running_cluster(tmp_path / "oxray", monkeypatch, env={**LEASE_ENV, "OXRAY_HEAD_HISTORY": "10"}) as cluster:
        yield cluster


@ray.remote(num_cpus=0)
class Heavy:
    def __init__(self, payload):
        self.size = len(payload)

    def size_of(self):
        return self.size


def test_the_agent_forgets_all_but_the_last_dead_actors(small_history_cluster):
    """50 actors (each built with a 64 KiB inline argument) are killed: the
    agent keeps 10 dead ones, and calls to a forgotten one still fail at once."""
    start_head(small_history_cluster, 2)
    ray.init(address=small_history_cluster.address)
    payload = b"x" * (64 * 1024)
    actors = [Heavy.remote(payload) for _ in range(50)]
    assert ray.get([a.size_of.remote() for a in actors], timeout=120) == [len(payload)] * 50
    for actor in actors:
        ray.kill(actor)

    def all_dead():
        return all(a.state == "DEAD" for a in _client().list_actors())

    wait_until("every actor to be DEAD", all_dead, timeout=60)
    wait_until(
        lambda: f"the agent to keep at most 10 dead actors (table sizes: {_client().agent_table_sizes()})",
        lambda: _client().agent_table_sizes()[1] <= 10,
        timeout=60,
    )
    with pytest.raises(ray.exceptions.ActorDiedError):
        ray.get(actors[0].size_of.remote(), timeout=30)
    with pytest.raises(ray.exceptions.ActorDiedError, match="killed by `ray.kill`"):
        ray.get(actors[-1].size_of.remote(), timeout=30)
    # Killing a forgotten actor again does nothing, as in Ray.
    ray.kill(actors[0])
    ray.kill(actors[-1])
    assert _client().agent_table_sizes()[1] <= 10
