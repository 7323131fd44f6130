"""`FileShuffleConfig`: how a file read shuffles the order of its files, as Ray Data's does.

`read_parquet(shuffle=FileShuffleConfig(seed=...))` reads the files in an order drawn from the
seed; with `reseed_after_execution` (the default) each execution of the dataset draws a new
order from the seed and the execution's index, so epochs differ but two datasets built the same
way agree epoch by epoch. `shuffle="files"` draws an unseeded order each time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

__all__ = ["FileShuffleConfig"]


@dataclass
class FileShuffleConfig:
    seed: Optional[int] = None
    reseed_after_execution: bool = True

    def __post_init__(self):
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise ValueError("Seed must be an integer or None.")

    def get_seed(self, execution_idx: int = 0) -> Optional[int]:
        """The seed of the execution numbered `execution_idx` (None: unseeded)."""
        if self.seed is None:
            return None
        if not self.reseed_after_execution:
            return self.seed
        # Deterministic across processes (tuples of ints hash without PYTHONHASHSEED), in numpy's range.
        return hash((self.seed, execution_idx)) % (2**32)


def check_shuffle(shuffle) -> None:
    """Ray's accepted `shuffle` values: None, "files" or a FileShuffleConfig."""
    if not (
        shuffle is None or (isinstance(shuffle, str) and shuffle == "files") or isinstance(shuffle, FileShuffleConfig)
    ):
        raise ValueError(
            f"Invalid value for 'shuffle': {shuffle}. Valid values are None, 'files', `FileShuffleConfig`."
        )
