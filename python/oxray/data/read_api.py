"""Creating datasets: file readers (run by the Rust engine) and in-memory sources."""

from __future__ import annotations

import builtins
import sys
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from oxray.data._internal import block as B
from oxray.data._internal import plan as P
from oxray.data._internal.datasource import (
    FileDatasource,
    ParquetDatasource,
    RangeDatasource,
    UserDatasource,
    resolve_paths,
)
from oxray.data.context import DataContext
from oxray.data.dataset import Dataset, MaterializedDataset, from_tables

_READ_RESOURCE_ARGS = ("override_num_blocks", "parallelism", "concurrency", "num_cpus", "num_gpus", "memory")


def _check_common(what: str, kwargs: dict, handled: tuple = ()) -> dict:
    """The reader's options it enforces (in `handled`), validated; any other option raises."""
    opts = {}
    for key, value in kwargs.items():
        if key in _READ_RESOURCE_ARGS:
            if value is None or (key == "parallelism" and value == -1):
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"{what}({key}={value!r}): expected a positive number")
            if key not in handled:
                raise ValueError(
                    f"{what}({key}=...) is not supported by oxray for this source"
                    + (f"; it takes {', '.join(handled)}" if handled else "")
                )
            opts["override_num_blocks" if key == "parallelism" else key] = value
            continue
        if key == "ray_remote_args" and not value:
            continue
        if key == "shuffle" and value is None:
            continue
        if key == "partitioning" and value in (None, "hive"):
            continue
        raise ValueError(f"{what}({key}=...) is not supported by oxray")
    return opts


def _num_blocks(n_items: int, override) -> int:
    if override is not None:
        return max(1, int(override))
    return max(1, min(n_items, DataContext.get_current().read_op_min_num_blocks))


def read_parquet(
    paths,
    *,
    filesystem=None,
    columns: Optional[list] = None,
    include_paths: bool = False,
    include_row_hash: bool = False,
    shuffle=None,
    file_extensions: Optional[list] = ("parquet",),
    **kwargs,
) -> Dataset:
    """Parquet files, directories or globs (local or s3://), read by the engine.

    Of pyarrow's reading options (Ray's `**arrow_parquet_args`) it takes `filter` (a
    `pyarrow.dataset` expression, applied to each file's rows, partition columns included)
    and `batch_size` (rows decoded at a time)."""
    from oxray.data.datasource.file_based_datasource import check_shuffle
    from oxray.data.datasource.partitioning import Partitioning, PathPartitionFilter

    filter_expr = kwargs.pop("filter", None)
    batch_size = kwargs.pop("batch_size", None)
    partitioning = kwargs.pop("partitioning", Partitioning("hive"))
    partition_filter = kwargs.pop("partition_filter", None)
    if partitioning is not None and not isinstance(partitioning, Partitioning) and partitioning != "hive":
        raise TypeError(f"read_parquet(partitioning={partitioning!r}): expected a Partitioning or None")
    if partition_filter is not None and not isinstance(partition_filter, PathPartitionFilter):
        raise TypeError(f"read_parquet(partition_filter={partition_filter!r}): expected a PathPartitionFilter")
    opts = _check_common("read_parquet", kwargs, ("override_num_blocks", "parallelism", "concurrency"))
    if columns is not None and (not isinstance(columns, (list, tuple)) or not all(isinstance(c, str) for c in columns)):
        raise TypeError(f"read_parquet(columns={columns!r}): expected a list of column names")
    check_shuffle(shuffle)
    if filter_expr is not None and not isinstance(filter_expr, pc.Expression):
        raise TypeError(
            f"read_parquet(filter={filter_expr!r}): expected a pyarrow.dataset expression "
            "(e.g. pyarrow.dataset.field('x') > 0)"
        )
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"read_parquet(batch_size={batch_size!r}): expected an integer >= 1")
    if file_extensions is not None and (
        isinstance(file_extensions, str) or not all(isinstance(e, str) for e in file_extensions)
    ):
        raise TypeError(f"read_parquet(file_extensions={file_extensions!r}): expected a list of extensions")
    paths, fs = resolve_paths(paths, "read_parquet", filesystem)
    source = ParquetDatasource(
        paths,
        columns,
        target_block_bytes=DataContext.get_current().target_max_block_size or (1 << 62),
        num_blocks=opts.get("override_num_blocks"),
        concurrency=opts.get("concurrency"),
        include_paths=bool(include_paths),
        include_row_hash=bool(include_row_hash),
        filter_expr=filter_expr,
        batch_size=batch_size,
        shuffle=shuffle,
        file_extensions=[e.lstrip(".") for e in file_extensions] if file_extensions is not None else None,
        partitioning=partitioning,
        partition_filter=partition_filter,
        filesystem=fs,
    )
    return Dataset(P.Plan(source))


