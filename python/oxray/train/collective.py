"""`ray.train.collective` (Ray Train v2): collectives among a run's training workers, called
from `train_loop_per_worker` on every worker. They use the run's synchronization actor (the
one `report()` meets at), so they need no torch process group."""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def broadcast_from_rank_zero(data: T) -> T:
    """Rank 0's `data` (small and picklable), returned on every worker; the other workers'
    `data` is ignored. Every worker must call it, as for any collective."""
    from oxray._private.api import get
    from oxray.train._internal.session import get_session

    session = get_session("collective.broadcast_from_rank_zero")
    rank = session.context.get_world_rank()
    values = get(
        session.sync.barrier.remote(rank, data if rank == 0 else None, what="collective.broadcast_from_rank_zero()")
    )
    return values[0]


def barrier() -> None:
    """Waits until every worker of the run has called `barrier()`."""
    from oxray._private.api import get
    from oxray.train._internal.session import get_session

    session = get_session("collective.barrier")
    get(session.sync.barrier.remote(session.context.get_world_rank(), None, what="collective.barrier()"))


__all__ = ["barrier", "broadcast_from_rank_zero"]
