"""Utilities: placement groups, scheduling strategies, `ActorPool` and serialization helpers."""

from oxray.util.actor_pool import ActorPool
from oxray.util.check_serialize import inspect_serializability
from oxray.util.placement_group import (
    PlacementGroup,
    get_current_placement_group,
    get_placement_group,
    placement_group,
    placement_group_table,
    remove_placement_group,
)
from oxray.util.serialization import deregister_serializer, register_serializer


def get_node_ip_address() -> str:
    """Ray's: the address of this process's node (its agent's address: `--node-ip-address`)."""
    import os

    from oxray._private.state import STATE

    agent = os.environ.get("OXRAY_AGENT_ADDRESS") if STATE.mode == "worker" else None
    agent = agent or STATE.address_info.get("node_agent_address") or "127.0.0.1:0"
    host = agent.rsplit(":", 1)[0]
    return host.strip("[]")


def list_named_actors(all_namespaces: bool = False) -> list:
    """Ray's: the names of the live named actors in this job's namespace, or with
    `all_namespaces=True` dicts `{"name": ..., "namespace": ...}` across every namespace."""
    from oxray._private.api import _client
    from oxray._private.state import STATE

    live = [a for a in _client().list_actors() if a.name and a.state != "DEAD"]
    if all_namespaces:
        return [{"name": a.name, "namespace": a.namespace} for a in live]
    return [a.name for a in live if a.namespace == STATE.namespace]


__all__ = [
    "ActorPool",
    "deregister_serializer",
    "inspect_serializability",
    "list_named_actors",
    "PlacementGroup",
    "get_current_placement_group",
    "get_node_ip_address",
    "get_placement_group",
    "placement_group",
    "placement_group_table",
    "register_serializer",
    "remove_placement_group",
]
