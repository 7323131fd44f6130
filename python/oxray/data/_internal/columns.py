"""Columns from whatever a UDF returns, and back: the value model of a block.

Ray Data accepts any value a row or batch UDF puts in a column. So does oxray:

- ndarrays, torch tensors and PIL images of one shape become a fixed-shape tensor column
  (Arrow's canonical `arrow.fixed_shape_tensor`), read back as one ndarray `(rows, *shape)`;
- of several shapes (same number of dimensions), a variable-shape tensor column
  (Arrow's canonical `arrow.variable_shape_tensor` layout), read back as an object ndarray of
  ndarrays;
- scalars, strings, bytes, lists, dicts and `None` become Arrow's own types;
- anything else Arrow cannot type (an arbitrary Python object) becomes a pickled-object column,
  read back as an object ndarray of the objects.

Parquet files Ray wrote with its own tensor types (`ray.data.arrow_tensor`, `_v2`,
`ray.data.arrow_variable_shaped_tensor`) are read as tensors too.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np
import pyarrow as pa

_NUMERIC_KINDS = "iufb"


class VariableShapeTensorType(pa.ExtensionType):
    """Tensors of one dtype and number of dimensions but varying shapes, one per row.

    Storage is `struct<data: list<T>, shape: fixed_size_list<int32>[ndim]>`, Arrow's canonical
    variable-shape tensor layout, so other Arrow readers can make sense of it."""

    def __init__(self, value_type: pa.DataType, ndim: int):
        self._value_type = value_type
        self._ndim = ndim
        storage = pa.struct([("data", pa.list_(value_type)), ("shape", pa.list_(pa.int32(), ndim))])
        super().__init__(storage, "arrow.variable_shape_tensor")

    @property
    def value_type(self) -> pa.DataType:
        return self._value_type

    @property
    def ndim(self) -> int:
        return self._ndim

    def __arrow_ext_serialize__(self) -> bytes:
        return b"{}"

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type, serialized):
        data_type = storage_type.field("data").type
        shape_type = storage_type.field("shape").type
        return cls(data_type.value_type, shape_type.list_size)

    def __reduce__(self):
        return VariableShapeTensorType, (self._value_type, self._ndim)


def _variable_shape_rows(storage: pa.StructArray) -> np.ndarray:
    """An object ndarray holding one ndarray (a view of the column's values) per row."""
    data = storage.field("data")
    flat = _flat_values(data)
    offsets = data.offsets.to_numpy(zero_copy_only=False)
    offsets = offsets - offsets[0]  # a slice's offsets start inside the values
    shape_values = np.asarray(_flat_values(storage.field("shape"))).reshape(len(storage), -1)
    out = np.empty(len(storage), dtype=object)
    valid = None if storage.null_count == 0 else storage.is_valid().to_numpy(zero_copy_only=False)
    for i in range(len(storage)):
        if valid is not None and not valid[i]:
            out[i] = None
            continue
        out[i] = flat[offsets[i] : offsets[i + 1]].reshape(tuple(int(d) for d in shape_values[i]))
    return out


class PickledObjectType(pa.ExtensionType):
    """Python objects Arrow has no type for, pickled (cloudpickle) one per row."""

    def __init__(self):
        super().__init__(pa.large_binary(), "oxray.pickled_object")

    def __arrow_ext_serialize__(self) -> bytes:
        return b""

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type, serialized):
        return cls()

    def __reduce__(self):
        return PickledObjectType, ()


class RayTensorType(pa.ExtensionType):
    """Ray's own fixed-shape tensor types, as Ray writes them into parquet files: read-only here
    (oxray writes Arrow's canonical types), so a user's existing Ray datasets still read."""

    def __init__(self, storage_type: pa.DataType, name: str, shape: tuple):
        self._shape = tuple(shape)
        super().__init__(storage_type, name)

    @property
    def shape(self) -> tuple:
        return self._shape

    def __arrow_ext_serialize__(self) -> bytes:
        return json.dumps(list(self._shape)).encode()

    @classmethod
    def _deserialize(cls, name, storage_type, serialized):
        text = serialized.decode()
        shape = json.loads(text.replace("(", "[").replace(")", "]").replace(",]", "]"))
        return cls(storage_type, name, tuple(shape))

    def __reduce__(self):
        return _ray_tensor_type, (self.storage_type, self.extension_name, self._shape)


