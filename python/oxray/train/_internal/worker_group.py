"""The training workers: N actors gang-scheduled in one placement group, plus
the synchronization actor that `report` uses as its barrier."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
import time
from typing import Any, Callable, Optional

import oxray
from oxray import exceptions
from oxray._private.actor import ActorClass


class SyncActor:
    """Barriers across ranks (`report` is one), and the queue of completed
    reports that the controller drains."""

    def __init__(self, world_size: int):
        self.world_size = world_size
        self.cond = threading.Condition()
        self.arrived: dict = {}
        self.generation = 0
        self.completed: dict = {}
        self.events: list = []
        self.closed = False
        self.finished: set = set()
        # Reports the controller has registered, and the checkpoints it keeps: (dir name, metrics).
        self.registered = 0
        self.kept: list = []

    def close(self) -> None:
        """Wakes a waiting `next_events`: the controller is about to drain the queue."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def _gather(self, rank: int, value, on_complete: Optional[Callable] = None, what: str = "report()") -> list:
        with self.cond:
            generation = self.generation
            self.arrived[rank] = value
            self._check_no_rank_finished(what)
            if len(self.arrived) == self.world_size:
                values = [self.arrived[i] for i in range(self.world_size)]
                self.arrived = {}
                # Every rank has read generation - 1 before it could arrive here.
                self.completed.pop(generation - 1, None)
                self.completed[generation] = values
                self.generation += 1
                if on_complete is not None:
                    on_complete(values)
                self.cond.notify_all()
            else:
                while self.generation == generation:
                    self.cond.wait()
                    if self.generation == generation:
                        self._check_no_rank_finished(what)
            return self.completed[generation]

    def _check_no_rank_finished(self, what: str) -> None:
        gone = sorted(self.finished - set(self.arrived))
        if gone:
            self.arrived.clear()
            raise RuntimeError(
                f"rank(s) {gone} finished the training function without this {what}: every rank must call "
                f"oxray.train.{what} the same number of times"
            )

    def rank_finished(self, rank: int) -> None:
        """A rank's training function returned: barriers it has not joined can never complete."""
        with self.cond:
            self.finished.add(rank)
            self.cond.notify_all()

    def barrier(self, rank: int, value, what: str = "report()") -> list:
        """Every rank's `value`, once all have arrived (`what` names the caller in errors)."""
        return self._gather(rank, value, what=what)

    def report(self, rank: int, metrics: dict, dir_name: str, has_checkpoint: bool) -> bool:
        def complete(values):
            gave = any(v[1] for v in values)
            # Every rank's metrics, for callbacks; only rank 0's are kept, as in Ray.
            self.events.append(([v[0] for v in values], dir_name if gave else None))

        values = self._gather(rank, (metrics, has_checkpoint), complete)
        return any(v[1] for v in values)

    def registered_reports(self, count: int, kept: list) -> None:
        """The controller registered `count` more reports; `kept` is what retention keeps now."""
        with self.cond:
            self.registered += count
            self.kept = kept
            self.cond.notify_all()

    def reported_checkpoints(self, reports: int) -> list:
        """The kept checkpoints, once the controller has registered this attempt's first `reports` reports."""
        with self.cond:
            self.cond.wait_for(lambda: self.registered >= reports or self.closed)
            return list(self.kept)

    def next_events(self, timeout_s: float) -> list:
        with self.cond:
            self.cond.wait_for(lambda: self.events or self.closed, timeout_s)
            events, self.events = self.events, []
            return events


class RayTrainWorker:
    """One training process. `run` executes the user's loop."""

    def info(self) -> dict:
        from oxray._private.state import STATE

        return {"node_id": STATE.node_id, "pid": os.getpid(), "gpu_ids": oxray.get_gpu_ids()}

    def free_port(self) -> int:
        with socket.socket() as s:
            s.bind(("", 0))
            return s.getsockname()[1]

    def setup(self, env: dict, backend_setup: Callable[[], None]) -> None:
        os.environ.update(env)
        cpus = env.get("OMP_NUM_THREADS")
        if cpus:
            try:
                import torch

                torch.set_num_threads(int(cpus))
            except ImportError:
                pass
        backend_setup()

    def execute(self, fn, *args, **kwargs):
        """A custom Backend's `worker_group.execute(fn)` on this worker."""
        return fn(*args, **kwargs)

    def run(self, train_fn, config, context_args: dict, sync, latest_checkpoint, datasets: dict, func_context=None):
        from oxray.train._internal import session as s
        from oxray.train._internal.storage import RunStorage, register_options

        register_options(context_args["storage_path"], context_args.get("storage_options", ""))
        storage = RunStorage(context_args["storage_path"], context_args["name"])
        storage.check_shared()
        session_dir = os.environ.get("OXRAY_SESSION_DIR")
        if session_dir and os.environ.get("RAY_CHDIR_TO_TRIAL_DIR", "1") != "0":
            # As in Ray: relative paths in the loop land in this run's artifacts directory.
            artifacts = os.path.join(session_dir, "artifacts", context_args["name"])
            os.makedirs(artifacts, exist_ok=True)
            os.chdir(artifacts)
        rank = context_args["info"]["world_rank"]
        context = s.TrainContext(s.WorkerInfo(**context_args["info"]), context_args["name"], storage)
        s.set_session(s.Session(context, sync, latest_checkpoint, datasets))
        try:
            with (func_context or contextlib.nullcontext)():
                result = train_fn(config) if config is not None else train_fn()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        if s.contains_torch_tensor(result):
            raise ValueError(
                "Returning objects containing Torch tensors from the training function is not supported as it will "
                "throw an exception on deserialization. Return Python numbers or lists instead (tensor.tolist())."
            )
        # Only on a normal return: a rank that raised is reported as itself by the controller.
        oxray.get(sync.rank_finished.remote(rank))
        return result


