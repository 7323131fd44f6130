"""`oxray.tune.execution.placement_groups`: Ray's module path of `PlacementGroupFactory`."""

from oxray.tune.trainable import PlacementGroupFactory

__all__ = ["PlacementGroupFactory"]