def _file_dataset(fmt: str, what: str, paths, filesystem, include_paths, options, kwargs) -> Dataset:
    exts = kwargs.pop("file_extensions", None)
    opts = _check_common(what, kwargs, ("concurrency", "num_cpus", "override_num_blocks", "parallelism"))
    paths, fs = resolve_paths(paths, what, filesystem)
    source = FileDatasource(fmt, paths, options, include_paths, exts, fs)
    source.num_tasks = opts.get("override_num_blocks")
    source.read_compute = _read_compute(None, opts)
    return Dataset(P.Plan(source))


def _read_compute(compute, opts: dict) -> P.ComputeSpec:
    """How read tasks run: `concurrency=` (tasks) wins over `compute=`, as in Ray."""
    from oxray.data import ActorPoolStrategy, TaskPoolStrategy

    remote_args = (("num_cpus", opts["num_cpus"]),) if "num_cpus" in opts else ()
    if opts.get("concurrency") is not None or compute is None or compute == "tasks":
        return P.ComputeSpec(task_concurrency=opts.get("concurrency"), remote_args=remote_args)
    if isinstance(compute, TaskPoolStrategy):
        return P.ComputeSpec(task_concurrency=compute.size, remote_args=remote_args)
    if isinstance(compute, ActorPoolStrategy):
        return P.ComputeSpec(
            actors=True,
            min_size=compute.min_size,
            initial_size=compute.initial_size,
            max_size=compute.max_size,
            max_tasks_in_flight_per_actor=compute.max_tasks_in_flight_per_actor,
            remote_args=remote_args,
        )
    raise ValueError(f"read_datasource(compute={compute!r}): expected TaskPoolStrategy(...) or ActorPoolStrategy(...)")


# The codecs pyarrow decompresses a stream with (`arrow_open_stream_args={"compression": ...}`).
_STREAM_CODECS = ("gzip", "bz2", "brotli", "zstd", "lz4", "snappy")  # snappy: with python-snappy, as Ray


def _open_stream_compression(what: str, arrow_open_stream_args) -> Optional[str]:
    """The codec named in `arrow_open_stream_args`, the only key oxray takes (it reads files whole)."""
    if arrow_open_stream_args is None:
        return None
    if not isinstance(arrow_open_stream_args, dict):
        raise TypeError(f"{what}(arrow_open_stream_args={arrow_open_stream_args!r}): expected a dict")
    unknown = sorted(set(arrow_open_stream_args) - {"compression"})
    if unknown:
        raise ValueError(
            f"{what}(arrow_open_stream_args={arrow_open_stream_args!r}): {', '.join(unknown)} is not supported "
            "by oxray; it takes only 'compression'"
        )
    compression = arrow_open_stream_args.get("compression")
    if compression is not None and compression not in _STREAM_CODECS:
        raise ValueError(
            f"{what}(arrow_open_stream_args={{'compression': {compression!r}}}): expected one of "
            f"{', '.join(_STREAM_CODECS)} or None"
        )
    return compression


def _check_arrow_option(what: str, name: str, value, expected_type) -> None:
    if not isinstance(value, expected_type):
        raise TypeError(f"{what}({name}={value!r}): expected a {expected_type.__module__}.{expected_type.__name__}")