def _ray_tensor_type(storage_type, name, shape):
    return RayTensorType(storage_type, name, shape)


class _RayTensorV1(RayTensorType):
    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type, serialized):
        return cls._deserialize("ray.data.arrow_tensor", storage_type, serialized)


class _RayTensorV2(RayTensorType):
    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type, serialized):
        return cls._deserialize("ray.data.arrow_tensor_v2", storage_type, serialized)


class RayVariableShapedTensorType(pa.ExtensionType):
    """Ray's variable-shaped tensor type, `struct<data: list<T>, shape: list<int64>>`."""

    def __init__(self, storage_type: pa.DataType, ndim: int):
        self._ndim = ndim
        super().__init__(storage_type, "ray.data.arrow_variable_shaped_tensor")

    def __arrow_ext_serialize__(self) -> bytes:
        return json.dumps(self._ndim).encode()

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type, serialized):
        try:
            ndim = int(json.loads(serialized.decode()))
        except (ValueError, TypeError):
            ndim = 0  # only a hint: each row carries its shape
        return cls(storage_type, ndim)

    def __reduce__(self):
        return RayVariableShapedTensorType, (self.storage_type, self._ndim)


def _register(ext_type: pa.ExtensionType) -> None:
    try:
        pa.register_extension_type(ext_type)
    except pa.ArrowKeyError:
        pass  # registered already (this module reloaded, or a newer pyarrow knows the type)


_register(VariableShapeTensorType(pa.float32(), 1))
_register(PickledObjectType())
for _cls, _storage in ((_RayTensorV1, pa.list_(pa.float32())), (_RayTensorV2, pa.large_list(pa.float32()))):
    _register(_cls(_storage, "ray.data.arrow_tensor" if _cls is _RayTensorV1 else "ray.data.arrow_tensor_v2", (1,)))
_register(
    RayVariableShapedTensorType(pa.struct([("data", pa.list_(pa.float32())), ("shape", pa.list_(pa.int64()))]), 1)
)

_FIXED_SHAPE = "arrow.fixed_shape_tensor"
_VARIABLE_SHAPE = ("arrow.variable_shape_tensor", "ray.data.arrow_variable_shaped_tensor")
_RAY_FIXED_SHAPE = ("ray.data.arrow_tensor", "ray.data.arrow_tensor_v2")
_PICKLED = "oxray.pickled_object"
_TENSOR_NAMES = (_FIXED_SHAPE, *_VARIABLE_SHAPE, *_RAY_FIXED_SHAPE)


def _flat_values(list_array) -> np.ndarray:
    """The values under a list array (all levels), as numpy; a view where Arrow allows."""
    values = list_array.flatten()
    while (
        pa.types.is_list(values.type) or pa.types.is_large_list(values.type) or pa.types.is_fixed_size_list(values.type)
    ):
        values = values.flatten()
    return values.to_numpy(zero_copy_only=False)


def _extension_name(arrow_type: pa.DataType):
    return arrow_type.extension_name if isinstance(arrow_type, pa.BaseExtensionType) else None


def is_tensor_type(arrow_type: pa.DataType) -> bool:
    return _extension_name(arrow_type) in _TENSOR_NAMES


def has_numpy_form(arrow_type: pa.DataType) -> bool:
    """Whether the column reads back through `tensor_values` (tensors, pickled objects). By
    extension name: a newer pyarrow reads the canonical variable-shape type as its own class."""
    return _extension_name(arrow_type) in (*_TENSOR_NAMES, _PICKLED)


# ---- values -> Arrow ----


def _torch():
    return sys.modules.get("torch")  # never imported here just to check a type


