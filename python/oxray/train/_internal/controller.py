"""Runs a training job from the driver: starts the worker group, registers
reports and checkpoints, and restarts the group on failure."""

from __future__ import annotations

import traceback
from typing import Any, Callable, Optional

import oxray
from oxray import _native
from oxray.train._internal.checkpoint_manager import CheckpointManager
from oxray.train._internal.data_config import DataConfig
from oxray.train._internal.run_state import RunReporter
from oxray.train._internal.storage import RunStorage
from oxray.train._internal.worker_group import WorkerFailure, WorkerGroup, _log, gather
from oxray.train._result import Result
from oxray.train.callback import TrainRunContext
from oxray.train.config import RunConfig, ScalingConfig
from oxray.train.exceptions import ControllerError, WorkerGroupError

# Runs in each worker process after the rendezvous variables are set (e.g. joining
# the torch process group).
BackendSetup = Callable[[], None]


def check_feasible(scaling: ScalingConfig) -> None:
    """Unknown resource names, or a worker no node can hold, fail before training."""
    per_worker = scaling.worker_resources
    nodes = [n for n in oxray.nodes() if n["Alive"]]
    known = set().union(*(n["Resources"] for n in nodes)) if nodes else set()
    own = [{k: v for k, v in n["Resources"].items() if not _native.is_placement_group_resource(k)} for n in nodes]
    for name in per_worker:
        if name not in known and not name.startswith("accelerator_type:"):
            raise ValueError(
                f"ScalingConfig(resources_per_worker=...) asks for {name!r}, which no node in the cluster has; "
                f"the cluster has {sorted(set().union(*own))}"
            )
    for selector in scaling.worker_label_selectors:
        if not any(_native.label_selector_matches(selector, n.get("Labels", {})) for n in nodes):
            raise ValueError(
                f"ScalingConfig(label_selector={selector!r}): no node of the cluster has matching labels; "
                f"nodes have {[n.get('Labels', {}) for n in nodes]}"
            )
    fits = [n for n in nodes if all(n["Resources"].get(k, 0) >= v for k, v in per_worker.items())]
    if not fits:
        raise ValueError(f"No node can hold one training worker of {per_worker}; nodes have {own}")
    if scaling.placement_strategy == "STRICT_SPREAD" and len(fits) < scaling.num_workers:
        raise ValueError(
            f"ScalingConfig(placement_strategy='STRICT_SPREAD') puts each of the {scaling.num_workers} workers on its "
            f"own node, but only {len(fits)} node(s) can hold a worker of {per_worker}"
        )
    if scaling.placement_strategy == "STRICT_PACK" and not any(
        all(n["Resources"].get(k, 0) >= v * scaling.num_workers for k, v in per_worker.items()) for n in nodes
    ):
        raise ValueError(
            f"ScalingConfig(placement_strategy='STRICT_PACK') puts all {scaling.num_workers} workers on one node, "
            f"but no node has {scaling.total_resources}"
        )
    total = oxray.cluster_resources()
    for name, amount in scaling.total_resources.items():
        if total.get(name, 0) < amount:
            raise ValueError(
                f"ScalingConfig(num_workers={scaling.num_workers}) needs {amount:g} {name} in all "
                f"({per_worker[name]:g} per worker), but the cluster has {total.get(name, 0):g}"
            )