def read_csv(
    paths,
    *,
    filesystem=None,
    include_paths: bool = False,
    parse_options=None,
    read_options=None,
    convert_options=None,
    arrow_open_stream_args=None,
    **kwargs,
) -> Dataset:
    """CSV files. The engine reads them (plain or gzip) unless pyarrow `read_options`,
    `convert_options` or `parse_options` other than a delimiter are given or a file's codec is
    another; then pyarrow.csv reads them, as in Ray."""
    import pyarrow.csv as pacsv

    compression = _open_stream_compression("read_csv", arrow_open_stream_args)
    arrow_args = {}
    for name, value, expected_type in (
        ("read_options", read_options, pacsv.ReadOptions),
        ("parse_options", parse_options, pacsv.ParseOptions),
        ("convert_options", convert_options, pacsv.ConvertOptions),
    ):
        if value is not None:
            _check_arrow_option("read_csv", name, value, expected_type)
            arrow_args[name] = value
    delimiter = parse_options.delimiter if parse_options is not None else ","
    engine_parses = (
        read_options is None
        and convert_options is None
        and (parse_options is None or parse_options.equals(pacsv.ParseOptions(delimiter=delimiter)))
        and len(delimiter) == 1
        and delimiter.isascii()
    )
    options = {"delimiter": delimiter, "compression": compression, "arrow": None if engine_parses else arrow_args}
    return _file_dataset("csv", "read_csv", paths, filesystem, include_paths, options, kwargs)


# pyarrow.json.read_json's keyword arguments, which read_json passes on (Ray's **arrow_json_args).
_ARROW_JSON_ARGS = ("read_options", "parse_options")


def read_json(
    paths,
    *,
    lines: Optional[bool] = None,
    filesystem=None,
    include_paths: bool = False,
    arrow_open_stream_args=None,
    **kwargs,
):
    """JSON Lines, or JSON arrays of objects. The engine reads them (plain or gzip) unless
    pyarrow's `read_options` or `parse_options` are given or a file's codec is another; then
    pyarrow.json reads them, as in Ray."""
    import pyarrow.json as pajson

    arrow_args = {name: kwargs.pop(name) for name in _ARROW_JSON_ARGS if kwargs.get(name) is not None}
    for name in _ARROW_JSON_ARGS:
        kwargs.pop(name, None)
    if lines:
        # Ray reads `lines=True` with pandas, which takes none of these.
        incompatible = {"filesystem": filesystem, "arrow_open_stream_args": arrow_open_stream_args}
        incompatible["arrow_json_args"] = arrow_args
        for param, value in incompatible.items():
            if value:
                raise ValueError(f"`{param}` is not supported when `lines=True`. ")
    if "read_options" in arrow_args:
        _check_arrow_option("read_json", "read_options", arrow_args["read_options"], pajson.ReadOptions)
    if "parse_options" in arrow_args:
        _check_arrow_option("read_json", "parse_options", arrow_args["parse_options"], pajson.ParseOptions)
    compression = _open_stream_compression("read_json", arrow_open_stream_args)
    # Ray's default `lines=False` reads JSON Lines too (pyarrow's reader), and a JSON array
    # (its json.load fallback): the engine's detection does the same.
    options = {"lines": True if lines else None, "compression": compression, "arrow": arrow_args or None}
    return _file_dataset("json", "read_json", paths, filesystem, include_paths, options, kwargs)


def read_text(
    paths,
    *,
    drop_empty_lines: bool = False,
    encoding: str = "utf-8",
    filesystem=None,
    include_paths: bool = False,
    **kwargs,
) -> Dataset:
    if encoding.lower().replace("-", "") != "utf8":
        raise ValueError(f"read_text(encoding={encoding!r}): oxray reads UTF-8 text only")
    options = {"drop_empty_lines": drop_empty_lines}
    return _file_dataset("text", "read_text", paths, filesystem, include_paths, options, kwargs)


