"""Ray's push-based shuffle (`ShuffleStrategy.SORT_SHUFFLE_PUSH_BASED`, or the older
`DataContext.use_push_based_shuffle`): sort, groupby and random_shuffle give the pull-based
results, and merge tasks really run between the map and reduce tasks."""

import pytest
from data_testutil import ray

from oxray.util.state import list_tasks

ROWS, BLOCKS = 600, 9


def merge_tasks() -> int:
    return sum(1 for t in list_tasks(limit=10_000) if t.name.endswith("_push_merge"))


@pytest.fixture(params=["strategy", "legacy_flag"])
def push_based(data_cluster, request):
    ctx = ray.data.DataContext.get_current()
    before = (ctx.shuffle_strategy, ctx.use_push_based_shuffle)
    if request.param == "strategy":
        ctx.shuffle_strategy = ray.data.context.ShuffleStrategy.SORT_SHUFFLE_PUSH_BASED
    else:
        ctx.use_push_based_shuffle = True
    try:
        yield ctx
    finally:
        ctx.shuffle_strategy, ctx.use_push_based_shuffle = before


def test_sort_and_groupby_match_and_merge_tasks_run(push_based):
    ds = ray.data.range(ROWS, override_num_blocks=BLOCKS).map(lambda r: {"id": r["id"], "k": r["id"] % 7})
    before = merge_tasks()
    assert [r["id"] for r in ds.sort("id", descending=True).take_all()] == list(range(ROWS))[::-1]
    after_sort = merge_tasks()
    assert after_sort > before, "a push-based sort ran no merge task"
    counts = {r["k"]: r["count()"] for r in ds.groupby("k").count().take_all()}
    assert counts == {k: len(range(k, ROWS, 7)) for k in range(7)}
    assert merge_tasks() > after_sort, "a push-based groupby ran no merge task"


def test_random_shuffle_keeps_every_row(push_based):
    before = merge_tasks()
    rows = [r["id"] for r in ray.data.range(ROWS, override_num_blocks=BLOCKS).random_shuffle(seed=3).take_all()]
    assert sorted(rows) == list(range(ROWS)) and rows != list(range(ROWS))
    assert merge_tasks() > before


def test_pull_based_runs_no_merge_task(data_cluster):
    before = merge_tasks()
    assert ray.data.range(ROWS, override_num_blocks=BLOCKS).sort("id").take(2) == [{"id": 0}, {"id": 1}]
    assert merge_tasks() == before


def test_unknown_strategy_is_refused_by_name(data_cluster):
    with pytest.raises(ValueError, match="shuffle_strategy='push'.*sort_shuffle_push_based"):
        ray.data.DataContext.get_current().shuffle_strategy = "push"
