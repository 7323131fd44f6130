"""`Dataset.write_images`: each row's image array becomes one file PIL encodes, named as Ray's
row-based sink names them, and reads back as the same pixels."""

import os

import numpy as np
import pytest
from data_testutil import AGAINST_RAY, ray

if AGAINST_RAY:
    from ray.data.datasource import FilenameProvider
else:
    from oxray.data.datasource import FilenameProvider


def images(n: int) -> list:
    rng = np.random.default_rng(7)
    return [{"image": rng.integers(0, 256, size=(6, 5, 3), dtype=np.uint8), "label": i} for i in range(n)]


def test_rows_become_png_files_that_read_back(data_cluster, tmp_path):
    rows = images(5)
    ray.data.from_items(rows, override_num_blocks=2).write_images(str(tmp_path), column="image")
    names = sorted(os.listdir(tmp_path))
    assert len(names) == 5 and all(n.endswith(".png") for n in names)
    back = ray.data.read_images(str(tmp_path)).take_all()
    assert sorted(r["image"].tobytes() for r in back) == sorted(r["image"].tobytes() for r in rows)


def test_a_filename_provider_names_each_task_and_rows_get_their_index(data_cluster, tmp_path):
    class Named(FilenameProvider):
        def get_filename_for_task(self, write_uuid, task_index):
            return f"{write_uuid}_pic{task_index}.jpeg"

    ray.data.from_items(images(3), override_num_blocks=1).write_images(
        str(tmp_path), "image", "jpeg", filename_provider=Named()
    )
    names = sorted(os.listdir(tmp_path))
    assert [n.split("_pic0")[1] for n in names] == ["_000000_000000.jpeg", "_000000_000001.jpeg", "_000000_000002.jpeg"]


def test_bad_formats_and_values_are_named(data_cluster, tmp_path):
    ds = ray.data.from_items(images(1))
    with pytest.raises(ValueError, match="file_format='nope'"):
        ds.write_images(str(tmp_path), "image", "nope")
    with pytest.raises(ValueError, match="each row is its own file"):
        ds.write_images(str(tmp_path), "image", max_rows_per_file=2)
    bad = ray.data.from_items([{"image": np.zeros((2, 2, 7), dtype=np.float64)}])
    with pytest.raises(Exception, match="row 0 of column 'image'.*not an image PIL can write"):
        bad.write_images(str(tmp_path / "bad"), "image")
