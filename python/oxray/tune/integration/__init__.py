"""Tune's integrations with other libraries."""
