"""`DataContext`: the per-process settings of Ray Data, with Ray's names and defaults.

Only the settings oxray enforces are accepted; setting any other attribute raises, so a
Ray user never believes an option took effect when it did not.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import threading
from dataclasses import dataclass, field
from typing import Optional

MiB = 1024 * 1024


@dataclass
class ExecutionResources:
    """Limits for one dataset's execution (`None`: derived from the cluster)."""

    cpu: Optional[float] = None
    gpu: Optional[float] = None
    object_store_memory: Optional[float] = None
    memory: Optional[float] = None

    def __post_init__(self):
        for name in ("cpu", "gpu", "object_store_memory", "memory"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
                raise ValueError(f"ExecutionResources({name}={value!r}): expected a number >= 0 or None")

    def copy(self, **changes) -> "ExecutionResources":
        """A copy with some limits changed (Ray's limits are set this way, not in place)."""
        return dataclasses.replace(self, **changes)


@dataclass
class ExecutionOptions:
    """How a dataset executes: its resource limits and whether output order is kept."""

    resource_limits: ExecutionResources = field(default_factory=ExecutionResources)
    preserve_order: bool = False
    verbose_progress: bool = False
    locality_with_output: bool = False

    def __post_init__(self):
        if not isinstance(self.resource_limits, ExecutionResources):
            raise TypeError(
                "ExecutionOptions(resource_limits=...) must be an ExecutionResources, "
                f"got {type(self.resource_limits).__name__}"
            )
        if self.locality_with_output:
            raise ValueError("ExecutionOptions(locality_with_output=True) is not supported by oxray")


_FIELDS = {
    "target_max_block_size": 128 * MiB,
    "target_min_block_size": 1 * MiB,
    "read_op_min_num_blocks": 200,
    "enable_progress_bars": True,
    "enable_auto_log_stats": False,
    "min_parallelism": 200,
    "max_errored_blocks": 0,
    "use_push_based_shuffle": False,
    # Ray Data's default: map tasks and pool actors go round the nodes with room.
    "scheduling_strategy": "SPREAD",
    # As Ray: a map task whose inputs reach this many bytes is placed by the strategy below
    # (Ray's locality-aware `DEFAULT`: on the node holding most of its inputs, if it has room).
    "large_args_threshold": 50 * MiB,
    "scheduling_strategy_large_args": "DEFAULT",
    # Sort and groupby are range-partitioned shuffles (Ray's sort shuffle), pull-based
    # unless this or `use_push_based_shuffle` says push-based.
    "shuffle_strategy": "sort_shuffle_pull_based",
    # Partitions of a hash-shuffle groupby when it names none.
    "default_hash_shuffle_parallelism": 200,
    # Values Arrow cannot type are pickled into an object column, as Ray's fallback does.
    "enable_fallback_to_arrow_object_ext_type": True,
    # A pool actor's call that raises one of these (True: any exception) runs again on the
    # same actor, up to ACTOR_TASK_RETRIES times; False: never.
    "actor_task_retry_on_errors": False,
    # Ray's choice of how iteration prefetches blocks: False (Ray's default), as oxray does it,
    # a thread in the consuming process running `prefetch_batches` blocks ahead; Ray's actor
    # prefetcher (True) does not exist here and is refused.
    "actor_prefetcher_enabled": False,
    # As Ray: an actor pool whose calls in flight per actor fall to this or below stops one
    # idle actor at a time, down to its minimum size.
    "actor_pool_util_downscaling_threshold": 0.5,
    # oxray's name for Ray's fixed scale-down debounce: no pool actor stops within this many
    # seconds of the pool growing (so a pool does not stop actors it is about to need).
    "actor_pool_scale_down_debounce_s": 10.0,
}

# How many times a pool actor's failing call is retried under `actor_task_retry_on_errors`
# (Ray retries without end; a bound keeps a UDF that always fails from hanging the dataset).
ACTOR_TASK_RETRIES = 5


class ShuffleStrategy(str, enum.Enum):
    """Ray's shuffle strategies. The sort shuffles range-partition sort and groupby keys (and
    deal a random shuffle's rows); push-based adds merge tasks between map and reduce, so each
    reduce reads one block per round of map tasks. The hash shuffle serves groupby."""

    SORT_SHUFFLE_PULL_BASED = "sort_shuffle_pull_based"
    SORT_SHUFFLE_PUSH_BASED = "sort_shuffle_push_based"
    HASH_SHUFFLE = "hash_shuffle"


def _arrow_fixed_shape_tensor_type(shape, value_type):
    """Arrow's canonical fixed-shape tensor type, called as Ray's tensor types are: (shape, dtype)."""
    import pyarrow as pa

    return pa.fixed_shape_tensor(value_type, list(shape))


class FixedShapeTensorFormat(enum.Enum):
    """Ray's layouts for columns of same-shaped tensors. oxray writes Arrow's canonical
    `arrow.fixed_shape_tensor` (ARROW_NATIVE) and reads Ray's V1 and V2 types from files."""

    V1 = "v1"
    V2 = "v2"
    ARROW_NATIVE = "native"

    def to_type(self):
        if self is not FixedShapeTensorFormat.ARROW_NATIVE:
            raise ValueError(f"{self}: oxray's tensor columns are Arrow's canonical arrow.fixed_shape_tensor")
        return _arrow_fixed_shape_tensor_type


# Ray's default is V2, its own extension type; oxray's tensor columns are always the canonical type.
_FIELDS["arrow_fixed_shape_tensor_format"] = FixedShapeTensorFormat.ARROW_NATIVE
# ndarray cells of pandas frames always become tensor columns (Ray's default, True).
_FIELDS["enable_tensor_extension_casting"] = True


class DataContext:
    """Settings read when a dataset executes. `DataContext.get_current()` is the process's."""

    _current: Optional["DataContext"] = None
    _lock = threading.Lock()

    def __init__(self):
        object.__setattr__(self, "execution_options", ExecutionOptions())
        for name, default in _FIELDS.items():
            object.__setattr__(self, name, default)

    @classmethod
    def get_current(cls) -> "DataContext":
        with cls._lock:
            if cls._current is None:
                cls._current = DataContext()
            return cls._current

    def __setattr__(self, name, value):  # noqa: C901 - one check per DataContext setting
        if name == "execution_options":
            if not isinstance(value, ExecutionOptions):
                raise TypeError(
                    f"DataContext.execution_options must be an ExecutionOptions, got {type(value).__name__}"
                )
        elif name not in _FIELDS:
            raise AttributeError(
                f"DataContext.{name} is not supported by oxray; supported settings: "
                f"execution_options, {', '.join(sorted(_FIELDS))}"
            )
        elif name == "max_errored_blocks" and value != 0:
            raise ValueError(
                "DataContext.max_errored_blocks: oxray fails on the first errored block (only 0 is supported)"
            )
        elif name == "actor_prefetcher_enabled" and value is not False:
            raise ValueError(
                f"DataContext.actor_prefetcher_enabled={value!r}: oxray prefetches with a thread in the "
                "consuming process (False, Ray's default); Ray's prefetcher actor is not supported"
            )
        elif name in ("scheduling_strategy", "scheduling_strategy_large_args") and value not in ("SPREAD", "DEFAULT"):
            raise ValueError(f"DataContext.{name}={value!r}: expected 'SPREAD' or 'DEFAULT'")
        elif name == "large_args_threshold" and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"DataContext.large_args_threshold={value!r}: expected a number of bytes >= 0")
        elif name in ("actor_pool_util_downscaling_threshold", "actor_pool_scale_down_debounce_s") and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0
        ):
            raise ValueError(f"DataContext.{name}={value!r}: expected a number >= 0")
        elif name == "use_push_based_shuffle" and not isinstance(value, bool):
            raise ValueError(f"DataContext.use_push_based_shuffle={value!r}: expected True or False")
        elif name == "shuffle_strategy":
            text = str(getattr(value, "value", value))
            if text not in {s.value for s in ShuffleStrategy}:
                raise ValueError(
                    f"DataContext.shuffle_strategy={value!r}: expected one of "
                    f"{', '.join(repr(s.value) for s in ShuffleStrategy)}"
                )
            value = ShuffleStrategy(text)
        elif name == "arrow_fixed_shape_tensor_format":
            text = str(getattr(value, "value", value))
            if text != FixedShapeTensorFormat.ARROW_NATIVE.value:
                raise ValueError(
                    f"DataContext.arrow_fixed_shape_tensor_format={value!r}: oxray writes tensor columns as "
                    "Arrow's canonical arrow.fixed_shape_tensor only (FixedShapeTensorFormat.ARROW_NATIVE); "
                    "Ray's V1 and V2 tensor types are read from files but not written"
                )
            value = FixedShapeTensorFormat.ARROW_NATIVE
        elif name == "enable_tensor_extension_casting" and value is not True:
            raise ValueError(
                f"DataContext.enable_tensor_extension_casting={value!r}: oxray always stores ndarray "
                "cells as tensor columns (only True is supported)"
            )
        elif name == "actor_task_retry_on_errors" and not (
            isinstance(value, bool)
            or (
                isinstance(value, (list, tuple))
                and all(isinstance(e, type) and issubclass(e, BaseException) for e in value)
            )
        ):
            raise ValueError(
                f"DataContext.actor_task_retry_on_errors={value!r}: expected True, False or a list of exception types"
            )
        elif name == "enable_fallback_to_arrow_object_ext_type" and value is None:
            value = True  # Ray's None: fall back (as its default does)
        elif name == "target_max_block_size" and value is None:
            pass  # Ray's "no limit": a read's blocks are whole files
        elif name in (
            "target_max_block_size",
            "target_min_block_size",
            "read_op_min_num_blocks",
            "min_parallelism",
            "default_hash_shuffle_parallelism",
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"DataContext.{name}={value!r}: expected a positive integer")
        object.__setattr__(self, name, value)

    def copy(self) -> "DataContext":
        other = DataContext()
        for name in ("execution_options", *_FIELDS):
            object.__setattr__(other, name, copy.deepcopy(getattr(self, name)))
        return other
