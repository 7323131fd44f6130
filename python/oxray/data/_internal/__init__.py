"""The engine behind `oxray.data`: plan, datasources, executor, blocks, splitting, writing."""
