"""Workers forked from a warm template process (`oxray._private.worker_template`): each keeps
what a freshly started worker has (its own session, environment and logs), one with another
import setup gets a template of its own, its exit status is reported, and a template's death
ends its workers without stopping the node from starting new ones."""

import os
import signal
import subprocess
import sys
import textwrap

import psutil
import pytest

import oxray as ray
from oxray_testutil import wait_until


def _cmdline(pid: int) -> str:
    return " ".join(psutil.Process(pid).cmdline())


@ray.remote
def whoami():
    import os

    return {
        "pid": os.getpid(),
        "parent": os.getppid(),
        "session": os.getsid(0),
        "token": os.environ.get("OXRAY_TOKEN"),
        "flag": os.environ.get("TEMPLATE_TEST_FLAG"),
    }


@ray.remote
class Probe:
    def pid(self):
        return os.getpid()

    def parent(self):
        return os.getppid()

    def say(self, text):
        print(text, flush=True)
        return os.getpid()

    def exit_with(self, code):
        os._exit(code)


def test_a_worker_is_forked_from_the_template_and_keeps_a_fresh_workers_isolation(ray_cluster):
    me = ray.get(whoami.options(runtime_env={"env_vars": {"TEMPLATE_TEST_FLAG": "set"}}).remote())
    assert "oxray._private.worker_template" in _cmdline(me["parent"])
    assert psutil.Process(me["parent"]).ppid() == os.getpid(), "the driver's agent started the template"
    assert me["session"] == me["pid"], "a session (and process group) of its own"
    assert me["token"] is None, "the cluster token is kept out of user code's environment"
    assert me["flag"] == "set"


def test_actors_are_forked_and_their_output_reaches_their_logs(ray_cluster):
    probes = [Probe.remote() for _ in range(4)]
    pids = ray.get([p.say.remote(f"hello from probe {i}") for i, p in enumerate(probes)])
    assert len(set(pids)) == 4
    parents = set(ray.get([p.parent.remote() for p in probes]))
    assert len(parents) == 1 and "oxray._private.worker_template" in _cmdline(parents.pop())
    logs = os.path.join(ray_cluster["session_dir"], "logs")
    for i, pid in enumerate(pids):
        (log,) = [f for f in os.listdir(logs) if f.startswith("worker-") and f.endswith(f"-{pid}.log")]
        path = os.path.join(logs, log)
        line = f"hello from probe {i}"
        wait_until(f"{line!r} in {log}", lambda path=path, line=line: line in open(path).read())
        assert os.stat(path).st_mode & 0o077 == 0, "logs stay private to the user"
    for p in probes:
        ray.kill(p)


def test_a_forked_workers_exit_status_is_reported(ray_cluster):
    probe = Probe.remote()
    ray.get(probe.pid.remote())
    with pytest.raises(ray.exceptions.RayActorError, match="exit code 7"):
        ray.get(probe.exit_with.remote(7), timeout=60)


def test_another_import_path_gets_a_template_of_its_own(ray_cluster, tmp_path):
    (tmp_path / "template_probe_module.py").write_text("WHERE = 'extra path'\n")

    @ray.remote
    class Importer:
        def where(self):
            import sys

            return sys.modules["template_probe_module"].WHERE if "template_probe_module" in sys.modules else None

        def parent(self):
            return os.getppid()

    default_parent = ray.get(whoami.remote())["parent"]
    pythonpath = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    # Its template starts with that import path, and preloads the module (as Train's preloads torch).
    env = {"PYTHONPATH": pythonpath, "OXRAY_TEMPLATE_PRELOAD": "template_probe_module"}
    importer = Importer.options(runtime_env={"env_vars": env}).remote()
    assert ray.get(importer.where.remote()) == "extra path"
    parent = ray.get(importer.parent.remote())
    assert parent != default_parent
    assert "oxray._private.worker_template" in _cmdline(parent)
    plain = Probe.remote()
    assert ray.get(plain.parent.remote()) == default_parent, "the node's own template serves the rest"
    ray.kill(importer)
    ray.kill(plain)


def test_a_dead_template_ends_its_workers_and_the_node_starts_new_ones(ray_cluster):
    probe = Probe.options(max_restarts=1).remote()
    template = ray.get(probe.parent.remote())
    old_pid = ray.get(probe.pid.remote())
    os.kill(template, signal.SIGKILL)
    # Its worker gets its parent-death signal; the actor restarts in a worker of a new template.
    wait_until("the probe's worker to end", lambda: not psutil.pid_exists(old_pid) or _zombie(old_pid))
    wait_until("the probe to restart elsewhere", lambda: _restarted(probe, old_pid), timeout=60)
    new_parent = ray.get(probe.parent.remote())
    assert new_parent != template and "oxray._private.worker_template" in _cmdline(new_parent)
    assert ray.get(whoami.remote())["parent"] == new_parent


def _zombie(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _restarted(probe, old_pid):
    try:
        return ray.get(probe.pid.remote(), timeout=30) != old_pid
    except ray.exceptions.RayActorError:
        return False


def test_the_node_setting_turns_templates_off(tmp_path):
    script = textwrap.dedent(
        """
        import os
        import oxray as ray

        ray.init(num_cpus=1)

        @ray.remote
        def parent():
            return os.getppid()

        print("PARENT-IS-DRIVER", ray.get(parent.remote()) == os.getpid())
        """
    )
    env = {**os.environ, "OXRAY_WORKER_TEMPLATE": "0"}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert "PARENT-IS-DRIVER True" in out.stdout, out.stdout + out.stderr


def test_a_driver_that_imported_torch_starts_the_torch_template_at_init(tmp_path):
    pytest.importorskip("torch")
    script = textwrap.dedent(
        """
        import time

        import psutil
        import torch  # noqa: F401 - imported first, as Ray's Train guides do
        import oxray as ray

        ray.init(num_cpus=1)

        def torch_template():
            for child in psutil.Process().children(recursive=True):
                try:
                    if "oxray._private.worker_template" in " ".join(child.cmdline()) and (
                        child.environ().get("OXRAY_TEMPLATE_PRELOAD") == "torch"
                    ):
                        return child
                except psutil.Error:
                    pass
            return None

        # Nothing has asked for a worker: only init can have started it, and it imports torch.
        deadline = time.monotonic() + 90
        found = None
        while found is None and time.monotonic() < deadline:
            template = torch_template()
            if template is not None and any("libtorch" in m.path for m in template.memory_maps()):
                found = template
            else:
                time.sleep(0.1)
        print("TORCH-TEMPLATE", found is not None)
        """
    )
    env = {**os.environ, "OXRAY_TORCH_TEMPLATE_AT_INIT": "1"}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180
    )
    assert "TORCH-TEMPLATE True" in out.stdout, out.stdout + out.stderr
