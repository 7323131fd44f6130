"""streaming_split as Ray's: equal=False hands out whole blocks to the split with the fewest
rows, copies of a split's iterator (shipped to tasks) share its epochs, and a split read by
two consumers at once is an error, not a hang or a silent half-read."""

import threading

import pytest
from data_testutil import ray


def rows_per_split(iterators) -> list:
    counts = []

    def consume(it):
        counts.append(sum(len(b["id"]) for b in it.iter_batches()))

    threads = [threading.Thread(target=consume, args=(it,)) for it in iterators]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(counts)


def test_equal_and_unequal_splits(data_cluster):
    ds = ray.data.range(1000, override_num_blocks=10)
    equal = ds.streaming_split(3, equal=True)
    assert rows_per_split(equal) == [333, 333, 333]
    assert rows_per_split(equal) == [333, 333, 333]  # a second epoch
    unequal = ds.streaming_split(3, equal=False)
    assert rows_per_split(unequal) == [300, 300, 400]  # whole blocks of 100 rows


def test_copies_in_tasks_share_epochs_and_one_reader_per_split(data_cluster):
    @ray.remote(num_cpus=0)
    def consume(split, epochs):
        return sum(1 for _ in range(epochs) for _ in split.iter_rows())

    first, second = ray.data.range(20, override_num_blocks=20).streaming_split(2, equal=True)
    for _ in range(3):  # each task gets a fresh copy of the iterators; the epochs go on
        assert ray.get([consume.remote(first, 2), consume.remote(second, 2)]) == [20, 20]

    first, second = ray.data.range(20, override_num_blocks=20).streaming_split(2, equal=True)
    readers = [consume.remote(first, 4), consume.remote(second, 4), consume.remote(first, 4)]
    with pytest.raises(ValueError, match="split 0 is read by more than one consumer at once"):
        ray.get(readers)


def test_the_coordinator_hands_out_blocks_without_fetching_them(data_cluster, monkeypatch):
    """The coordinator cuts blocks into segments from the rows their tasks reported, so a block
    goes from the node that made it straight to the consumer's node, never through the
    coordinator's."""
    import oxray
    from oxray.data._internal.split import _SplitCoordinator

    ds = ray.data.range(1000, override_num_blocks=10).map_batches(lambda b: b)
    bundles = list(ds._execute(progress=False, reads_as_tasks=True))
    assert all(b.ref is not None for b in bundles), "the blocks were made by tasks"
    coordinator = _SplitCoordinator(ds, 3, True)

    def no_fetch(*args, **kwargs):
        raise AssertionError("the coordinator fetched a block")

    monkeypatch.setattr(oxray, "get", no_fetch)
    for bundle in bundles:
        coordinator._distribute(bundle)
    monkeypatch.undo()
    given = [sum(length for segs, _ in queue for *_, length in segs) for queue in coordinator.queues]
    assert given == [333, 333, 333]
    for bundle in bundles:
        bundle.release()