def read_numpy(paths, *, filesystem=None, include_paths: bool = False, **kwargs) -> Dataset:
    return _file_dataset("numpy", "read_numpy", paths, filesystem, include_paths, {}, kwargs)


def read_binary_files(
    paths, *, filesystem=None, include_paths: bool = False, arrow_open_stream_args=None, **kwargs
) -> Dataset:
    # As Ray, each file's bytes are decompressed with the codec named here or by its suffix.
    compression = _open_stream_compression("read_binary_files", arrow_open_stream_args)
    return _file_dataset(
        "binary", "read_binary_files", paths, filesystem, include_paths, {"compression": compression}, kwargs
    )


def read_images(
    paths, *, filesystem=None, size=None, mode: Optional[str] = None, include_paths: bool = False, **kwargs
) -> Dataset:
    if size is not None:
        if (
            not isinstance(size, (tuple, list))
            or len(size) != 2
            or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in size)
        ):
            raise ValueError(f"read_images(size={size!r}): expected (height, width) with positive integers")
        size = tuple(size)
    return _file_dataset(
        "images", "read_images", paths, filesystem, include_paths, {"size": size, "mode": mode}, kwargs
    )


def range(n: int, *, override_num_blocks: Optional[int] = None, parallelism: int = -1, **kwargs) -> Dataset:  # noqa: A001
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"range({n!r}): expected an integer >= 0")
    override_num_blocks = _check_common(
        "range",
        {**kwargs, "override_num_blocks": override_num_blocks, "parallelism": parallelism},
        ("override_num_blocks", "parallelism"),
    ).get("override_num_blocks")
    return Dataset(P.Plan(RangeDatasource(n, _num_blocks(n, override_num_blocks))))


def range_tensor(n: int, *, shape=(1,), override_num_blocks: Optional[int] = None, **kwargs) -> Dataset:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"range_tensor({n!r}): expected an integer >= 0")
    _check_common("range_tensor", kwargs)
    return Dataset(P.Plan(RangeDatasource(n, _num_blocks(n, override_num_blocks), tuple(shape))))


def _split_table(table: pa.Table, n_blocks: int) -> list:
    """Exactly `n_blocks` blocks, as Ray gives them: sizes differ by at most one row."""
    if table.num_rows == 0:
        return [table]
    per, extra = divmod(table.num_rows, n_blocks)
    out, start = [], 0
    for i in builtins.range(n_blocks):
        rows = per + (1 if i < extra else 0)
        out.append(table.slice(start, rows))
        start += rows
    return out


def _in_memory(name: str, table: pa.Table, n_blocks: int) -> MaterializedDataset:
    return from_tables(_split_table(table, n_blocks), name)


def from_items(items: list, *, override_num_blocks: Optional[int] = None, parallelism: int = -1) -> Dataset:
    override_num_blocks = _check_common(
        "from_items",
        {"override_num_blocks": override_num_blocks, "parallelism": parallelism},
        ("override_num_blocks", "parallelism"),
    ).get("override_num_blocks")
    if isinstance(items, (tuple, np.ndarray)):
        items = list(items)  # Ray takes any sequence
    if not isinstance(items, list):
        raise TypeError(f"from_items: expected a list, got {type(items).__name__}")
    if items and all(isinstance(i, dict) for i in items):
        table = B.table_from_rows(items, "from_items")
    elif any(isinstance(i, dict) for i in items):
        raise ValueError("from_items: either every item is a dict (one column per key) or none is")
    else:
        table = B.table_from_columns({"item": items}) if items else pa.table({"item": pa.array([], pa.null())})
    return _in_memory("FromItems", table, _num_blocks(len(items), override_num_blocks))


def from_numpy(ndarrays) -> MaterializedDataset:
    arrays = ndarrays if isinstance(ndarrays, list) else [ndarrays]
    tables = []
    for a in arrays:
        if not isinstance(a, np.ndarray):
            raise TypeError(f"from_numpy: expected numpy arrays, got {type(a).__name__}")
        tables.append(B.table_from_columns({"data": a}))
    return from_tables(tables, "FromNumpy")


