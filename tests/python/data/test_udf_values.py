"""Whatever a UDF puts in a row or a batch becomes a column, as in Ray Data: torch tensors of
any shape and dtype, ndarrays of fixed or varying shapes, PIL images, scalars, strings, bytes,
lists, dicts, ``None`` and arbitrary objects; ``map``, ``map_batches`` (every batch format),
``flat_map`` and ``filter``, as tasks and on actor pools. ``iter_torch_batches`` gives them
back as tensors of the right shape and dtype."""

import numpy as np
import pytest
from data_testutil import AGAINST_RAY, ray

torch = pytest.importorskip("torch")
from PIL import Image  # noqa: E402

N = 12


def sorted_rows(rows):
    return sorted(rows, key=lambda r: int(r["id"]))


class Opaque:
    """An object Arrow has no type for."""

    def __init__(self, n):
        self.n = n

    def __eq__(self, other):
        return isinstance(other, Opaque) and other.n == self.n


def every_kind(row):
    i = int(row["id"])
    return {
        "id": i,
        "tensor": torch.full((2, 3), float(i), dtype=torch.float64),
        "half": torch.ones(4, dtype=torch.float16) * i,
        "ints": torch.arange(i, i + 3, dtype=torch.int32),
        "ragged": np.arange(i + 1, dtype=np.int64),
        "pil": Image.fromarray(np.full((4, 5, 3), i, dtype=np.uint8)),
        "scalar": np.float32(i) / 2,
        "text": f"row{i}",
        "blob": bytes([i]),
        "items": [i, i + 1],
        "mapping": {"a": i, "b": str(i)},
        "maybe": None if i % 2 else i,
        "opaque": Opaque(i),
    }


class EveryKind:
    def __call__(self, row):
        return every_kind(row)


def check_every_kind(rows):
    assert [int(r["id"]) for r in rows] == list(range(N))
    for r in rows:
        i = int(r["id"])
        np.testing.assert_array_equal(r["tensor"], np.full((2, 3), float(i)))
        assert np.asarray(r["tensor"]).dtype == np.float64
        assert np.asarray(r["half"]).dtype == np.float16
        np.testing.assert_array_equal(r["ints"], np.arange(i, i + 3, dtype=np.int32))
        np.testing.assert_array_equal(r["ragged"], np.arange(i + 1))
        np.testing.assert_array_equal(r["pil"], np.full((4, 5, 3), i, dtype=np.uint8))
        assert r["scalar"] == pytest.approx(i / 2)
        assert r["text"] == f"row{i}" and r["blob"] == bytes([i])
        assert list(r["items"]) == [i, i + 1]
        assert dict(r["mapping"]) == {"a": i, "b": str(i)}
        assert r["maybe"] == (None if i % 2 else i)
        assert r["opaque"] == Opaque(i)


def test_map_accepts_every_kind_of_value(data_cluster):
    check_every_kind(sorted_rows(ray.data.range(N, override_num_blocks=3).map(every_kind).take_all()))


def test_map_on_an_actor_pool_accepts_every_kind_of_value(data_cluster):
    ds = ray.data.range(N, override_num_blocks=3).map(EveryKind, concurrency=2)
    check_every_kind(sorted_rows(ds.take_all()))


def test_flat_map_and_filter_see_and_keep_tensor_values(data_cluster):
    ds = ray.data.range(N, override_num_blocks=3).flat_map(
        lambda row: [{"id": row["id"], "t": torch.full((2,), float(row["id"]) + k)} for k in range(2)]
    )
    ds = ds.filter(lambda row: isinstance(row["t"], np.ndarray) and row["t"][0] >= 5)
    rows = ds.take_all()
    assert sorted((int(r["id"]), float(r["t"][0])) for r in rows) == sorted(
        (i, float(i + k)) for i in range(N) for k in range(2) if i + k >= 5
    )


@pytest.mark.parametrize("batch_format", ["default", "numpy", "pandas", "pyarrow"])
def test_map_batches_returning_tensors_in_every_batch_format(data_cluster, batch_format):
    def to_tensors(batch):
        ids = batch["id"] if batch_format != "pyarrow" else batch.column("id").to_numpy()
        ids = np.asarray(ids)
        return {"id": torch.as_tensor(ids), "image": torch.stack([torch.full((3, 4, 4), float(i)) for i in ids])}

    ds = ray.data.range(N, override_num_blocks=3).map_batches(to_tensors, batch_format=batch_format, batch_size=5)
    out = {}
    for batch in ds.iter_torch_batches(batch_size=4):
        assert batch["image"].dtype == torch.float32 and batch["image"].shape[1:] == (3, 4, 4)
        for i, image in zip(batch["id"].tolist(), batch["image"], strict=True):
            out[i] = float(image.mean())
    assert out == {i: float(i) for i in range(N)}


