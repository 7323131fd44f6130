"""Placement groups: bundles of resources reserved together (all or none)
across the cluster, as in `ray.util.placement_group`."""

from __future__ import annotations

import os
from typing import Dict, List, Optional

from oxray._private.ids import PlacementGroupID

VALID_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
# Ray's name for it.
VALID_PLACEMENT_GROUP_STRATEGIES = VALID_STRATEGIES


class PlacementGroup:
    """A handle to a placement group; it pickles, so tasks can use it too."""

    def __init__(self, id: PlacementGroupID, bundle_specs: Optional[List[Dict[str, float]]] = None):
        self.id = id
        self._bundle_specs = bundle_specs

    @property
    def bundle_specs(self) -> List[Dict[str, float]]:
        if self._bundle_specs is None:
            info = _client().get_placement_group(pg_id=self.id.binary())
            self._bundle_specs = info.bundles if info else []
        return self._bundle_specs

    @property
    def bundle_count(self) -> int:
        return len(self.bundle_specs)

    def ready(self):
        """An ObjectRef that resolves (to this group) once every bundle is reserved."""
        from oxray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return _ready.options(
            num_cpus=0, scheduling_strategy=PlacementGroupSchedulingStrategy(self, placement_group_bundle_index=-1)
        ).remote(self)

    def wait(self, timeout_seconds: float = 30) -> bool:
        import oxray

        ready, _ = oxray.wait([self.ready()], timeout=timeout_seconds)
        return bool(ready)

    def __eq__(self, other):
        return isinstance(other, PlacementGroup) and other.id == self.id

    def __hash__(self):
        return hash(self.id)

    def __reduce__(self):
        return PlacementGroup, (self.id, self._bundle_specs)

    def __repr__(self):
        return f"PlacementGroup(id={self.id.hex()}, bundles={self._bundle_specs})"


def _client():
    from oxray._private.api import _client as client

    return client()


def _ready_fn(pg):
    return pg


_ready_remote = None


class _LazyReady:
    """The tiny task behind `ready()`, made remote on first use."""

    def options(self, **options):
        global _ready_remote
        if _ready_remote is None:
            import oxray

            _ready_remote = oxray.remote(_ready_fn)
        return _ready_remote.options(**options)


_ready = _LazyReady()


def _validate_bundles(bundles) -> List[Dict[str, float]]:
    if not isinstance(bundles, (list, tuple)) or not bundles:
        raise ValueError(
            f"placement_group() needs a non-empty list of bundles (dicts of resource -> amount), got {bundles!r}"
        )
    out = []
    for i, bundle in enumerate(bundles):
        if not isinstance(bundle, dict):
            raise ValueError(f"Bundle {i} must be a dict of resource name -> amount, got {bundle!r}")
        clean = {}
        for name, amount in bundle.items():
            if not isinstance(name, str):
                raise ValueError(f"Bundle {i} has a resource name that is not a string: {name!r}")
            if name == "bundle":
                raise ValueError(
                    f"Bundle {i} asks for the resource 'bundle', a name placement groups reserve for "
                    "themselves (as in Ray); choose another name"
                )
            if isinstance(amount, bool) or not isinstance(amount, (int, float)) or amount < 0:
                raise ValueError(f"Bundle {i} asks for {name}={amount!r}: expected a number >= 0")
            if amount > 0:
                clean[name] = float(amount)
        if not clean:
            raise ValueError(
                f"Bundle {i} ({bundle!r}) is empty: "
                "every bundle needs at least one resource with an amount greater than 0"
            )
        if "object_store_memory" in bundle:
            import warnings

            from oxray._private.options import SPILLING_DOCS

            # Ray's wording; the bundle still holds that much of the node's object_store_memory resource.
            warnings.warn(
                "Setting 'object_store_memory' for bundles is deprecated since it doesn't actually reserve the "
                f"required object store memory. Use object spilling that's enabled by default ({SPILLING_DOCS}) "
                "instead to bypass the object store memory size limitation.",
                DeprecationWarning,
                stacklevel=3,
            )
        out.append(clean)
    return out


def placement_group(
    bundles: List[Dict[str, float]],
    strategy: Optional[str] = None,
    name: str = "",
    lifetime: Optional[str] = None,
    _soft_target_node_id: Optional[str] = None,
    bundle_label_selector=None,
    topology_strategy: Optional[Dict[str, str]] = None,
) -> PlacementGroup:
    """Reserves `bundles` with `strategy`; the group may stay pending until the
    cluster has room (see `ready()` / `wait()`). `topology_strategy`, instead of
    `strategy`: `{"ray.io/node-id": <strategy>, <label>: "STRICT_PACK"}` also keeps
    every bundle on nodes that share one value of `<label>`."""
    clean, strategy, pack_label, selectors = _checked_request(
        bundles, strategy, name, lifetime, _soft_target_node_id, bundle_label_selector, topology_strategy
    )
    from oxray._private.state import STATE, current_job_id

    pg_id = os.urandom(16)
    _client().create_placement_group(
        pg_id,
        clean,
        strategy,
        name,
        STATE.namespace or "",
        job_id=current_job_id(),
        detached=lifetime == "detached",
        bundle_label_selector=selectors,
        pack_label=pack_label,
    )
    return PlacementGroup(PlacementGroupID(pg_id), clean)


