"""Ray's ``example://`` paths: small data sets shipped inside the package.

Ray users and Ray's docs read ``example://iris.csv`` or ``example://iris.parquet``; the name is a
path under ``oxray/data/examples/data/`` (Ray's ``ray/data/examples/data/``). oxray ships the Iris
data set (Fisher, 1936; public domain) in the formats oxray reads, with the columns, types and 150
rows of Ray's files: ``sepal.length``, ``sepal.width``, ``petal.length``, ``petal.width`` (double)
and ``variety`` (string).

The shipped files are written by :func:`write_iris_files` from the table below; the tests check
that the packaged files still hold exactly that table.
"""

from __future__ import annotations

import json
import os
import pathlib

EXAMPLE_SCHEME = "example://"

# oxray/data/examples/data, beside this package's `_internal`, as in Ray's layout.
EXAMPLES_DIR = pathlib.Path(__file__).resolve().parent.parent / "examples" / "data"

IRIS_COLUMNS = ("sepal.length", "sepal.width", "petal.length", "petal.width", "variety")

# Fisher's Iris measurements (cm), 50 flowers per variety in the order Ray's files list them:
# sepal length, sepal width, petal length, petal width; five flowers a line, split by "|".
_IRIS_MEASUREMENTS = {
    "Setosa": """
    5.1 3.5 1.4 0.2 | 4.9 3.0 1.4 0.2 | 4.7 3.2 1.3 0.2 | 4.6 3.1 1.5 0.2 | 5.0 3.6 1.4 0.2
    5.4 3.9 1.7 0.4 | 4.6 3.4 1.4 0.3 | 5.0 3.4 1.5 0.2 | 4.4 2.9 1.4 0.2 | 4.9 3.1 1.5 0.1
    5.4 3.7 1.5 0.2 | 4.8 3.4 1.6 0.2 | 4.8 3.0 1.4 0.1 | 4.3 3.0 1.1 0.1 | 5.8 4.0 1.2 0.2
    5.7 4.4 1.5 0.4 | 5.4 3.9 1.3 0.4 | 5.1 3.5 1.4 0.3 | 5.7 3.8 1.7 0.3 | 5.1 3.8 1.5 0.3
    5.4 3.4 1.7 0.2 | 5.1 3.7 1.5 0.4 | 4.6 3.6 1.0 0.2 | 5.1 3.3 1.7 0.5 | 4.8 3.4 1.9 0.2
    5.0 3.0 1.6 0.2 | 5.0 3.4 1.6 0.4 | 5.2 3.5 1.5 0.2 | 5.2 3.4 1.4 0.2 | 4.7 3.2 1.6 0.2
    4.8 3.1 1.6 0.2 | 5.4 3.4 1.5 0.4 | 5.2 4.1 1.5 0.1 | 5.5 4.2 1.4 0.2 | 4.9 3.1 1.5 0.2
    5.0 3.2 1.2 0.2 | 5.5 3.5 1.3 0.2 | 4.9 3.6 1.4 0.1 | 4.4 3.0 1.3 0.2 | 5.1 3.4 1.5 0.2
    5.0 3.5 1.3 0.3 | 4.5 2.3 1.3 0.3 | 4.4 3.2 1.3 0.2 | 5.0 3.5 1.6 0.6 | 5.1 3.8 1.9 0.4
    4.8 3.0 1.4 0.3 | 5.1 3.8 1.6 0.2 | 4.6 3.2 1.4 0.2 | 5.3 3.7 1.5 0.2 | 5.0 3.3 1.4 0.2
    """,
    "Versicolor": """
    7.0 3.2 4.7 1.4 | 6.4 3.2 4.5 1.5 | 6.9 3.1 4.9 1.5 | 5.5 2.3 4.0 1.3 | 6.5 2.8 4.6 1.5
    5.7 2.8 4.5 1.3 | 6.3 3.3 4.7 1.6 | 4.9 2.4 3.3 1.0 | 6.6 2.9 4.6 1.3 | 5.2 2.7 3.9 1.4
    5.0 2.0 3.5 1.0 | 5.9 3.0 4.2 1.5 | 6.0 2.2 4.0 1.0 | 6.1 2.9 4.7 1.4 | 5.6 2.9 3.6 1.3
    6.7 3.1 4.4 1.4 | 5.6 3.0 4.5 1.5 | 5.8 2.7 4.1 1.0 | 6.2 2.2 4.5 1.5 | 5.6 2.5 3.9 1.1
    5.9 3.2 4.8 1.8 | 6.1 2.8 4.0 1.3 | 6.3 2.5 4.9 1.5 | 6.1 2.8 4.7 1.2 | 6.4 2.9 4.3 1.3
    6.6 3.0 4.4 1.4 | 6.8 2.8 4.8 1.4 | 6.7 3.0 5.0 1.7 | 6.0 2.9 4.5 1.5 | 5.7 2.6 3.5 1.0
    5.5 2.4 3.8 1.1 | 5.5 2.4 3.7 1.0 | 5.8 2.7 3.9 1.2 | 6.0 2.7 5.1 1.6 | 5.4 3.0 4.5 1.5
    6.0 3.4 4.5 1.6 | 6.7 3.1 4.7 1.5 | 6.3 2.3 4.4 1.3 | 5.6 3.0 4.1 1.3 | 5.5 2.5 4.0 1.3
    5.5 2.6 4.4 1.2 | 6.1 3.0 4.6 1.4 | 5.8 2.6 4.0 1.2 | 5.0 2.3 3.3 1.0 | 5.6 2.7 4.2 1.3
    5.7 3.0 4.2 1.2 | 5.7 2.9 4.2 1.3 | 6.2 2.9 4.3 1.3 | 5.1 2.5 3.0 1.1 | 5.7 2.8 4.1 1.3
    """,
    "Virginica": """
    6.3 3.3 6.0 2.5 | 5.8 2.7 5.1 1.9 | 7.1 3.0 5.9 2.1 | 6.3 2.9 5.6 1.8 | 6.5 3.0 5.8 2.2
    7.6 3.0 6.6 2.1 | 4.9 2.5 4.5 1.7 | 7.3 2.9 6.3 1.8 | 6.7 2.5 5.8 1.8 | 7.2 3.6 6.1 2.5
    6.5 3.2 5.1 2.0 | 6.4 2.7 5.3 1.9 | 6.8 3.0 5.5 2.1 | 5.7 2.5 5.0 2.0 | 5.8 2.8 5.1 2.4
    6.4 3.2 5.3 2.3 | 6.5 3.0 5.5 1.8 | 7.7 3.8 6.7 2.2 | 7.7 2.6 6.9 2.3 | 6.0 2.2 5.0 1.5
    6.9 3.2 5.7 2.3 | 5.6 2.8 4.9 2.0 | 7.7 2.8 6.7 2.0 | 6.3 2.7 4.9 1.8 | 6.7 3.3 5.7 2.1
    7.2 3.2 6.0 1.8 | 6.2 2.8 4.8 1.8 | 6.1 3.0 4.9 1.8 | 6.4 2.8 5.6 2.1 | 7.2 3.0 5.8 1.6
    7.4 2.8 6.1 1.9 | 7.9 3.8 6.4 2.0 | 6.4 2.8 5.6 2.2 | 6.3 2.8 5.1 1.5 | 6.1 2.6 5.6 1.4
    7.7 3.0 6.1 2.3 | 6.3 3.4 5.6 2.4 | 6.4 3.1 5.5 1.8 | 6.0 3.0 4.8 1.8 | 6.9 3.1 5.4 2.1
    6.7 3.1 5.6 2.4 | 6.9 3.1 5.1 2.3 | 5.8 2.7 5.1 1.9 | 6.8 3.2 5.9 2.3 | 6.7 3.3 5.7 2.5
    6.7 3.0 5.2 2.3 | 6.3 2.5 5.0 1.9 | 6.5 3.0 5.2 2.0 | 6.2 3.4 5.4 2.3 | 5.9 3.0 5.1 1.8
    """,
}