class TrainController:
    def __init__(
        self,
        train_fn: Callable,
        train_config: Optional[dict],
        scaling: ScalingConfig,
        run_config: RunConfig,
        backend_setup: BackendSetup,
        datasets: Optional[dict],
        data_config: Optional[DataConfig] = None,
        backend_config=None,
    ):
        from oxray.train.backend import BackendConfig

        self.train_fn = train_fn
        self.train_config = train_config
        self.scaling = scaling
        self.run_config = run_config
        self.backend_setup = backend_setup
        self.datasets = datasets or {}
        self.data_config = data_config or DataConfig()
        self.backend_config = backend_config if backend_config is not None else BackendConfig()
        self.storage = RunStorage(run_config.storage_path, run_config.name)
        self.manager = CheckpointManager(self.storage, run_config.checkpoint_config)
        self.run_context = TrainRunContext(run_config, scaling, train_config)

    def run(self) -> Result:
        self.storage.validate()
        if self.manager.load_snapshot():
            _log(f"resuming run {self.run_config.name!r} from {self.manager.latest_checkpoint}")
        check_feasible(self.scaling)
        from oxray.tune import session as tune_session

        if tune_session._session is not None:
            # In a Tune trial: Tune counts this run's workers for the trial, so trials start only as
            # their Train runs can.
            tune_session._session.train_demand(dict(self.scaling.total_resources))
        self.reporter = RunReporter(
            self.run_config.name,
            self.storage.experiment_fs_path,
            self.scaling.num_workers,
            self.scaling.worker_resources,
        )
        try:
            result = self._run()
        except (ControllerError, WorkerGroupError) as e:
            self.reporter.status("ERRORED", str(e))
            raise
        except BaseException as e:  # Ctrl-C, or the driver's own failure
            self.reporter.abort(repr(e))
            raise
        self.reporter.status("FINISHED")
        return result

    def _run(self) -> Result:
        max_failures = self.run_config.failure_config.max_failures
        failures = 0
        while True:
            group = WorkerGroup(
                self.scaling.num_workers,
                self.scaling.worker_resources,
                self.scaling.placement_strategy,
                self.run_config.worker_runtime_env,
                self.scaling.worker_label_selectors,
                preload=self.backend_config._worker_preload,
            )
            self.reporter.attempt_started()
            try:
                return_value = self._attempt(group)
                self.reporter.attempt_ended("FINISHED")
                break
            except WorkerFailure as failure:
                failures += 1
                error = _describe(failure)
                self.reporter.attempt_ended("ERRORED", f"{failure.who} failed:\n{error}", failure.rank)
                for callback in self.run_config.callbacks:
                    callback.after_exception(
                        self.run_context, {failure.rank if failure.rank is not None else -1: _user_error(failure.error)}
                    )
                if max_failures != -1 and failures > max_failures:
                    message = (
                        f"Training failed after {failures} attempt(s) (FailureConfig(max_failures={max_failures})). "
                        f"{failure.who} failed:\n{error}"
                    )
                    if failure.rank is None:
                        raise ControllerError(message) from None
                    raise WorkerGroupError(message, {failure.rank: _user_error(failure.error)}) from None
                self.reporter.status("RESTARTING", f"{failure.who} failed: {_last_line(error)}")
                _log(
                    f"{failure.who.lower()} failed ({_last_line(error)}); restarting the worker group "
                    f"from {self.manager.latest_checkpoint} (failure {failures} of "
                    f"{'unlimited' if max_failures == -1 else max_failures})"
                )
            finally:
                group.shutdown()
        latest = self.manager.latest
        return Result(
            metrics=latest.metrics if latest else None,
            checkpoint=self.manager.latest_checkpoint,
            error=None,
            path=self.storage.experiment_fs_path,
            best_checkpoints=self.manager.best_checkpoints(),
            return_value=return_value,
            _metrics_history=[r.metrics for r in self.manager.results],
        )

    def _attempt(self, group: WorkerGroup) -> Any:
        try:
            group.start()
            # Checkpoints kept from earlier attempts and runs count as reported (Ray's).
            group.sync.registered_reports.remote(0, self._kept())
            master_port = gather([group.workers[0].free_port.remote()])[0]
        except WorkerFailure:
            raise
        except oxray.exceptions.RayError as e:  # e.g. the sync actor could not start
            raise WorkerFailure(None, e) from None
        layout = group.rank_layout()
        self.reporter.workers_ready(group.infos, layout, group.node_ip)
        master_addr = group.node_ip(group.infos[0]["node_id"])
        cpus = int(group.resources.get("CPU", 1)) or 1
        setups = []
        for worker, ranks in zip(group.workers, layout, strict=True):
            env = {
                "MASTER_ADDR": master_addr,
                "MASTER_PORT": str(master_port),
                "RANK": str(ranks["world_rank"]),
                "LOCAL_RANK": str(ranks["local_rank"]),
                "WORLD_SIZE": str(ranks["world_size"]),
                "LOCAL_WORLD_SIZE": str(ranks["local_world_size"]),
                "NODE_RANK": str(ranks["node_rank"]),
                "OMP_NUM_THREADS": str(cpus),
            }
            setups.append(worker.setup.remote(env, self.backend_setup))
        gather(setups)
        backend = self.backend_config.backend_cls()
        self._backend_hook(backend.on_start, group)
        shards = self.data_config.configure(self.datasets, group.num_workers)
        try:
            self._backend_hook(backend.on_training_start, group)
            result = self._run_loops(group, layout, shards)
            group.training_finished = True  # every rank returned: `on_shutdown` may call them
            return result
        finally:
            # An attempt's split coordinators (and the executions they run) end with it.
            self.data_config.release(shards)
            self._backend_hook(backend.on_shutdown, group, raising=False)

    def _backend_hook(self, hook, group: WorkerGroup, raising: bool = True) -> None:
        """A custom Backend's hook: its failure fails the attempt, as a worker's would."""
        try:
            hook(group, self.backend_config)
        except WorkerFailure:
            if raising:
                raise
        except Exception as e:  # noqa: BLE001 - user code
            if raising:
                raise WorkerFailure(None, e) from None
            _log(f"Backend.{hook.__name__} failed: {e!r}")

    def _run_loops(self, group: WorkerGroup, layout: list, shards: list) -> Any:
        latest = self.manager.latest_checkpoint
        runs = []
        for rank, (worker, ranks) in enumerate(zip(group.workers, layout, strict=True)):
            context_args = {
                "storage_path": self.run_config.storage_path,
                "storage_options": self.run_config._storage_options,
                "name": self.run_config.name,
                "info": ranks,
            }
            runs.append(
                worker.run.remote(
                    self.train_fn,
                    self.train_config,
                    context_args,
                    group.sync,
                    latest,
                    shards[rank],
                    self.backend_config.train_func_context,
                )
            )
        return self._wait(group, runs)

    def _wait(self, group: WorkerGroup, runs: list) -> Any:
        pending = {r: i for i, r in enumerate(runs)}
        results: list = [None] * len(runs)
        events = group.sync.next_events.remote(30.0)
        try:
            while pending:
                ready, _ = oxray.wait([*pending, events], num_returns=1)
                for ref in ready:
                    if ref == events:
                        try:
                            got = oxray.get(ref)
                        except oxray.exceptions.RayError as e:  # the sync actor died (with its node)
                            raise WorkerFailure(None, e) from None
                        self._register(got, group)
                        events = group.sync.next_events.remote(30.0)
                        continue
                    rank = pending.pop(ref)
                    try:
                        results[rank] = oxray.get(ref)
                    except Exception as e:  # noqa: BLE001 - a rank's failure ends the attempt
                        raise WorkerFailure(rank, e) from None
        finally:
            # Also on Ctrl-C: reports already completed keep their checkpoints.
            self._drain(group, events)
        return results[0]

    def _drain(self, group: WorkerGroup, in_flight) -> None:
        """Registers every report completed so far, including any that the
        in-flight `next_events` call has already taken."""
        try:
            oxray.get(group.sync.close.remote(), timeout=10)
            for ref in (in_flight, group.sync.next_events.remote(0.0)):
                self._register(oxray.get(ref, timeout=10), group)
        except Exception as e:  # noqa: BLE001 - best effort: the sync actor may be gone with its node
            _log(f"could not collect the last reports: {e!r}")

    def _register(self, events: list, group: WorkerGroup) -> None:
        for per_rank, dir_name in events:
            self.manager.on_report(per_rank[0], dir_name)
            checkpoint = self.manager.latest_checkpoint if dir_name is not None else None
            kept = {r.dir_name for r in self.manager.results}
            self.reporter.report(per_rank[0], dir_name, checkpoint.path if checkpoint else None, kept)
            for callback in self.run_config.callbacks:
                callback.after_report(self.run_context, per_rank, checkpoint)
        # What `get_all_reported_checkpoints()` in the workers waits for (a fire-and-forget call).
        group.sync.registered_reports.remote(len(events), self._kept())

    def _kept(self) -> list:
        return [(r.dir_name, r.metrics) for r in self.manager.results]


def _user_error(err: BaseException) -> BaseException:
    """The exception the training function raised (as Ray's `worker_failures` holds it), not the
    task error that carried it back."""
    from oxray.exceptions import RayTaskError

    cause = getattr(err, "cause", None) if isinstance(err, RayTaskError) else None
    return cause if isinstance(cause, BaseException) else err


def _describe(failure: WorkerFailure) -> str:
    err = failure.error
    text = getattr(err, "traceback_str", None)
    if text:
        return text
    return "".join(traceback.format_exception(type(err), err, err.__traceback__)) if err.__traceback__ else repr(err)


def _last_line(text: str) -> str:
    """The exception line of a traceback."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else text
