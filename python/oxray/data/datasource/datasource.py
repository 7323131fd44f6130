"""Ray's module path of `Datasource` and `ReadTask` (`ray.data.datasource.datasource`)."""

from oxray.data.datasource import Datasource, ReadTask

__all__ = ["Datasource", "ReadTask"]
