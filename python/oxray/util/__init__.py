"""Utilities (placement groups arrive with the multi-node work)."""
