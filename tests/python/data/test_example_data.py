"""Ray's `example://` paths: the Iris data set shipped in the package reads as Ray's files do
(same columns, types and 150 rows), and an unknown name says which examples exist."""

import pathlib

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq
import pytest
from data_testutil import AGAINST_RAY, ray

pytestmark = pytest.mark.timeout(120)

IRIS_SCHEMA = pa.schema(
    [
        ("sepal.length", pa.float64()),
        ("sepal.width", pa.float64()),
        ("petal.length", pa.float64()),
        ("petal.width", pa.float64()),
        ("variety", pa.string()),
    ]
)
FIRST_ROW = {"sepal.length": 5.1, "sepal.width": 3.5, "petal.length": 1.4, "petal.width": 0.2, "variety": "Setosa"}
LAST_ROW = {"sepal.length": 5.9, "sepal.width": 3.0, "petal.length": 5.1, "petal.width": 1.8, "variety": "Virginica"}

oxray_only = pytest.mark.skipif(AGAINST_RAY, reason="oxray's example_data module")
# Ray's wheels leave out ray/data/examples/data (only a source checkout has it).
_RAY_HAS_EXAMPLES = not AGAINST_RAY or (pathlib.Path(ray.data.__file__).parent / "examples" / "data").is_dir()
needs_examples = pytest.mark.skipif(not _RAY_HAS_EXAMPLES, reason="this Ray install ships no example data")


def _read_tsv(path):
    return pacsv.read_csv(path, parse_options=pacsv.ParseOptions(delimiter="\t"))


@oxray_only
def test_iris_table_is_fishers_150_flowers():
    from oxray.data._internal.example_data import iris_table

    table = iris_table()
    assert table.schema == IRIS_SCHEMA
    assert table.num_rows == 150
    assert table.slice(0, 1).to_pylist() == [FIRST_ROW]
    assert table.slice(149, 1).to_pylist() == [LAST_ROW]
    counts = {v: table["variety"].to_pylist().count(v) for v in ("Setosa", "Versicolor", "Virginica")}
    assert counts == {"Setosa": 50, "Versicolor": 50, "Virginica": 50}
    # Well-known column means of the Iris data (cm).
    means = {name: round(sum(table[name].to_pylist()) / 150, 3) for name in IRIS_SCHEMA.names[:4]}
    assert means == {"sepal.length": 5.843, "sepal.width": 3.057, "petal.length": 3.758, "petal.width": 1.199}


@oxray_only
def test_packaged_files_hold_the_iris_table(tmp_path):
    """The shipped files are what write_iris_files writes today (regenerate them if this fails)."""
    from oxray.data._internal.example_data import EXAMPLES_DIR, iris_table, write_iris_files

    write_iris_files(tmp_path)
    for name in ("iris.csv", "iris.json", "iris.tsv"):
        assert (EXAMPLES_DIR / name).read_bytes() == (tmp_path / name).read_bytes(), name
    expected = iris_table()
    assert pq.read_table(EXAMPLES_DIR / "iris.parquet").equals(expected)
    assert pq.ParquetFile(EXAMPLES_DIR / "iris.parquet").metadata.num_row_groups == 1
    assert pacsv.read_csv(EXAMPLES_DIR / "iris.csv").equals(expected)
    assert pajson.read_json(EXAMPLES_DIR / "iris.json").equals(expected)
    tsv = _read_tsv(EXAMPLES_DIR / "iris.tsv")
    assert tsv.schema == IRIS_SCHEMA
    assert tsv["variety"].to_pylist() == [v.lower() for v in expected["variety"].to_pylist()]


@needs_examples
def test_read_csv_example_iris(data_cluster):
    ds = ray.data.read_csv("example://iris.csv")
    assert ds.count() == 150
    assert ds.take(1) == [FIRST_ROW]
    assert ds.schema().names == IRIS_SCHEMA.names
    assert ds.schema().types == IRIS_SCHEMA.types


@needs_examples
def test_read_parquet_example_iris(data_cluster):
    ds = ray.data.read_parquet("example://iris.parquet")
    assert ds.count() == 150
    assert ds.schema().types == IRIS_SCHEMA.types
    rows = ds.take_all()
    assert rows[0] == FIRST_ROW and rows[-1] == LAST_ROW
    assert ray.data.read_parquet("example://iris.parquet", columns=["variety"]).schema().names == ["variety"]


@needs_examples
def test_read_json_and_tsv_examples(data_cluster):
    assert ray.data.read_json("example://iris.json").take(1) == [FIRST_ROW]
    tsv = ray.data.read_csv("example://iris.tsv", parse_options=pacsv.ParseOptions(delimiter="\t"))
    assert tsv.count() == 150
    assert tsv.take(1) == [dict(FIRST_ROW, variety="setosa")]


@needs_examples
def test_example_path_mixes_with_local_paths(data_cluster, tmp_path):
    local = tmp_path / "extra.parquet"
    pq.write_table(pa.table({"sepal.length": [1.0]}), local)
    ds = ray.data.read_parquet([str(local), "example://iris.parquet"])
    assert ds.count() == 151
    # The same example twice reads it twice, as Ray does.
    assert ray.data.read_csv(["example://iris.csv"] * 2).count() == 300


@oxray_only
@pytest.mark.parametrize("name", ["example://nope.csv", "example://", "example://../_internal/example_data.py"])
def test_unknown_example_names_the_available_ones(name):
    with pytest.raises(FileNotFoundError) as info:
        ray.data.read_csv(name)
    message = str(info.value)
    assert repr(name) in message and "read_csv" in message
    assert "example://iris.csv" in message and "example://iris.parquet" in message


@oxray_only
def test_example_path_resolves_into_the_package():
    import oxray
    from oxray.data._internal.datasource import resolve_paths

    (path,), _ = resolve_paths(["example://iris.parquet"], "read_parquet")
    assert path.endswith("/oxray/data/examples/data/iris.parquet")
    assert path.startswith(str(pathlib.Path(oxray.__file__).resolve().parent))
