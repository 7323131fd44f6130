"""`oxray.data`: Ray Data's API for streaming datasets into training, on oxray's Rust engine.

import oxray as ray
ds = ray.data.read_parquet("s3://bucket/train").map_batches(normalize)
for batch in ds.iter_torch_batches(batch_size=256):
    ...
"""

try:
    import pyarrow  # noqa: F401
except ImportError as e:  # pragma: no cover - pyarrow is installed with oxray[data]
    raise ImportError("oxray.data needs pyarrow: pip install 'oxray[data]' (or pip install pyarrow)") from e

from oxray.data import aggregate, block, collate_fn, datasource, datatype, exceptions, expressions
from oxray.data.context import DataContext, ExecutionOptions, ExecutionResources
from oxray.data.dataset import ActorPoolStrategy, Dataset, MaterializedDataset, Schema, TaskPoolStrategy
from oxray.data.datasource.file_based_datasource import FileShuffleConfig
from oxray.data.grouped_data import GroupedData
from oxray.data.iterator import DataIterator
from oxray.data.read_api import (
    from_arrow,
    from_arrow_refs,
    from_blocks,
    from_huggingface,
    from_items,
    from_numpy,
    from_numpy_refs,
    from_pandas,
    from_pandas_refs,
    from_torch,
    range,
    range_tensor,
    read_binary_files,
    read_csv,
    read_datasource,
    read_images,
    read_json,
    read_numpy,
    read_parquet,
    read_text,
)

__all__ = [
    "ActorPoolStrategy",
    "DataContext",
    "DataIterator",
    "Dataset",
    "ExecutionOptions",
    "ExecutionResources",
    "FileShuffleConfig",
    "GroupedData",
    "MaterializedDataset",
    "Schema",
    "TaskPoolStrategy",
    "aggregate",
    "block",
    "collate_fn",
    "datasource",
    "exceptions",
    "datatype",
    "expressions",
    "from_arrow",
    "from_arrow_refs",
    "from_blocks",
    "from_items",
    "from_numpy",
    "from_numpy_refs",
    "from_pandas",
    "from_pandas_refs",
    "from_huggingface",
    "from_torch",
    "range",
    "range_tensor",
    "read_binary_files",
    "read_csv",
    "read_datasource",
    "read_images",
    "read_json",
    "read_numpy",
    "read_parquet",
    "read_text",
]
