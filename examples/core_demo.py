"""oxray demo: a real parallel program on tasks and actors.

Estimates pi by Monte Carlo sampling across worker processes, with an actor
collecting progress, then sums a large shared array chunk by chunk from the
object store (zero-copy) and checks both results.
"""

import math
import time

import numpy as np

import oxray as ray

SAMPLES_PER_TASK = 2_000_000
NUM_TASKS = 16


@ray.remote
class Progress:
    def __init__(self, total_tasks):
        self.total = total_tasks
        self.done = {}

    def report(self, task_index, samples):
        self.done[task_index] = samples

    def fraction(self):
        return len(self.done) / self.total

    def samples(self):
        return sum(self.done.values())


@ray.remote
def sample_pi(task_index, num_samples, progress):
    rng = np.random.default_rng(task_index)
    xy = rng.random((num_samples, 2))
    inside = int(np.count_nonzero((xy**2).sum(axis=1) <= 1.0))
    progress.report.remote(task_index, num_samples)
    return inside


@ray.remote
def chunk_sum(array, start, stop):
    return float(array[start:stop].sum())


def main():
    t0 = time.perf_counter()
    ray.init()
    print(f"cluster up in {time.perf_counter() - t0:.3f} s: {ray.cluster_resources()['CPU']:.0f} CPUs")

    progress = Progress.remote(NUM_TASKS)
    t = time.perf_counter()
    refs = [sample_pi.remote(i, SAMPLES_PER_TASK, progress) for i in range(NUM_TASKS)]
    inside = sum(ray.get(refs))
    elapsed = time.perf_counter() - t
    total = NUM_TASKS * SAMPLES_PER_TASK
    pi = 4.0 * inside / total
    print(
        f"pi ~= {pi:.6f} (error {abs(pi - math.pi):.2e}) from {total:,} samples in {NUM_TASKS} tasks: {elapsed:.2f} s"
    )
    print(
        f"progress actor saw {ray.get(progress.samples.remote()):,} samples, "
        f"{ray.get(progress.fraction.remote()):.0%} of tasks"
    )

    data = np.arange(50_000_000, dtype=np.float64)
    t = time.perf_counter()
    data_ref = ray.put(data)
    bounds = np.linspace(0, len(data), 9, dtype=np.int64)
    parts = ray.get([chunk_sum.remote(data_ref, int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)])
    elapsed = time.perf_counter() - t
    expected = float(len(data) - 1) * len(data) / 2
    print(
        f"sum of {data.nbytes / 2**20:.0f} MiB array in 8 tasks = {sum(parts):.6e} "
        f"(expected {expected:.6e}): {elapsed:.2f} s"
    )
    assert abs(sum(parts) - expected) / expected < 1e-9, "parallel sum is wrong"
    assert abs(pi - math.pi) < 1e-2, "pi estimate is off"

    t = time.perf_counter()
    ray.shutdown()
    print(f"shut down in {time.perf_counter() - t:.3f} s; total {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main()
