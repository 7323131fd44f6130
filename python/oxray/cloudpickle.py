"""`ray.cloudpickle`: Ray ships its own copy of cloudpickle under this name; oxray's is the
installed `cloudpickle` (importing oxray keeps code objects' file names, as Ray's copy does)."""

from cloudpickle import *  # noqa: F403 - the whole of cloudpickle's API, as Ray's module has it
from cloudpickle import CloudPickler, Pickler, dump, dumps, load, loads, register_pickle_by_value  # noqa: F401

import oxray._private.serialization  # noqa: F401, E402 - applies the file-name fix before any dump
