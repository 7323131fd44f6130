"""`ray.train.backend`: `Backend` and `BackendConfig`, the hooks a custom
`DataParallelTrainer` backend uses to set up its workers (as Torch's does)."""

from __future__ import annotations

import contextlib


class BackendConfig:
    """Configuration of a backend; `backend_cls` is the `Backend` it sets up."""

    @property
    def backend_cls(self):
        return Backend

    @property
    def train_func_context(self):
        """A context manager class the training function runs inside, on each worker."""
        return contextlib.nullcontext

    @property
    def _worker_preload(self) -> tuple:
        """Modules the workers' processes import before they start (oxray's, not Ray's): the
        node forks them from a template that has imported these already."""
        return ()


class Backend:
    """Hooks run by the controller around each worker group: `on_start` once its
    workers are up, `on_training_start` just before the training function starts,
    and `on_shutdown` before the group is stopped. `worker_group.execute(fn, *args)`
    runs `fn` on every worker and returns the results by rank."""

    # Ray's: workers on one node see each other's GPUs. Not supported by oxray yet.
    share_cuda_visible_devices: bool = False

    def on_start(self, worker_group, backend_config: BackendConfig) -> None:
        pass

    def on_training_start(self, worker_group, backend_config: BackendConfig) -> None:
        pass

    def on_shutdown(self, worker_group, backend_config: BackendConfig) -> None:
        pass


__all__ = ["Backend", "BackendConfig"]
