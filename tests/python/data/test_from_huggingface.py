"""`from_huggingface` with local Hugging Face datasets: a `Dataset` (its rows as the dataset
shows them, after select, filter and shuffle) and an `IterableDataset`; a `DatasetDict` is
refused with Ray's message."""

import pytest
from data_testutil import ray

datasets = pytest.importorskip("datasets")


def local_dataset():
    return datasets.Dataset.from_dict({"text": [f"row {i}" for i in range(40)], "label": [i % 3 for i in range(40)]})


def test_a_dataset_keeps_its_rows_columns_and_view(data_cluster):
    hf = local_dataset()
    ds = ray.data.from_huggingface(hf, override_num_blocks=4)
    assert ds.count() == 40 and ds.num_blocks() == 4
    assert ds.schema().names == ["text", "label"]
    assert sorted(r["text"] for r in ds.take_all()) == sorted(hf["text"])
    view = hf.filter(lambda r: r["label"] == 1).shuffle(seed=1).select(range(5))
    assert [r["text"] for r in ray.data.from_huggingface(view).take_all()] == view["text"]


def test_an_iterable_dataset_is_read_through(data_cluster):
    streamed = local_dataset().to_iterable_dataset(num_shards=2)
    rows = ray.data.from_huggingface(streamed).take_all()
    assert sorted(r["label"] for r in rows) == sorted(i % 3 for i in range(40))


def test_a_dataset_dict_and_other_objects_are_refused(data_cluster):
    with pytest.raises(TypeError, match="specify a split"):
        ray.data.from_huggingface(datasets.DatasetDict({"train": local_dataset()}))
    with pytest.raises(TypeError, match="expected a Hugging Face datasets.Dataset"):
        ray.data.from_huggingface([1, 2, 3])
