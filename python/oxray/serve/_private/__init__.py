"""Serve's internals: the controller actor and the replica actor."""
