"""Programs written the way Ray's docs and tutorials write them, with only the
import changed to ``import oxray as ray``.

Most run as stand-alone driver scripts (``python script.py``), as a user
would, so that functions and classes defined in ``__main__`` must travel to
the workers by value.
"""

import os
import subprocess
import sys
import textwrap

import pytest

import oxray as ray

TIMEOUT = 60


def run_program(tmp_path, source, timeout=180):
    script = tmp_path / "program.py"
    script.write_text(textwrap.dedent(source))
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=str(tmp_path),
    )
    assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def result_lines(stdout):
    """Lines the program printed itself (not worker output forwarded with a
    ``(name pid=...)`` prefix)."""
    return [line for line in stdout.splitlines() if line.startswith("RESULT ")]


COUNTER_PROGRAM = """
import oxray as ray

ray.init()


@ray.remote
class Counter:
    def __init__(self):
        self.value = 0

    def increment(self):
        self.value += 1
        return self.value

    def get_counter(self):
        return self.value


# Create an actor from this class.
counter = Counter.remote()

# Call the actor.
obj_ref = counter.increment.remote()
print("RESULT first", ray.get(obj_ref))

# Create several Counter actors.
counters = [Counter.remote() for _ in range(4)]

# Increment each Counter once and get the results. These tasks all happen in
# parallel.
results = ray.get([c.increment.remote() for c in counters])
print("RESULT parallel", results)

# Increment the first Counter five times. These tasks are executed serially
# and share state.
results = ray.get([counters[0].increment.remote() for _ in range(5)])
print("RESULT serial", results)


# Actor handles can be passed to tasks.
@ray.remote
def f(counter):
    for _ in range(10):
        ray.get(counter.increment.remote())


ray.get([f.remote(counter) for _ in range(3)])
print("RESULT shared", ray.get(counter.get_counter.remote()))
"""


def test_counter_actor_program(tmp_path):
    lines = result_lines(run_program(tmp_path, COUNTER_PROGRAM))
    assert lines == [
        "RESULT first 1",
        "RESULT parallel [1, 1, 1, 1]",
        "RESULT serial [2, 3, 4, 5, 6]",
        "RESULT shared 31",
    ]


PARALLEL_MAP_PROGRAM = """
import time

import numpy as np
import oxray as ray

ray.init()


# A regular Python function.
def normal_function():
    return 1


# By adding the `@ray.remote` decorator, a regular Python function
# becomes a Ray remote function.
@ray.remote
def my_function():
    return 1


assert ray.get(my_function.remote()) == normal_function()


@ray.remote
def f(x):
    return x * x


futures = [f.remote(i) for i in range(4)]
print("RESULT map", ray.get(futures))  # [0, 1, 4, 9]


# Pass a large object to many tasks by reference instead of copying it.
@ray.remote
def row_sum(matrix, i):
    return float(matrix[i].sum())


matrix = np.arange(1000 * 1000, dtype=np.float64).reshape(1000, 1000)
matrix_ref = ray.put(matrix)
sums = ray.get([row_sum.remote(matrix_ref, i) for i in range(0, 1000, 100)])
print("RESULT sums-ok", sums == [float(matrix[i].sum()) for i in range(0, 1000, 100)])


# Process results in the order they finish with ray.wait.
@ray.remote
def slow_square(x):
    time.sleep(0.05 * (x % 3))
    return x * x


remaining = [slow_square.remote(i) for i in range(10)]
done = []
while remaining:
    ready, remaining = ray.wait(remaining, num_returns=1)
    done.append(ray.get(ready[0]))
print("RESULT wait", sorted(done))


# Tasks can launch tasks.
@ray.remote
def fib(n):
    if n < 2:
        return n
    return sum(ray.get([fib.remote(n - 1), fib.remote(n - 2)]))


print("RESULT fib", ray.get(fib.remote(4)))
"""


def test_parallel_map_program(tmp_path):
    pytest.importorskip("numpy")
    lines = result_lines(run_program(tmp_path, PARALLEL_MAP_PROGRAM))
    assert lines == [
        "RESULT map [0, 1, 4, 9]",
        "RESULT sums-ok True",
        f"RESULT wait {[i * i for i in range(10)]}",
        "RESULT fib 3",
    ]


@ray.remote(num_gpus=1, resources={"accelerator_type:T4": 0.0001})
def use_gpu():
    return ray.get_gpu_ids(), os.environ["CUDA_VISIBLE_DEVICES"]


@ray.remote(num_gpus=1)
class GPUActor:
    def ping(self):
        return ray.get_gpu_ids(), os.environ["CUDA_VISIBLE_DEVICES"]


def test_gpu_accelerator_type_program(fresh_cluster):
    fresh_cluster(num_cpus=2, num_gpus=1, resources={"accelerator_type:T4": 1})
    resources = ray.cluster_resources()
    assert resources["GPU"] == 1.0
    assert resources["accelerator_type:T4"] == 1.0

    gpu_ids, visible = ray.get(use_gpu.remote(), timeout=TIMEOUT)
    assert gpu_ids == [0]
    assert visible == "0"

    # Several such tasks share the single GPU one after another.
    results = ray.get([use_gpu.remote() for _ in range(3)], timeout=TIMEOUT)
    assert results == [([0], "0")] * 3

    # An actor that holds the GPU sees it too.
    actor = GPUActor.remote()
    assert ray.get(actor.ping.remote(), timeout=TIMEOUT) == ([0], "0")
