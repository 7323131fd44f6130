"""`@serve.batch` as Ray Serve's docs use it: concurrent callers' items reach the
method as one list, each caller gets its own result, a batch closes at its size,
a wrong-length answer fails every caller, and bad settings are refused."""

import pytest

from oxray import serve
from oxray.serve.exceptions import RayServeException

pytestmark = pytest.mark.usefixtures("clean_serve")


@serve.deployment(ray_actor_options={"num_cpus": 0.1}, max_ongoing_requests=16, graceful_shutdown_wait_loop_s=0.1)
class BatchedModel:
    @serve.batch(max_batch_size=4, batch_wait_timeout_s=5)
    async def __call__(self, items: list):
        return [(item * 10, len(items)) for item in items]

    @serve.batch(max_batch_size=2, batch_wait_timeout_s=5)
    async def broken(self, items: list):
        return items[:1]

    @serve.batch(max_batch_size=4, batch_wait_timeout_s=0, batch_size_fn=lambda items: sum(len(i) for i in items))
    async def sized(self, items: list):
        return [len(item) for item in items]


def test_concurrent_calls_are_batched_up_to_the_size_and_each_gets_its_result():
    handle = serve.run(BatchedModel.bind(), name="batched", route_prefix="/batched")
    responses = [handle.remote(i) for i in range(8)]
    results = [r.result(timeout_s=60) for r in responses]
    assert [value for value, _ in results] == [i * 10 for i in range(8)]
    # Eight calls at once, four at most per batch (the wait is long: sizes close them).
    assert max(size for _, size in results) == 4
    assert sum(1 / size for _, size in results) == pytest.approx(2), "two full batches"

    broken = [handle.broken.remote(i) for i in range(2)]
    for response in broken:
        with pytest.raises(RayServeException, match="doesn't preserve batch size"):
            response.result(timeout_s=60)

    # A batch_size_fn that raises fails its callers; the queue still serves the next ones.
    with pytest.raises(TypeError):
        handle.sized.remote(7).result(timeout_s=60)
    assert handle.sized.remote("abc").result(timeout_s=60) == 3


def test_batch_settings_are_checked():
    with pytest.raises(TypeError, match="must be 'async def'"):

        @serve.batch
        def not_async(items):
            return items

    with pytest.raises(ValueError, match="max_batch_size=0"):
        serve.batch(max_batch_size=0)
    with pytest.raises(ValueError, match="batch_wait_timeout_s=-1"):
        serve.batch(batch_wait_timeout_s=-1)