def _log(msg: str) -> None:
    print(f"(oxray.train) {msg}", file=sys.stderr, flush=True)


def start_timeout_s() -> float:
    """How long a worker group may wait for its resources before the attempt fails."""
    return float(os.environ.get("OXRAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S", "300"))


# Read by the node agent: workers with this variable are forked from a template process that
# imported those modules (see `oxray._private.worker_template`).
TEMPLATE_PRELOAD_ENV = "OXRAY_TEMPLATE_PRELOAD"


def preload_env(preload: tuple) -> dict:
    """The variable that picks the template importing `preload`: warming and starting the
    workers must name it alike, or they get different templates."""
    return {TEMPLATE_PRELOAD_ENV: ",".join(preload)}


def warm_worker_template(preload: tuple) -> None:
    """Starts this node's template for workers that import `preload` first, so that the first
    worker group does not wait for those imports (best effort: a failure only costs that wait)."""
    from oxray._private import options as opts
    from oxray._private.api import _client
    from oxray._private.state import STATE

    env = opts.submitted_env_vars({"runtime_env": {"env_vars": preload_env(preload)}})
    try:
        _client().warm_workers(env)
    except Exception as e:  # noqa: BLE001 - an optimisation: the workers still start without it
        _log(f"could not start a worker template that imports {', '.join(preload)} ahead of time: {e}")
        return
    STATE.warmed_templates.add((STATE.epoch, preload))


def template_warmed(preload: tuple) -> bool:
    """Whether this session asked its node for the template that imports `preload`."""
    from oxray._private.state import STATE

    return (STATE.epoch, preload) in STATE.warmed_templates


def warm_torch_workers_if_imported() -> None:
    """A driver that imported torch (or `oxray.train.torch`, as Ray's Train + Tune guide does)
    will likely run TorchTrainers: the node starts the template that forks their workers with
    torch imported now, so that the first worker group does not wait for that import."""
    if "torch" not in sys.modules and "oxray.train.torch" not in sys.modules:
        return
    from oxray.train.torch.config import TorchConfig

    preload = TorchConfig()._worker_preload
    if preload:
        warm_worker_template(preload)