def to_array_like(value: Any) -> Any:
    """A torch tensor or PIL image as the ndarray it holds; anything else unchanged."""
    torch = _torch()
    if torch is not None and isinstance(value, torch.Tensor):
        value = value.detach()
        if value.device.type != "cpu":
            value = value.cpu()
        if value.dtype == torch.bfloat16:
            value = value.float()  # numpy has no bfloat16
        return value.numpy()
    pil = sys.modules.get("PIL.Image")
    if pil is not None and isinstance(value, pil.Image):
        return np.asarray(value)
    return value


def _is_tensor_value(value: Any) -> bool:
    return isinstance(value, np.ndarray) and value.ndim >= 1


def _numeric_array(values: np.ndarray) -> pa.Array:
    """A 1-d numeric ndarray as an Arrow array over the same memory (`pa.array` would import pandas)."""
    values = np.ascontiguousarray(values)
    if values.dtype.kind == "b":
        return pa.array(values)
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)])


def fixed_shape_tensor_array(values: np.ndarray, name: str = "") -> pa.Array:
    """An ndarray `(rows, *shape)` as a fixed-shape tensor column over the same memory."""
    values = np.ascontiguousarray(values)
    if values.dtype.kind not in _NUMERIC_KINDS:
        return pickled_object_array(list(values), name)
    flat = _numeric_array(values.reshape(-1))
    inner = int(np.prod(values.shape[1:]))
    storage = pa.FixedSizeListArray.from_arrays(flat, inner)
    tensor_type = pa.fixed_shape_tensor(flat.type, list(values.shape[1:]))
    return pa.ExtensionArray.from_storage(tensor_type, storage)


def variable_shape_tensor_array(values: list) -> pa.Array:
    """ndarrays (or `None`) of one number of dimensions and varying shapes, as one column."""
    arrays = [v for v in values if v is not None]
    ndim = arrays[0].ndim
    dtype = np.result_type(*[a.dtype for a in arrays])
    flat = np.concatenate([np.ascontiguousarray(a, dtype=dtype).reshape(-1) for a in arrays])
    offsets = np.zeros(len(values) + 1, dtype=np.int32)
    shapes = np.zeros((len(values), ndim), dtype=np.int32)
    mask = np.zeros(len(values), dtype=bool)
    pos = 0
    for i, v in enumerate(values):
        if v is None:
            mask[i] = True
        else:
            pos += v.size
            shapes[i] = v.shape
        offsets[i + 1] = pos
    data = pa.ListArray.from_arrays(pa.array(offsets), _numeric_array(flat))
    shape = pa.FixedSizeListArray.from_arrays(_numeric_array(shapes.reshape(-1)), ndim)
    storage = pa.StructArray.from_arrays(
        [data, shape], names=["data", "shape"], mask=pa.array(mask) if mask.any() else None
    )
    return pa.ExtensionArray.from_storage(VariableShapeTensorType(data.type.value_type, ndim), storage)


def pickled_object_array(values: list, name: str = "") -> pa.Array:
    """A user column of objects Arrow cannot type, as Ray's fallback makes it (unless the
    DataContext turns the fallback off)."""
    from oxray.data.context import DataContext

    if not DataContext.get_current().enable_fallback_to_arrow_object_ext_type:
        kinds = sorted({type(v).__name__ for v in values if v is not None})
        raise ValueError(
            f"column {name!r}: Arrow has no type for its {', '.join(kinds)} values, and "
            "DataContext.enable_fallback_to_arrow_object_ext_type is False (set it True to pickle them)"
        )
    return objects_column(values)


def objects_column(values: list) -> pa.Array:
    """Python objects pickled one per row (also how oxray carries its own partial results)."""
    import cloudpickle

    storage = pa.array([None if v is None else cloudpickle.dumps(v) for v in values], type=pa.large_binary())
    return pa.ExtensionArray.from_storage(PickledObjectType(), storage)


def _tensor_column(name: str, values: list) -> pa.Array:
    """A column of ndarrays (and `None`s): fixed-shape when it can be, variable-shape otherwise."""
    arrays = [v for v in values if v is not None]
    if any(a.dtype.kind not in _NUMERIC_KINDS for a in arrays):
        return pickled_object_array(values, name)
    shapes = {a.shape for a in arrays}
    if len(shapes) == 1 and len(arrays) == len(values):
        dtype = np.result_type(*{a.dtype for a in arrays})
        return fixed_shape_tensor_array(np.stack(arrays).astype(dtype, copy=False))
    if len({len(s) for s in shapes}) == 1:
        return variable_shape_tensor_array(values)
    return pickled_object_array(values, name)


