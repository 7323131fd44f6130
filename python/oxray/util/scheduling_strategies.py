"""Scheduling strategies, under Ray's names."""

from __future__ import annotations

from typing import Optional


class PlacementGroupSchedulingStrategy:
    """Run a task or actor in a placement group's bundle (-1: any bundle)."""

    def __init__(
        self,
        placement_group,
        placement_group_bundle_index: int = -1,
        placement_group_capture_child_tasks: Optional[bool] = None,
    ):
        self.placement_group = placement_group
        self.placement_group_bundle_index = placement_group_bundle_index
        self.placement_group_capture_child_tasks = placement_group_capture_child_tasks


class NodeAffinitySchedulingStrategy:
    """Accepted for compatibility; oxray places by resources (use custom node resources to pin work)."""

    def __init__(
        self, node_id: str, soft: bool, _spill_on_unavailable: bool = False, _fail_on_unavailable: bool = False
    ):
        self.node_id = node_id
        self.soft = soft