def test_map_batches_on_an_actor_pool_returns_variable_shaped_tensors(data_cluster):
    class Crop:
        def __call__(self, batch):
            return {"id": batch["id"], "crop": [np.ones((int(i) % 3 + 1, 2), dtype=np.float32) for i in batch["id"]]}

    ds = ray.data.range(N, override_num_blocks=2).map_batches(Crop, concurrency=2, batch_size=4)
    seen = {}
    for batch in ds.iter_torch_batches(batch_size=5):
        crops = batch["crop"]
        # Different shapes in one batch: a list of tensors, as Ray gives them.
        if isinstance(crops, list):
            assert all(isinstance(c, torch.Tensor) for c in crops)
        for i, crop in zip(batch["id"].tolist(), crops, strict=True):
            seen[i] = tuple(crop.shape)
    assert seen == {i: (i % 3 + 1, 2) for i in range(N)}


def test_torch_batches_keep_the_shape_and_dtype_a_udf_gave(data_cluster):
    ds = ray.data.range(N, override_num_blocks=3).map(
        lambda row: {"x": torch.full((2, 2), int(row["id"]), dtype=torch.int16), "y": np.float64(row["id"])}
    )
    batches = list(ds.iter_torch_batches(batch_size=N))
    assert len(batches) == 1
    assert batches[0]["x"].dtype == torch.int16 and batches[0]["x"].shape == (N, 2, 2)
    assert batches[0]["y"].dtype == torch.float64
    assert sorted(batches[0]["y"].tolist()) == [float(i) for i in range(N)]


@pytest.mark.skipif(AGAINST_RAY, reason="checks oxray's error message")
def test_a_column_of_objects_cannot_become_a_tensor_and_the_error_names_it(data_cluster):
    ds = ray.data.range(4).map(lambda row: {"id": row["id"], "obj": Opaque(row["id"])})
    with pytest.raises(TypeError, match="'obj'.*Opaque.*collate_fn"):
        list(ds.iter_torch_batches(batch_size=2))


def test_map_batches_hands_the_udf_a_writable_batch_by_default(data_cluster):
    def double_in_place(batch):
        batch["id"] *= 2
        return batch

    assert sorted(r["id"] for r in ray.data.range(N).map_batches(double_in_place).take_all()) == [
        2 * i for i in range(N)
    ]


@pytest.mark.skipif(AGAINST_RAY, reason="Ray's read-only views depend on its block layout")
def test_map_batches_with_zero_copy_batch_hands_a_read_only_view(data_cluster):
    def double_in_place(batch):
        batch["id"] *= 2
        return batch

    with pytest.raises(ray.exceptions.UserCodeException, match="read-only"):
        ray.data.range(N).map_batches(double_in_place, zero_copy_batch=True).take_all()


def test_a_failing_udf_raises_user_code_exception_caused_by_the_users_error(data_cluster):
    def boom(row):
        raise KeyError("the user's own failure")

    with pytest.raises(ray.exceptions.UserCodeException) as info:
        ray.data.range(4).map(boom).take_all()
    chain, err = [], info.value
    while err is not None:
        chain.append(err)
        err = err.__cause__
    assert any(isinstance(e, KeyError) for e in chain) or "the user's own failure" in str(info.value)


@pytest.mark.skipif(AGAINST_RAY, reason="checks oxray's error message")
def test_turning_the_object_fallback_off_reaches_the_tasks(data_cluster):
    ctx = ray.data.DataContext.get_current()
    ctx.enable_fallback_to_arrow_object_ext_type = False
    try:
        ds = ray.data.range(4).map(lambda row: {"id": row["id"], "obj": Opaque(row["id"])})
        with pytest.raises(ValueError, match="'obj'.*Opaque.*enable_fallback"):
            ds.take_all()
        assert ray.data.range(4).map(lambda row: {"t": np.ones(2)}).count() == 4  # tensors need no fallback
    finally:
        ctx.enable_fallback_to_arrow_object_ext_type = True


def test_random_sample_keeps_the_rows_rays_seeding_keeps(data_cluster):
    # Ray seeds one generator per task with (task index, seed) and draws one number per row.
    expected = sum(int((np.random.default_rng((i, 5)).random(250) < 0.3).sum()) for i in range(4))
    assert ray.data.range(1000, override_num_blocks=4).random_sample(0.3, seed=5).count() == expected
