"""`ray.types`: the types Ray's API annotations name (`ObjectRef`)."""

from oxray._private.object_ref import ObjectRef

__all__ = ["ObjectRef"]
