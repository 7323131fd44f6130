"""Ray's module path of `Datasink` and `WriteResult` (`ray.data.datasource.datasink`)."""

from oxray.data.datasource import Datasink, WriteResult

__all__ = ["Datasink", "WriteResult"]
