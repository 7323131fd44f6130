"""`DataConfig`: how a trainer's datasets reach its workers.

Each dataset named in `datasets_to_split` becomes `streaming_split(world_size, equal=True)`:
one execution shared by the ranks, each getting an equal, disjoint share every epoch. Every
other dataset reaches each rank whole, as its own iterator. Values may be datasets or
zero-argument callables that return one.
"""

from __future__ import annotations

from typing import Optional, Union


class DataConfig:
    def __init__(
        self,
        datasets_to_split: Union[str, list] = "all",
        execution_options=None,
        enable_shard_locality: bool = True,
    ):
        if datasets_to_split != "all" and not (
            isinstance(datasets_to_split, (list, tuple)) and all(isinstance(n, str) for n in datasets_to_split)
        ):
            raise TypeError(
                f"DataConfig(datasets_to_split={datasets_to_split!r}): expected 'all' or a list of dataset names"
            )
        self.datasets_to_split = datasets_to_split if datasets_to_split == "all" else list(datasets_to_split)
        self.execution_options = execution_options
        self.enable_shard_locality = enable_shard_locality

    def _options_for(self, name: str):
        from oxray.data import ExecutionOptions

        opts = self.execution_options
        if isinstance(opts, dict):
            opts = opts.get(name)
        if opts is not None and not isinstance(opts, ExecutionOptions):
            raise TypeError(
                f"DataConfig(execution_options=...) for {name!r} must be an ExecutionOptions, got {type(opts).__name__}"
            )
        return opts

    def configure(self, datasets: dict, world_size: int) -> list:
        """One dict of name -> DataIterator per rank."""
        if self.datasets_to_split != "all":
            unknown = sorted(set(self.datasets_to_split) - set(datasets))
            if unknown:
                raise ValueError(
                    f"DataConfig(datasets_to_split=...) names {unknown}, which the trainer was not given; "
                    f"its datasets are {sorted(datasets)}"
                )
        per_rank: list = [{} for _ in range(world_size)]
        if not datasets:
            return per_rank  # a trainer without datasets needs no oxray.data, hence no pyarrow
        from oxray.data import Dataset

        for name, value in datasets.items():
            ds = value() if callable(value) and not isinstance(value, Dataset) else value
            if not isinstance(ds, Dataset):
                raise TypeError(
                    f"datasets[{name!r}] must be an oxray.data Dataset or a function returning one, "
                    f"got {type(ds).__name__}"
                )
            options = self._options_for(name)
            if options is not None:
                ds = ds._with_execution_options(options)
            if self.datasets_to_split == "all" or name in self.datasets_to_split:
                iterators = ds.streaming_split(world_size, equal=True)
            else:
                iterators = [ds.iterator() for _ in range(world_size)]
            for rank in range(world_size):
                per_rank[rank][name] = iterators[rank]
        return per_rank

    def release(self, per_rank: list) -> None:
        """Ends the executions behind `configure`'s iterators (their split coordinators)."""
        import oxray

        coordinators = {id(c): c for shards in per_rank for it in shards.values() if (c := it._coordinator)}
        for coordinator in coordinators.values():
            try:
                oxray.kill(coordinator)
            except Exception:  # noqa: BLE001 - best effort: it may be gone with its node
                pass


def check_data_config(config: Optional[DataConfig], what: str) -> DataConfig:
    if config is None:
        return DataConfig()
    if not isinstance(config, DataConfig):
        raise TypeError(f"{what}(dataset_config=...) must be an oxray.train.DataConfig, got {type(config).__name__}")
    return config
