"""`DataType`: Ray Data's name for a column's type, a thin wrapper of an Arrow type.

Expressions' `udf(return_dtype=...)` takes one; the factories (`DataType.int32()`,
`DataType.string()`, `DataType.list(DataType.int64())`, ...) and `from_arrow` /
`from_numpy` make them.
"""

from __future__ import annotations

from typing import Union

import numpy as np
import pyarrow as pa

__all__ = ["DataType"]

# The factories taking no arguments: DataType.<name>() is the Arrow type pa.<name>().
_PRIMITIVES = (
    "null",
    "bool_",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "string",
    "large_string",
    "binary",
    "large_binary",
    "date32",
    "date64",
)


class DataType:
    """A column type (an Arrow type)."""

    def __init__(self, arrow_type: pa.DataType):
        if not isinstance(arrow_type, pa.DataType):
            raise TypeError(f"DataType({arrow_type!r}): expected a pyarrow.DataType")
        self._arrow_type = arrow_type

    @classmethod
    def from_arrow(cls, arrow_type: pa.DataType) -> "DataType":
        return cls(arrow_type)

    @classmethod
    def from_numpy(cls, numpy_dtype: Union[np.dtype, str]) -> "DataType":
        return cls(pa.from_numpy_dtype(np.dtype(numpy_dtype)))

    @classmethod
    def list(cls, value_type: "DataType") -> "DataType":
        return cls(pa.list_(value_type.to_arrow_dtype()))

    @classmethod
    def large_list(cls, value_type: "DataType") -> "DataType":
        return cls(pa.large_list(value_type.to_arrow_dtype()))

    @classmethod
    def fixed_size_list(cls, value_type: "DataType", list_size: int) -> "DataType":
        return cls(pa.list_(value_type.to_arrow_dtype(), list_size))

    @classmethod
    def struct(cls, fields: list) -> "DataType":
        return cls(pa.struct([(name, dtype.to_arrow_dtype()) for name, dtype in fields]))

    @classmethod
    def timestamp(cls, unit: str = "us", tz=None) -> "DataType":
        return cls(pa.timestamp(unit, tz))

    def to_arrow_dtype(self, values=None) -> pa.DataType:
        return self._arrow_type

    def to_numpy_dtype(self) -> np.dtype:
        return np.dtype(self._arrow_type.to_pandas_dtype())

    def is_arrow_type(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"DataType(arrow:{self._arrow_type})"

    def __eq__(self, other) -> bool:
        return isinstance(other, DataType) and self._arrow_type == other._arrow_type

    def __hash__(self) -> int:
        return hash(self._arrow_type)


def _factory(name: str):
    arrow_factory = getattr(pa, name)

    def make(cls) -> DataType:
        return cls(arrow_factory())

    make.__name__ = name.rstrip("_")
    make.__doc__ = f"The Arrow type pyarrow.{name}()."
    return classmethod(make)


for _name in _PRIMITIVES:
    setattr(DataType, _name.rstrip("_"), _factory(_name))