def array_from_list(name: str, values: list) -> pa.Array:
    """One column from a list of per-row values of any kind."""
    values = [to_array_like(v) for v in values]
    values = [v.item() if isinstance(v, np.ndarray) and v.ndim == 0 else v for v in values]
    present = [v for v in values if v is not None]
    if present and all(_is_tensor_value(v) for v in present):
        return _tensor_column(name, values)
    if any(_is_tensor_value(v) for v in present):
        # Mixed arrays and other values: Arrow can type nested lists of 1-d arrays; else pickle.
        try:
            return pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError):
            return pickled_object_array(values, name)
    if present and any(type(v).__name__ == "Timestamp" for v in present):
        # pandas Timestamps carry nanoseconds that pa.array would cut to microseconds.
        import pandas as pd

        try:
            return pa.Array.from_pandas(pd.Series(values))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
            pass
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError, OverflowError):
        return pickled_object_array(values, name)


def array_from_values(name: str, values) -> pa.Array:
    """One column from what a batch UDF returned for it: an ndarray, a tensor, a list, a pandas
    Series or an Arrow array."""
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values
    values = to_array_like(values)
    if hasattr(values, "to_numpy") and hasattr(values, "dtype") and not isinstance(values, np.ndarray):
        values = values.to_numpy()  # a pandas Series
    if isinstance(values, np.ndarray):
        if values.ndim == 0:
            raise ValueError(f"column {name!r}: got a scalar ({values!r}); a batch column needs one value per row")
        if values.ndim > 1:
            return fixed_shape_tensor_array(values, name)
        if values.dtype.kind in "iuf" or (values.dtype.kind == "b"):
            return _numeric_array(values)
        if values.dtype == object:
            return array_from_list(name, list(values))
        try:
            return pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
            raise TypeError(f"column {name!r}: cannot convert an array of dtype {values.dtype} to a column: {e}") from e
    if isinstance(values, (list, tuple)):
        return array_from_list(name, list(values))
    raise TypeError(
        f"column {name!r}: got a {type(values).__name__}; a batch column must be a numpy array, a torch tensor, "
        "a list, a pandas Series or a pyarrow Array"
    )


# ---- Arrow -> numpy ----


def tensor_values(column: pa.Array) -> np.ndarray:
    """A tensor or pickled-object column as numpy: `(rows, *shape)`, or an object array."""
    name = column.type.extension_name
    if name in _VARIABLE_SHAPE:
        return _variable_shape_rows(column.storage)
    if name == _PICKLED:
        import cloudpickle

        out = np.empty(len(column), dtype=object)
        out[:] = [None if b is None else cloudpickle.loads(b) for b in column.storage.to_pylist()]
        return out
    shape = tuple(column.type.shape)
    if column.null_count:
        rows = [None if v is None else np.array(v).reshape(shape) for v in column.storage.to_pylist()]
        out = np.empty(len(column), dtype=object)
        out[:] = rows
        return out
    if name == _FIXED_SHAPE and not pa.types.is_boolean(column.type.value_type):
        return column.to_numpy_ndarray()
    # Ray's types, and bool (which Arrow's tensors lack): the flat values, reshaped.
    return _flat_values(column.storage).reshape((len(column), *shape))


def unify_tensor_columns(tables: list) -> list:
    """Tables whose tensor columns differ in shape between them, with those columns made
    variable-shape in every table (so they concatenate); other columns untouched."""
    names = tables[0].column_names
    out = list(tables)
    for name in names:
        types = {t.schema.field(name).type for t in tables if name in t.column_names}
        if len(types) < 2 or not all(is_tensor_type(ty) for ty in types):
            continue
        for i, t in enumerate(out):
            if name not in t.column_names:
                continue
            rows = list(tensor_values(t.column(name).combine_chunks()))
            out[i] = t.set_column(t.column_names.index(name), name, variable_shape_tensor_array(rows))
    return out
