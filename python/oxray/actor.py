"""`ray.actor`: actor classes, handles and methods, and `exit_actor()`."""

from oxray._private.actor import ActorClass, ActorHandle, ActorMethod, exit_actor, method

__all__ = ["ActorClass", "ActorHandle", "ActorMethod", "exit_actor", "method"]