class WorkerGroup:
    def __init__(
        self,
        num_workers: int,
        resources: dict,
        strategy: str,
        runtime_env: Optional[dict] = None,
        label_selectors: Optional[list] = None,
        preload: tuple = (),
    ):
        self.num_workers = num_workers
        self.preload = preload
        self.label_selectors = label_selectors or []
        self.resources = resources
        self.strategy = strategy
        self.runtime_env = runtime_env
        self.pg = None
        self.sync = None
        self.workers: list = []
        self.infos: list = []
        # Set once every rank's training function has returned (the attempt succeeded).
        self.training_finished = False

    def _actor_options(self, rank: int) -> dict:
        from oxray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        res = dict(self.resources)
        options = {
            "num_cpus": res.pop("CPU", 0.0),
            "num_gpus": res.pop("GPU", 0.0),
            "scheduling_strategy": PlacementGroupSchedulingStrategy(self.pg, placement_group_bundle_index=rank),
            # The log prefix of this worker's output in the driver.
            "_display_name": f"RayTrainWorker rank={rank}",
        }
        if "memory" in res:
            options["memory"] = res.pop("memory")
        runtime_env = dict(self.runtime_env or {})
        if self.preload:
            # The node forks these workers from a template that imported the modules (the user's
            # own setting of the variable wins).
            runtime_env["env_vars"] = {**preload_env(self.preload), **runtime_env.get("env_vars", {})}
        if runtime_env:
            options["runtime_env"] = runtime_env
        if res:
            options["resources"] = res
        return options

    def start(self) -> None:
        from oxray.util.placement_group import placement_group

        self.pg = placement_group(
            [dict(self.resources) for _ in range(self.num_workers)],
            strategy=self.strategy,
            bundle_label_selector=self.label_selectors or None,
        )
        from oxray.tune import session as tune_session

        if tune_session._session is not None:
            # A Tune trial that is stopped removes it at once, with the workers in it.
            tune_session._session.own_placement_group(self.pg)
        started = time.monotonic()
        while not self.pg.wait(timeout_seconds=10):
            if time.monotonic() - started > start_timeout_s():
                raise WorkerFailure(
                    None,
                    TimeoutError(
                        f"could not reserve {self.num_workers} workers of {self.resources} ({self.strategy}) within "
                        f"{start_timeout_s():g} s (OXRAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S); the cluster has "
                        f"{oxray.available_resources()} free"
                    ),
                )
            _log(
                f"waiting for resources for {self.num_workers} workers of {self.resources} each "
                f"({time.monotonic() - started:.0f} s so far); the cluster has {oxray.available_resources()} free"
            )
        self.sync = ActorClass(SyncActor, {})._submit(
            (self.num_workers,),
            {},
            {"num_cpus": 0, "max_concurrency": self.num_workers + 4, "_display_name": "TrainSync"},
        )
        worker_cls = ActorClass(RayTrainWorker, {})
        self.workers = [worker_cls._submit((), {}, self._actor_options(rank)) for rank in range(self.num_workers)]
        self.infos = gather([w.info.remote() for w in self.workers])

    def rank_layout(self) -> list[dict]:
        """World/local/node ranks: rank follows the bundle order; nodes are
        numbered in order of their first worker."""
        node_order: list = []
        layout = []
        for rank, info in enumerate(self.infos):
            if info["node_id"] not in node_order:
                node_order.append(info["node_id"])
            same_node = [i for i in self.infos[:rank] if i["node_id"] == info["node_id"]]
            layout.append(
                {
                    "world_rank": rank,
                    "world_size": self.num_workers,
                    "local_rank": len(same_node),
                    "local_world_size": sum(1 for i in self.infos if i["node_id"] == info["node_id"]),
                    "node_rank": node_order.index(info["node_id"]),
                }
            )
        return layout

    def node_ip(self, node_id: str) -> str:
        for n in oxray.nodes():
            if n["NodeID"] == node_id:
                return n["NodeManagerAddress"]
        return "127.0.0.1"

    def shutdown(self) -> None:
        from oxray.util.placement_group import remove_placement_group

        for actor in [*self.workers, self.sync]:
            if actor is not None:
                try:
                    oxray.kill(actor)
                except Exception:  # noqa: BLE001 - already gone
                    pass
        if self.pg is not None:
            try:
                remove_placement_group(self.pg)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.workers, self.sync, self.pg = [], None, None

    # Ray's worker-group interface, for a custom Backend's hooks.
    def __len__(self) -> int:
        return len(self.workers)

    def execute_async(self, fn, *args, **kwargs) -> list:
        return [w.execute.remote(fn, *args, **kwargs) for w in self.workers]

    def execute(self, fn, *args, **kwargs) -> list:
        """Runs `fn(*args, **kwargs)` on every worker; the results by rank."""
        return gather(self.execute_async(fn, *args, **kwargs))

    def execute_single(self, rank: int, fn, *args, **kwargs):
        return gather([self.workers[rank].execute.remote(fn, *args, **kwargs)])[0]


class WorkerFailure(Exception):
    """An attempt failed: a rank's error (with the remote traceback), or with
    `rank` None, the group's (its resources or its sync actor)."""

    def __init__(self, rank: Optional[int], error: BaseException):
        super().__init__(f"rank {rank}: {error}" if rank is not None else str(error))
        self.rank = rank
        self.error = error

    @property
    def who(self) -> str:
        return f"Rank {self.rank}" if self.rank is not None else "The worker group"


def gather(refs: list) -> list:
    """Results of one call per rank; the first failure raises at once (the
    other ranks may be blocked waiting for the failed one)."""
    pending = {r: i for i, r in enumerate(refs)}
    results: list[Any] = [None] * len(refs)
    while pending:
        ready, _ = oxray.wait(list(pending), num_returns=1)
        for ref in ready:
            rank = pending.pop(ref)
            try:
                results[rank] = oxray.get(ref)
            except (exceptions.RayError, Exception) as e:  # noqa: BLE001 - a rank's failure ends the attempt
                raise WorkerFailure(rank, e) from None
    return results
