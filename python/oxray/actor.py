"""`ray.actor`: actor classes, handles and methods, and `exit_actor()`."""

from oxray._private.actor import (
    ActorClass,
    ActorClassInheritanceException,
    ActorHandle,
    ActorMethod,
    exit_actor,
    method,
)

__all__ = ["ActorClass", "ActorClassInheritanceException", "ActorHandle", "ActorMethod", "exit_actor", "method"]
