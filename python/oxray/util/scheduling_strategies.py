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
    """Run a task or actor on the node `node_id` (a hex id, as `get_runtime_context().get_node_id()`
    gives). With soft=False it fails (TaskUnschedulableError) when that node is gone or could
    never hold it; with soft=True it then runs elsewhere."""

    def __init__(
        self, node_id: str, soft: bool, _spill_on_unavailable: bool = False, _fail_on_unavailable: bool = False
    ):
        try:
            raw = bytes.fromhex(node_id) if isinstance(node_id, str) else None
        except ValueError:
            raw = None
        if not raw:
            raise ValueError(
                f"NodeAffinitySchedulingStrategy(node_id={node_id!r}): expected a node id as a hex string, "
                "such as ray.get_runtime_context().get_node_id() or ray.nodes()[i]['NodeID']"
            )
        if not isinstance(soft, bool):
            raise TypeError(f"NodeAffinitySchedulingStrategy(soft={soft!r}): expected True or False")
        for name, value in (
            ("_spill_on_unavailable", _spill_on_unavailable),
            ("_fail_on_unavailable", _fail_on_unavailable),
        ):
            if value:
                raise NotImplementedError(f"NodeAffinitySchedulingStrategy({name}=True) is not supported by oxray")
        self.node_id = node_id
        self.soft = soft