def from_pandas(dfs, *, override_num_blocks: Optional[int] = None) -> MaterializedDataset:
    import pandas as pd

    frames = dfs if isinstance(dfs, list) else [dfs]
    tables = []
    for df in frames:
        if not isinstance(df, pd.DataFrame):
            raise TypeError(f"from_pandas: expected pandas DataFrames, got {type(df).__name__}")
        tables.append(B.pandas_to_table(df))
    if override_num_blocks is not None:
        tables = _split_table(B.concat(tables), override_num_blocks)
    return from_tables(tables, "FromPandas")


def from_arrow(tables, *, override_num_blocks: Optional[int] = None) -> MaterializedDataset:
    items = tables if isinstance(tables, list) else [tables]
    out = []
    for t in items:
        if isinstance(t, pa.RecordBatch):
            t = pa.Table.from_batches([t])
        if not isinstance(t, pa.Table):
            raise TypeError(f"from_arrow: expected pyarrow Tables, got {type(t).__name__}")
        out.append(t)
    if override_num_blocks is not None:
        out = _split_table(B.concat(out), override_num_blocks)
    return from_tables(out, "FromArrow")


def read_datasource(
    datasource, *, parallelism: int = -1, override_num_blocks: Optional[int] = None, compute=None, **kwargs
):
    """A dataset read by a user's `Datasource` (`oxray.data.datasource.Datasource`); its read
    tasks run as tasks, or on an actor pool with `compute=ActorPoolStrategy(...)`."""
    from oxray.data.datasource import Datasource as UserDatasourceBase

    if not isinstance(datasource, UserDatasourceBase) and not hasattr(datasource, "get_read_tasks"):
        raise TypeError(f"read_datasource: expected a Datasource, got {type(datasource).__name__}")
    common = {k: kwargs.pop(k) for k in list(kwargs) if k in _READ_RESOURCE_ARGS or k == "ray_remote_args"}
    opts = _check_common(
        "read_datasource",
        {**common, "override_num_blocks": override_num_blocks, "parallelism": parallelism},
        ("override_num_blocks", "parallelism", "concurrency", "num_cpus"),
    )
    if kwargs and not hasattr(datasource, "prepare_read"):
        # Ray hands extra keywords only to the older prepare_read(parallelism, **read_args) API.
        raise ValueError(
            f"read_datasource({', '.join(kwargs)}=...): {type(datasource).__name__} has no "
            "prepare_read(parallelism, **read_args) to take them; pass them to the datasource's constructor"
        )
    n = opts.get("override_num_blocks") or DataContext.get_current().read_op_min_num_blocks
    source = UserDatasource(datasource, int(n), kwargs)
    source.read_compute = _read_compute(compute, opts)
    return Dataset(P.Plan(source))


def from_blocks(blocks: list) -> MaterializedDataset:
    """A dataset of the given blocks (pyarrow Tables or pandas DataFrames), one block each."""
    if not isinstance(blocks, list):
        raise TypeError(f"from_blocks: expected a list of blocks, got {type(blocks).__name__}")
    return from_tables([_as_table(b, "from_blocks") for b in blocks], "FromBlocks")


def _as_table(block, what: str) -> pa.Table:
    if isinstance(block, pa.Table):
        return block
    if isinstance(block, pa.RecordBatch):
        return pa.Table.from_batches([block])
    pd = sys.modules.get("pandas")
    if pd is not None and isinstance(block, pd.DataFrame):
        return B.pandas_to_table(block)
    if isinstance(block, np.ndarray):
        return B.table_from_columns({"data": block})
    if isinstance(block, dict):
        return B.table_from_columns(block)
    raise TypeError(f"{what}: expected pyarrow Tables or pandas DataFrames, got {type(block).__name__}")


def _ref_to_blocks(what: str, value):
    """In a task where the object is: it as IPC blocks, and their (rows, bytes)."""
    table = _as_table(value, what)
    return [B.IpcBlock(table)], (table.num_rows, table.nbytes)


