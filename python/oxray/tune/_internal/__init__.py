"""Tune's machinery: trial actors, the driver loop, the experiment directory."""
