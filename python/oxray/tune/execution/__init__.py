"""`oxray.tune.execution`: only Ray's public name here, `placement_groups.PlacementGroupFactory`;
the trial controller itself is the engine's (`oxray-tune`)."""