def _from_refs(refs, what: str, name: str) -> MaterializedDataset:
    import oxray
    from oxray.data._internal.executor import remote

    refs = refs if isinstance(refs, list) else [refs]
    if not all(isinstance(r, oxray.ObjectRef) for r in refs):
        raise TypeError(f"{what}: expected ObjectRefs (from ray.put), got {[type(r).__name__ for r in refs][:3]}")
    convert = remote(_ref_to_blocks, num_returns=2)
    made = [convert.remote(what, r) for r in refs]
    meta = oxray.get([m for _, m in made])
    data = [d for d, _ in made]
    schema = oxray.get(data[0])[0].schema if data else None
    return MaterializedDataset(data, list(meta), schema, None, name)


def from_arrow_refs(refs) -> MaterializedDataset:
    """Tables already in the object store; each becomes a block where it is (no driver copy)."""
    return _from_refs(refs, "from_arrow_refs", "FromArrow")


def from_pandas_refs(refs) -> MaterializedDataset:
    return _from_refs(refs, "from_pandas_refs", "FromPandas")


def from_numpy_refs(refs) -> MaterializedDataset:
    """ndarrays in the object store, as column `data`."""
    return _from_refs(refs, "from_numpy_refs", "FromNumpy")


def from_torch(dataset, local_read: bool = False) -> MaterializedDataset:
    """A torch map-style or iterable dataset, one row per item in column `item`. The items are
    read here, in the calling process, whatever `local_read` says (the result is the same)."""
    torch_data = sys.modules.get("torch.utils.data")
    iterable_style = torch_data is not None and isinstance(dataset, torch_data.IterableDataset)
    # An IterableDataset inherits a __getitem__ that raises: it is read by iterating, as Ray does.
    if not iterable_style and hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__"):
        items = [dataset[i] for i in builtins.range(len(dataset))]
    else:
        items = list(dataset)
    table = B.table_from_columns({"item": [_plain(item) for item in items]})
    return _in_memory("FromTorch", table, _num_blocks(len(items), None))


def from_huggingface(
    dataset, parallelism: int = -1, concurrency: Optional[int] = None, override_num_blocks: Optional[int] = None
) -> MaterializedDataset:
    """A Hugging Face `datasets.Dataset` (its Arrow table, with any select/shuffle/filter
    applied) or `IterableDataset` (read here, batch by batch), as Ray's `from_huggingface`."""
    hf = sys.modules.get("datasets")
    if hf is None:
        raise TypeError(f"from_huggingface: expected a Hugging Face datasets.Dataset, got {type(dataset).__name__}")
    if isinstance(dataset, (hf.DatasetDict, hf.IterableDatasetDict)):
        raise TypeError(
            "You provided a Hugging Face DatasetDict or IterableDatasetDict, which contains multiple datasets, "
            "but `from_huggingface` now only accepts a single Hugging Face Dataset. To convert just a single "
            "Hugging Face Dataset to a Ray Dataset, specify a split. For example, "
            "`ray.data.from_huggingface(my_dataset_dictionary['train'])`."
        )
    if concurrency is not None:
        raise ValueError("from_huggingface(concurrency=...) is not supported by oxray: the rows are read here")
    blocks = override_num_blocks if override_num_blocks is not None else (None if parallelism == -1 else parallelism)
    if isinstance(dataset, hf.IterableDataset):
        tables = [t for t in dataset.with_format("arrow").iter(batch_size=1024) if t.num_rows]
        table = B.concat(tables) if tables else pa.table({})
    elif isinstance(dataset, hf.Dataset):
        table = dataset.with_format("arrow")[:]  # the rows the dataset shows (indices applied)
    else:
        raise TypeError(f"from_huggingface: expected a Hugging Face datasets.Dataset, got {type(dataset).__name__}")
    return _in_memory("FromHuggingFace", table, _num_blocks(table.num_rows, blocks))


def _plain(value):
    """Tensors (also inside a tuple, as a TensorDataset yields) as numpy arrays."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        return value.numpy()
    if isinstance(value, tuple):
        return [_plain(x) for x in value]
    return value