def iris_rows() -> list[dict]:
    """The 150 Iris rows as dicts keyed by Ray's column names, in Ray's order."""
    rows = []
    for variety, text in _IRIS_MEASUREMENTS.items():
        for flower in text.replace("\n", "|").split("|"):
            values = flower.split()
            if not values:
                continue
            if len(values) != 4:
                raise AssertionError(f"Iris table: {flower!r} should hold four measurements")
            rows.append(dict(zip(IRIS_COLUMNS, [float(v) for v in values] + [variety], strict=True)))
    return rows


def iris_table():
    """The Iris rows as a pyarrow Table with Ray's schema (four doubles, one string)."""
    import pyarrow as pa

    rows = iris_rows()
    schema = pa.schema([(name, pa.float64()) for name in IRIS_COLUMNS[:4]] + [(IRIS_COLUMNS[4], pa.string())])
    return pa.table({name: [row[name] for row in rows] for name in IRIS_COLUMNS}, schema=schema)


def write_iris_files(directory) -> list[str]:
    """Write iris.csv, iris.parquet, iris.json and iris.tsv into `directory`; returns their paths.

    The formats follow Ray's files: a quoted CSV header, JSON lines, one parquet row group, and a
    TSV whose varieties are lower-case (as in Ray's iris.tsv)."""
    import pyarrow.csv as pa_csv
    import pyarrow.parquet as pq

    os.makedirs(directory, exist_ok=True)
    table = iris_table()
    rows = iris_rows()
    paths = {name: os.path.join(directory, name) for name in ("iris.csv", "iris.parquet", "iris.json", "iris.tsv")}
    pa_csv.write_csv(table, paths["iris.csv"])
    pq.write_table(table, paths["iris.parquet"], row_group_size=len(rows))
    with open(paths["iris.json"], "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, separators=(",", ":")) + "\n")
    with open(paths["iris.tsv"], "w", encoding="utf-8") as f:
        f.write("\t".join(IRIS_COLUMNS) + "\n")
        for row in rows:
            measurements = [f"{row[name]:.1f}" for name in IRIS_COLUMNS[:4]]
            f.write("\t".join(measurements + [row["variety"].lower()]) + "\n")
    return list(paths.values())


def available_examples() -> list[str]:
    """The names `example://` accepts: every file and folder under the examples directory."""
    if not EXAMPLES_DIR.is_dir():
        return []
    return sorted(str(p.relative_to(EXAMPLES_DIR)) for p in EXAMPLES_DIR.rglob("*") if p.name != "__pycache__")


def resolve_example_path(url: str, what: str) -> str:
    """The local path of ``example://<name>``; FileNotFoundError naming the examples if none."""
    name = url[len(EXAMPLE_SCHEME) :].strip("/")
    root = EXAMPLES_DIR.resolve()
    path = (root / name).resolve()
    # `..` must not lead out of the examples directory; treat it as an unknown name.
    inside = path == root or root in path.parents
    if not name or not inside or not path.exists():
        raise FileNotFoundError(
            f"{what}: no example data set {url!r}; oxray ships "
            f"{', '.join(EXAMPLE_SCHEME + n for n in available_examples()) or 'none'} "
            f"(files under {root})"
        )
    return str(path)
