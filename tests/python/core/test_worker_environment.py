"""The environment Ray gives a task or actor: OMP_NUM_THREADS from its CPUs,
CUDA_VISIBLE_DEVICES left alone under RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES,
and `accelerator_type` met only by a node that advertises it."""

import os

import pytest

import oxray as ray

try:
    import setproctitle
except ImportError:  # the test that needs it skips
    setproctitle = None


@ray.remote
def env(name):
    return os.environ.get(name)


@ray.remote(num_cpus=2)
class Threads:
    def omp(self):
        return os.environ.get("OMP_NUM_THREADS")


def test_omp_num_threads_follows_the_cpus_asked_for(ray_cluster):
    preset = os.environ.get("OMP_NUM_THREADS")
    assert ray.get(env.options(num_cpus=2).remote("OMP_NUM_THREADS")) == (preset or "2")
    assert ray.get(env.options(num_cpus=0.5).remote("OMP_NUM_THREADS")) == (preset or "1")
    assert ray.get(env.remote("OMP_NUM_THREADS")) == (preset or "1")
    threads = Threads.remote()
    assert ray.get(threads.omp.remote()) == (preset or "2")
    ray.kill(threads)
    # A task's own runtime_env wins.
    own = env.options(num_cpus=2, runtime_env={"env_vars": {"OMP_NUM_THREADS": "7"}})
    assert ray.get(own.remote("OMP_NUM_THREADS")) == "7"


def test_noset_cuda_visible_devices_leaves_it_alone(ray_cluster):
    assert ray.get(env.remote("CUDA_VISIBLE_DEVICES")) == ""
    noset = {"env_vars": {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1", "CUDA_VISIBLE_DEVICES": "3"}}
    assert ray.get(env.options(runtime_env=noset).remote("CUDA_VISIBLE_DEVICES")) == "3"


def test_accelerator_type_is_met_only_by_a_node_that_advertises_it(fresh_cluster):
    fresh_cluster(resources={"accelerator_type:A100": 1})
    assert ray.get(env.options(accelerator_type="A100").remote("OMP_NUM_THREADS")) is not None
    with pytest.raises(ray.exceptions.TaskUnschedulableError, match="accelerator_type:H100"):
        ray.get(env.options(accelerator_type="H100").remote("OMP_NUM_THREADS"))


@ray.remote
def own_title():
    import psutil

    return psutil.Process().cmdline()[0], psutil.Process().name()


@ray.remote
class Titled:
    def __init__(self):
        import psutil

        self.built_as = psutil.Process().cmdline()[0]

    def built_title(self):
        return self.built_as

    def title(self):
        import psutil

        return psutil.Process().cmdline()[0]

    def pid(self):
        return os.getpid()


def test_worker_process_titles_read_like_rays(ray_cluster):
    import psutil

    cmdline, name = ray.get(own_title.remote())
    assert cmdline == f"ray::{own_title._name}" and name == f"ray::{own_title._name}"[:15]
    actor = Titled.remote()
    assert ray.get(actor.title.remote()) == "ray::Titled.title"
    assert ray.get(actor.built_title.remote()) == "ray::Titled.__init__"
    pid = ray.get(actor.pid.remote())
    # Between calls the actor's process reads as its class.
    assert psutil.Process(pid).cmdline()[0] == "ray::Titled"
    ray.kill(actor)


@ray.remote
def title_by_setproctitle():
    return setproctitle.getproctitle()


@ray.remote
class TitledBySetproctitle:
    def __init__(self):
        self.built_as = setproctitle.getproctitle()

    def title(self):
        return self.built_as, setproctitle.getproctitle()

    def renamed(self, title):
        setproctitle.setproctitle(title)
        return setproctitle.getproctitle()


def test_setproctitle_reads_and_sets_the_workers_title_as_in_ray(ray_cluster):
    # Imported at the test module's top, as Ray's own test does: workers import it with the function.
    if setproctitle is None:
        pytest.skip("setproctitle is not installed")
    assert ray.get(title_by_setproctitle.remote()) == f"ray::{title_by_setproctitle._name}"
    actor = TitledBySetproctitle.remote()
    built, called = ray.get(actor.title.remote())
    assert (built, called) == ("ray::TitledBySetproctitle.__init__", "ray::TitledBySetproctitle.title")
    assert ray.get(actor.renamed.remote("mine")) == "mine"
    ray.kill(actor)


@ray.remote
def read_env(key):
    return os.environ.get(key)


@ray.remote
def read_env_nested(key, child_env=None):
    child = read_env.options(runtime_env={"env_vars": child_env}) if child_env else read_env
    return ray.get(child.remote(key))


@ray.remote
class EnvActor:
    def nested(self, key):
        return ray.get(read_env.remote(key))


def test_nested_work_inherits_the_runtime_env_vars(ray_cluster):
    # As in Ray: tasks and actors pass their env_vars on to the work they submit; a child's own win.
    parent = {"runtime_env": {"env_vars": {"GREETING": "from-parent", "KEPT": "yes"}}}
    assert ray.get(read_env_nested.options(**parent).remote("GREETING")) == "from-parent"
    overridden = read_env_nested.options(**parent).remote("GREETING", {"GREETING": "from-child"})
    assert ray.get(overridden) == "from-child"
    assert ray.get(read_env_nested.options(**parent).remote("KEPT", {"GREETING": "x"})) == "yes"
    actor = EnvActor.options(**parent).remote()
    assert ray.get(actor.nested.remote("GREETING")) == "from-parent"
    assert ray.get(read_env_nested.remote("GREETING")) is None