def validate_placement_group(
    bundles: List[Dict[str, float]],
    strategy: str = "PACK",
    lifetime: Optional[str] = None,
    _soft_target_node_id: Optional[str] = None,
    bundle_label_selector=None,
) -> bool:
    """Ray's check of `placement_group()`'s arguments, without creating the group: raises
    ValueError/TypeError naming what is wrong, else returns True."""
    _checked_request(bundles, strategy, "", lifetime, _soft_target_node_id, bundle_label_selector, None)
    return True


def _checked_request(bundles, strategy, name, lifetime, _soft_target_node_id, bundle_label_selector, topology_strategy):
    """(bundles, node strategy, pack label, label selectors) of a valid request; raises otherwise."""
    clean = _validate_bundles(bundles)
    strategy, pack_label = _node_strategy_and_pack_label(strategy, topology_strategy)
    selectors = []
    if bundle_label_selector:
        from oxray._private.options import check_label_selector

        if not isinstance(bundle_label_selector, (list, tuple)) or len(bundle_label_selector) != len(clean):
            raise ValueError(
                f"placement_group(bundle_label_selector={bundle_label_selector!r}): expected a list with one "
                f"label selector per bundle ({len(clean)})"
            )
        selectors = [dict(check_label_selector(s, "bundle_label_selector")) for s in bundle_label_selector]
    if _soft_target_node_id is not None:
        raise NotImplementedError("placement_group(_soft_target_node_id=...) is not supported by oxray")
    if strategy not in VALID_STRATEGIES:
        raise ValueError(
            f"Invalid placement group strategy {strategy!r}: expected one of {', '.join(VALID_STRATEGIES)}"
        )
    if lifetime not in (None, "detached"):
        raise ValueError(f"placement_group(lifetime=...) must be None or 'detached', got {lifetime!r}")
    if not isinstance(name, str):
        raise TypeError(f"placement_group(name=...) must be a string, got {name!r}")
    return clean, strategy, pack_label, selectors


NODE_ID_LABEL = "ray.io/node-id"


def _node_strategy_and_pack_label(strategy, topology_strategy) -> tuple:
    """Ray's rules for `strategy` and `topology_strategy`: (the node-level strategy, the
    label every bundle's node must share one value of, or "")."""
    if topology_strategy is None:
        return ("PACK" if strategy is None else strategy), ""
    if strategy is not None:
        raise ValueError(
            "`strategy` and `topology_strategy` cannot both be specified. "
            f"Pass node-level packing via `topology_strategy['{NODE_ID_LABEL}']`."
        )
    if not isinstance(topology_strategy, dict):
        raise ValueError(f"`topology_strategy` must be a dict, got {type(topology_strategy).__name__}.")
    if len(topology_strategy) > 2:
        raise ValueError(
            f"`topology_strategy` must contain 0, 1, or 2 entries: `{NODE_ID_LABEL}` plus an optional topology "
            f"label. Got {len(topology_strategy)} entries."
        )
    labels = []
    for key, value in topology_strategy.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"`topology_strategy` keys must be non-empty strings, got {key!r}.")
        if value not in VALID_STRATEGIES:
            raise ValueError(
                f"Invalid topology strategy {value!r} for label {key!r}: expected one of {', '.join(VALID_STRATEGIES)}"
            )
        if key != NODE_ID_LABEL:
            if value != "STRICT_PACK":
                raise ValueError(
                    f"Topology strategy {value!r} for label {key!r} is not supported: only 'STRICT_PACK' is, for "
                    f"labels other than `{NODE_ID_LABEL}` (as in Ray)."
                )
            labels.append(key)
    if len(labels) > 1:
        raise ValueError(
            f"`topology_strategy` supports at most one topology label other than `{NODE_ID_LABEL}`. Got {labels}."
        )
    return topology_strategy.get(NODE_ID_LABEL, "PACK"), (labels[0] if labels else "")


def remove_placement_group(placement_group: PlacementGroup) -> None:
    """Frees the group's bundles; tasks and actors running in it are killed."""
    if not isinstance(placement_group, PlacementGroup):
        raise TypeError(f"remove_placement_group() needs a PlacementGroup, got {placement_group!r}")
    _client().remove_placement_group(placement_group.id.binary())


def get_placement_group(placement_group_name: str) -> PlacementGroup:
    from oxray._private.state import STATE

    info = _client().get_placement_group(name=placement_group_name, namespace=STATE.namespace or "")
    if info is None:
        raise ValueError(f"Failed to look up placement group with name: {placement_group_name}")
    return PlacementGroup(PlacementGroupID(bytes.fromhex(info.placement_group_id)), info.bundles)


def placement_group_table(placement_group: Optional[PlacementGroup] = None) -> dict:
    """State of one group, or of all groups keyed by id, in Ray's field names."""

    def row(info):
        return {
            "placement_group_id": info.placement_group_id,
            "name": info.name,
            "bundles": dict(enumerate(info.bundles)),
            "bundles_to_node_id": dict(enumerate(info.bundle_nodes)),
            "strategy": info.strategy,
            "state": info.state,
        }

    if placement_group is not None:
        info = _client().get_placement_group(pg_id=placement_group.id.binary())
        return row(info) if info else {}
    return {info.placement_group_id: row(info) for info in _client().list_placement_groups()}


def get_current_placement_group() -> Optional[PlacementGroup]:
    """The placement group the calling task or actor runs in; None outside one (and in a driver)."""
    from oxray._private.state import CURRENT, STATE

    if STATE.mode != "worker":
        return None
    pg_id = CURRENT.placement_group_id
    return PlacementGroup(PlacementGroupID(pg_id)) if pg_id else None


def _captures_child_tasks() -> bool:
    from oxray._private.state import CURRENT

    return bool(CURRENT.capture_child_tasks)
