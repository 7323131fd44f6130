"""The driver loop of an experiment. The engine's trial controller
(`_native.TuneController`) decides which trials start, what resources they
hold, whether a failed one is retried and what the scheduler says about a
result; this loop asks the search algorithm for configs, carries out the
controller's actions (trial actors, started and killed), waits on the
trials' results, and writes the experiment directory through callbacks."""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
import uuid

import oxray as ray
from oxray import _native, cloudpickle
from oxray.train._checkpoint import Checkpoint
from oxray.train._internal.storage import join, options_for
from oxray.tune._internal.files import append_private, make_private_dirs, write_atomically
from oxray.tune._internal.scheduler_view import SchedulerView
from oxray.tune._internal.trial import Trial
from oxray.tune._internal.trial_actor import TrialActor
from oxray.tune.schedulers import TrialScheduler, engine_spec
from oxray.tune.search.searcher import Searcher
from oxray.tune.search.variant_generator import flatten, format_vars
from oxray.tune.stopper import DictStopper

# Kept out of a trial's share of the cluster: what the engine accounts per node, not per trial.
_NOT_TRIAL_RESOURCES = ("memory", "object_store_memory")
STATE_PERIOD_S = 10.0
# A trial's end is written to the experiment state within this gap, or within 50 times the last write's
# duration when that is longer: an experiment of many quick trials writes a few times a second (the
# searcher's pickle grows with its trials), not once per trial, and spends at most ~2% on its state.
STATE_MIN_GAP_S = 0.25
STATE_WRITE_COST_SHARE = 50
# How long a stopped trial's actor gets to remove its Train runs' placement groups.
RELEASE_TIMEOUT_S = 10.0
MAX_LEN_IDENTIFIER = int(os.environ.get("TUNE_MAX_LEN_IDENTIFIER", "130"))


class TuneError(Exception):
    """Ray's `TuneError`: the experiment itself failed."""


def _capacity() -> dict:
    return {
        k: float(v)
        for k, v in ray.cluster_resources().items()
        if k not in _NOT_TRIAL_RESOURCES and not k.startswith("node:")
    }


class Runner:
    def __init__(
        self,
        *,
        trainable,
        trainable_name,
        search,
        scheduler,
        stopper,
        callbacks,
        storage,
        experiment_name,
        tune_config,
        run_config,
        resources,
        trial_env=None,
    ):
        self.trainable_bytes = cloudpickle.dumps(trainable)
        self.trainable_name = trainable_name
        self.search = search
        self.scheduler = scheduler
        self.stopper = stopper
        self.callbacks = callbacks
        self.storage = storage
        # The driver's own files: the experiment's directory, or the staging one of a remote experiment.
        self.experiment_path = storage.local_path
        self.experiment_name = experiment_name
        self.tune_config = tune_config
        self.run_config = run_config
        # config -> (resources, learns_demand, placement) of a trial.
        self.resources_of = resources
        self.metric = tune_config.metric
        self.mode = tune_config.mode
        self.time_attr = getattr(scheduler, "time_attr", "training_iteration")
        spec = engine_spec(scheduler)
        # A TrialScheduler of the user's own decides through its hooks, here in the driver.
        self.driver_scheduler = scheduler if spec == ("driver",) else None
        self.scheduler_view = SchedulerView(self)
        self.needs_metric = spec[0] not in ("fifo", "driver")
        self.trials: list = []
        self.search_done = False
        self.iteration = 0
        self.experiment_hex = uuid.uuid4().hex[:5]
        # The head's key for it (the dashboard's Tune pages); a restore keeps it.
        self.experiment_id = uuid.uuid4().hex
        self.dashboard = None
        self.verbose = 1 if run_config.verbose is None else run_config.verbose
        self.state_file = os.path.join(
            self.experiment_path, f"experiment_state-{datetime.datetime.now().strftime('%Y-%m-%d_%H-%M-%S')}.json"
        )
        failures = run_config.failure_config.max_failures
        max_concurrent = tune_config.max_concurrent_trials or None
        self.capacity = _capacity()
        self.controller = _native.TuneController(
            self.capacity, max_concurrent, None if failures == -1 else failures, spec
        )
        from oxray.tune._internal.output import make_reporter

        self.reporter = make_reporter(self)
        # RunConfig(log_to_file=) as file names, the same for every trial.
        self.log_files = run_config.log_files()
        self.actor_class = ray.remote(TrialActor)
        # The env_vars that fork trial actors from a template that imported Tune (or torch) already.
        self.trial_env = trial_env
        # (what it holds, actor) of actors whose trial ended, for the next trial (TuneConfig.reuse_actors).
        self.reuse_actors = tune_config.reuse_actors is not False
        self.idle_actors: list = []
        self.raise_error = None
        self.last_state_write = 0.0
        self.state_write_gap = STATE_MIN_GAP_S
        self.state_dirty = False
        self.paused_without_checkpoint = False

    def restore(self, state: dict, remaining, space: dict, resume: dict) -> None:
        """Takes over an experiment a killed (or finished) driver left: finished trials stay as they
        are; unfinished ones resume from their latest checkpoint (`resume["unfinished"]`, else they
        end TERMINATED); errored ones stay, resume (`resume_errored`) or start over (`restart_errored`)."""
        self.experiment_hex = state["runner_data"]["experiment_hex"]
        self.experiment_id = state["runner_data"].get("experiment_id", self.experiment_id)
        for trial_json, _ in state["trial_data"]:
            trial = Trial.from_state(json.loads(trial_json), self.storage)
            trial.resources, trial.learns_demand, trial.placement = self.resources_of(trial.config)
            status = trial.status
            if status in ("RUNNING", "PENDING", "PAUSED"):
                status = "PENDING" if resume["unfinished"] else "TERMINATED"
            elif status == "ERROR" and resume["restart_errored"]:
                trial.results, trial.last_result, trial.checkpoints = [], {}, []
                status = "PENDING"
            elif status == "ERROR" and resume["resume_errored"]:
                status = "PENDING"
            elif status == "ERROR":
                trial.error = _load_error(trial)
            trial.status = status
            index = self.controller.add_restored_trial(
                trial.resources,
                trial.learns_demand,
                status,
                bool(trial.checkpoints),
                0 if status == "PENDING" else trial.num_failures,
            )
            assert index == trial.index, (index, trial.index)
            self.trials.append(trial)
            if self.driver_scheduler is not None and status == "PENDING":
                self.driver_scheduler.on_trial_add(self.scheduler_view, trial)
        if isinstance(remaining, tuple) and remaining[0] == "searcher":
            # The searcher as it was: it knows what it suggested and what it was told.
            self.search = remaining[1]
            self.search_done = state["runner_data"]["search_done"]
        elif remaining is not None and hasattr(self.search, "restore_remaining"):
            self.search.restore_remaining(space, remaining)
            self.search_done = not remaining
        else:
            self.search_done = state["runner_data"]["search_done"]

    # The search algorithm.

    def _next_config(self, trial_id):
        if hasattr(self.search, "next_variant"):
            return self.search.next_variant(trial_id)
        config = self.search.suggest(trial_id)
        if config is None or config == Searcher.FINISHED:
            return config
        return config, flatten_paths(config)

    def _add_trials(self) -> None:
        """Asks the search algorithm for trials, up to a few more than can run now, so that the next
        ones are ready when resources free up."""
        limit = max(2, int(self.controller.in_use().get("CPU", 0)) + 2)
        while not self.search_done and self.controller.count("PENDING") < limit:
            if not self._add_trial():
                return

    def _add_trial(self) -> bool:
        """One trial from the search algorithm; False when it has none now (or ever)."""
        index = len(self.trials)
        trial_id = f"{self.experiment_hex}_{index:05d}"
        suggested = self._next_config(trial_id)
        if suggested is None:
            return False
        if suggested == Searcher.FINISHED:
            self.search_done = True
            return False
        config, resolved = suggested
        tag = f"{index}_{format_vars(resolved)}" if resolved else str(index)
        resources, learns_demand, placement = self.resources_of(config)
        trial = Trial(index, trial_id, self.trainable_name, config, resolved, tag, resources)
        trial.learns_demand, trial.placement = learns_demand, placement
        if self.tune_config.trial_name_creator:
            trial.custom_trial_name = str(self.tune_config.trial_name_creator(trial))
        dir_name = self._dir_name(trial)
        trial.local_path = os.path.join(self.experiment_path, dir_name)
        trial.fs_path = self.storage.trial_path(dir_name)
        added = self.controller.add_trial(resources, learns_demand)
        assert added == index, (added, index)
        self.trials.append(trial)
        if self.driver_scheduler is not None:
            self.driver_scheduler.on_trial_add(self.scheduler_view, trial)
        return True

    def _dir_name(self, trial: Trial) -> str:
        if self.tune_config.trial_dirname_creator:
            name = str(self.tune_config.trial_dirname_creator(trial))
            if os.sep in name or name in ("", ".", ".."):
                raise ValueError(
                    f"trial_dirname_creator returned {name!r}; expected a directory name without {os.sep!r}"
                )
            return name
        name = f"{trial.trainable_name}_{trial.trial_id}_{trial.experiment_tag}"[:MAX_LEN_IDENTIFIER]
        for bad in '/()\\:*?"<>|':
            name = name.replace(bad, "")
        return f"{name}_{datetime.datetime.now().strftime('%Y-%m-%d_%H-%M-%S')}"

    # Trials.

    def _start(self, trial: Trial, restore: bool) -> None:
        make_private_dirs(trial.local_path)
        trial.status = "RUNNING"
        if trial.learns_demand:
            # Tune's default CPU is counted by the controller only, so that a Train run the trial
            # starts can use it for its workers.
            options = {"num_cpus": 0, "max_concurrency": 2}
        else:
            # A trial of several bundles runs in the first; the tasks and actors it starts fill the rest.
            held = trial.placement[0][0] if trial.placement else trial.resources
            options = {"num_cpus": held.get("CPU", 0.0), "num_gpus": held.get("GPU", 0.0), "max_concurrency": 2}
            custom = {k: v for k, v in held.items() if k not in ("CPU", "GPU")}
            if custom:
                options["resources"] = custom
        if self.trial_env:
            options["runtime_env"] = {"env_vars": self.trial_env}
        trial.actor = self._actor_for(trial, options)
        info = {
            "trial_id": trial.trial_id,
            "trial_name": trial.trial_name,
            "trial_dir": trial.local_path,
            "experiment_name": self.experiment_name,
            "experiment_id": self.experiment_id,
            "resources": trial.resources,
            # Where its checkpoints go from its own node (a remote experiment's), else None.
            "trial_uri": trial.fs_path if self.storage.remote else None,
            # The S3 options of the experiment's `?query` (the trial's process has none registered).
            "storage_options": options_for(trial.fs_path) if self.storage.remote else "",
            # RunConfig(log_to_file=): the trial's stdout and stderr file names in its directory.
            "log_files": self.log_files,
        }
        checkpoint = trial.checkpoint.path if (restore and trial.checkpoint) else None
        payload = {
            "trainable": self.trainable_bytes,
            "config": trial.config,
            "info": info,
            "iteration": trial.iteration if restore else 0,
            "time_total": trial.time_total if restore else 0.0,
            "checkpoint_index": trial.checkpoint_index,
            "checkpoint": checkpoint,
            "reuse": self.reuse_actors,
        }
        trial.future = trial.actor.start.remote(payload)
        trial.run_started = time.time()
        hook = "on_trial_restore" if restore else "on_trial_start"
        self._callbacks(hook, trial=trial)
        if self.verbose >= 1 and not restore:
            print(f"Trial {trial.trial_name} started with configuration: {_short(trial.config)}", flush=True)

    def _actor_for(self, trial: Trial, options: dict):
        """An idle actor holding the same, else a new one (in a placement group of the trial's own
        when it asks for several bundles)."""
        if trial.placement:
            from oxray.util.placement_group import placement_group
            from oxray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            bundles, strategy = trial.placement
            # An empty first bundle (Ray's "head bundle is empty"): the group is the other bundles,
            # and the actor, holding nothing, may sit in any of them.
            head_empty = not bundles[0]
            trial.group = placement_group(bundles[1:] if head_empty else bundles, strategy=strategy)
            strategy = PlacementGroupSchedulingStrategy(
                trial.group,
                placement_group_bundle_index=-1 if head_empty else 0,
                placement_group_capture_child_tasks=True,
            )
            return self.actor_class.options(**options, scheduling_strategy=strategy).remote()
        key = repr(sorted(options.items()))
        trial.actor_key = key
        for index, (held, actor) in enumerate(self.idle_actors):
            if held == key:
                del self.idle_actors[index]
                return actor
        # Idle actors hold resources the controller counts as free: none fits, so they go.
        self._retire_idle_actors()
        return self.actor_class.options(**options).remote()

    def _resume(self, trial: Trial) -> None:
        """Lets the trial go on past what it waits on (a result taken, a Train run's demand granted)."""
        trial.future = trial.actor.next_result.remote()

    def _kill(self, trial: Trial, reuse: bool = False) -> None:
        """Stops the trial's run. With `reuse` (a stop or pause after a result, under reuse_actors),
        an actor whose trial code has ended takes the next trial instead of a new process."""
        reuse = reuse and self.reuse_actors and trial.future is None and trial.group is None
        if trial.actor is not None:
            ended = False
            try:
                ended = ray.get(trial.actor.release.remote(reuse), timeout=RELEASE_TIMEOUT_S)
            except Exception:  # the actor is gone already, and its groups with the job's end
                pass
            if reuse and ended:
                self.idle_actors.append((trial.actor_key, trial.actor))
            else:
                try:
                    ray.kill(trial.actor)
                except Exception:  # already gone
                    pass
        if trial.group is not None:
            from oxray.util.placement_group import remove_placement_group

            try:
                remove_placement_group(trial.group)
            except Exception:  # already removed
                pass
            trial.group = None
        trial.actor = None
        trial.future = None

    def _on_result(self, trial: Trial, result: dict) -> None:
        self._check_metric(result)
        flat = flatten(result)
        self.dashboard.result(trial, result, flat)
        trial.results.append(result)
        trial.last_result = result
        if result.get("checkpoint_dir_name"):
            self._keep_checkpoint(trial, result)
        decision, source = self._engine_decision(trial, result)
        stop = decision == "stop" or bool(result.get("done"))
        if isinstance(self.stopper, DictStopper):
            for key in self.stopper.missing(flat):
                print(
                    f"WARNING: the stop criterion {key!r} is not in trial {trial.trial_name}'s results "
                    f"(it reports {sorted(flat)})",
                    file=sys.stderr,
                )
        stop = self.stopper(trial.trial_id, flat) or stop
        if self.driver_scheduler is not None and not stop:
            stop, decision = self._driver_verdict(trial, flat, decision)
        stop_all = self.stopper.stop_all()
        # Unless the scheduler's hook paused or stopped it itself.
        carry_out = trial.status == "RUNNING"
        if carry_out and not (stop or stop_all or decision in ("exploit", "pause")):
            # It goes on at once: the searcher, loggers and callbacks see the result while it runs.
            self._carry_out(trial, result, decision, source, stop)
            carry_out = False
        self.search.on_trial_result(trial.trial_id, result)
        self._callbacks("on_trial_result", trial=trial, result=result)
        if carry_out:
            self._carry_out(trial, result, decision, source, stop)
        if stop_all:
            self._stop_all()

    def _engine_decision(self, trial: Trial, result: dict) -> tuple:
        reward = None
        if self.needs_metric:
            value = result[self.metric]
            reward = float(value) if self.mode == "max" else -float(value)
        time_value = result.get(self.time_attr)
        if time_value is None:
            raise ValueError(
                f"the scheduler's time_attr {self.time_attr!r} is not in trial {trial.trial_name}'s result; "
                f"it reports {sorted(result)}"
            )
        return self.controller.on_result(trial.index, float(time_value), reward)

    def _carry_out(self, trial: Trial, result: dict, decision: str, source, stop: bool) -> None:
        """What the result decided for the trial: stop, pause, exploit another's checkpoint, or go on."""
        if decision == "no_checkpoint" and not stop:
            print(
                f"[pbt]: no checkpoint for trial {self.trials[source]}. Skip exploit for Trial {trial}",
                file=sys.stderr,
                flush=True,
            )
        if decision == "exploit" and not stop:
            self._exploit(trial, self.trials[source])
        elif stop:
            result["done"] = True
            self._finish(trial)
        elif decision == "pause":
            self._pause(trial)
        else:
            self._resume(trial)

    def _exploit(self, trial: Trial, source: Trial) -> None:
        """PBT: `trial` restarts from `source`'s latest checkpoint (copied into its own directory as its
        next checkpoint) with `source`'s config explored; both are written to pbt_global.txt and
        pbt_policy_<trial_id>.txt as Ray writes them."""
        clone = source.checkpoint
        name = f"checkpoint_{trial.checkpoint_index:06d}"
        target = join(trial.fs_path, name)
        self.storage.copy_checkpoint(clone.path, target)
        trial.checkpoint_index += 1
        trial.checkpoints.append((Checkpoint(target), dict(source.checkpoints[-1][1])))
        old_config = trial.config
        new_config = self.scheduler._explore(source.config)
        entry = [
            trial.experiment_tag,
            source.experiment_tag,
            trial.iteration,
            source.iteration,
            old_config,
            new_config,
        ]
        line = (json.dumps(entry, default=repr) + "\n").encode()
        for file_name in ("pbt_global.txt", f"pbt_policy_{trial.trial_id}.txt"):
            append_private(os.path.join(self.experiment_path, file_name), line)
        if self.verbose >= 1:
            print(
                f"[PopulationBasedTraining] [Exploit] Cloning trial {source.trial_id} (score = "
                f"{source.last_result.get(self.metric)}) into trial {trial.trial_id} (score = "
                f"{trial.last_result.get(self.metric)})\n[PopulationBasedTraining] [Explore] Perturbed the "
                f"hyperparameter config of trial {trial.trial_id}: {old_config} -> {new_config}",
                flush=True,
            )
        trial.config = new_config
        self._kill(trial, reuse=True)
        self.controller.on_exploit(trial.index)
        trial.status = "PENDING"

    def _check_metric(self, result: dict) -> None:
        if (
            self.needs_metric
            and self.metric not in result
            and not os.environ.get("TUNE_DISABLE_STRICT_METRIC_CHECKING")
        ):
            reported = sorted(k for k in result if k != "config")
            raise ValueError(
                f"Trial returned a result which did not include the specified metric {self.metric!r} that "
                f"the scheduler needs (TuneConfig(metric=...)). The trial reports {reported}. Make sure your "
                "calls to tune.report() include the metric, or set TUNE_DISABLE_STRICT_METRIC_CHECKING=1"
            )

    def _keep_checkpoint(self, trial: Trial, result: dict) -> None:
        checkpoint = Checkpoint(join(trial.fs_path, result["checkpoint_dir_name"]))
        trial.checkpoint_index += 1
        metrics = {k: v for k, v in result.items() if k != "config"}
        trial.checkpoints.append((checkpoint, metrics))
        self.controller.on_checkpoint(trial.index)
        self._callbacks("on_checkpoint", trial=trial, checkpoint=checkpoint)
        config = self.run_config.checkpoint_config
        if config.num_to_keep is not None and len(trial.checkpoints) > config.num_to_keep:
            # The latest is always kept (a retry restores from it); the rest by score, else by age.
            older = trial.checkpoints[:-1]
            attribute = config.checkpoint_score_attribute
            if attribute:
                sign = 1 if config.checkpoint_score_order == "max" else -1
                older.sort(key=lambda cm: sign * float(cm[1].get(attribute, float("-inf") * sign)))
            drop = older[0]
            trial.checkpoints.remove(drop)
            self.storage.delete_checkpoint(drop[0].path)

    def _retire_idle_actors(self) -> None:
        """The idle actors' kept class trainables get their `cleanup()`, then the actors go (the
        experiment is over, or a trial holding something else needs their resources)."""
        if self.idle_actors:
            try:
                ray.get([actor.shutdown.remote() for _, actor in self.idle_actors], timeout=RELEASE_TIMEOUT_S)
            except Exception as e:  # noqa: BLE001 - a cleanup that failed is reported, the actors go anyway
                print(f"WARNING: a class trainable's cleanup() failed: {e}", file=sys.stderr, flush=True)
        for _, actor in self.idle_actors:
            ray.kill(actor)
        self.idle_actors = []

    def _pause(self, trial: Trial) -> None:
        """The scheduler paused the trial (the controller holds it PAUSED): its run stops, and it
        restarts from its latest checkpoint when the scheduler lets it go on."""
        self._kill(trial, reuse=True)
        trial.status = "PAUSED"
        if trial.checkpoint is None and not self.paused_without_checkpoint:
            self.paused_without_checkpoint = True
            print(
                f"WARNING: trial {trial.trial_name} is paused by the scheduler without a checkpoint: when it goes "
                "on it starts over. Report checkpoints (tune.report(..., checkpoint=...)) to resume where it paused.",
                file=sys.stderr,
                flush=True,
            )

    def _apply_changes(self) -> None:
        """Ends the paused trials the scheduler stopped (HyperBand's halving)."""
        for index, _ in self.controller.take_changes():
            self._completed(self.trials[index])

    def _finish(self, trial: Trial, returned: bool = False) -> None:
        if returned and self.reuse_actors and trial.group is None:
            # Its trainable returned: the actor is idle, for the next trial that holds the same.
            self.idle_actors.append((trial.actor_key, trial.actor))
            trial.actor, trial.future = None, None
        else:
            self._kill(trial, reuse=True)
        self.controller.on_ended(trial.index)
        if returned and self.driver_scheduler is None:
            # The next trial starts (on this idle actor, say) before the searcher, loggers and callbacks
            # hear of this one's end: what they do then overlaps its run. (A custom scheduler hears of
            # the end first: its choice may depend on it.)
            self._schedule()
        self._completed(trial)

    def _completed(self, trial: Trial) -> None:
        trial.status = "TERMINATED"
        trial.last_result["done"] = True
        if self.driver_scheduler is not None:
            self.driver_scheduler.on_trial_complete(self.scheduler_view, trial, flatten(trial.last_result))
        self.search.on_trial_complete(trial.trial_id, result=trial.last_result, error=False)
        self._callbacks("on_trial_complete", trial=trial)
        self._state_changed()
        if self.verbose >= 1:
            print(
                f"Trial {trial.trial_name} completed after {trial.iteration} iterations at "
                f"{datetime.datetime.now().strftime('%Y-%m-%d %H:%M:%S')}. Total running time: "
                f"{trial.time_total:.1f}s",
                flush=True,
            )

    def _on_error(self, trial: Trial, text: str, error: BaseException) -> None:
        self._kill(trial)
        trial.num_failures += 1
        trial.error_file = os.path.join(trial.local_path, "error.txt")
        stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        with open(trial.error_file, "a") as f:
            f.write(f"Failure # {trial.num_failures} (occurred at {stamp})\n{text}\n")
        try:
            write_atomically(os.path.join(trial.local_path, "error.pkl"), cloudpickle.dumps(error))
        except Exception:
            pass
        status = self.controller.on_failed(trial.index)
        trial.status = status
        if status == "PENDING":
            self._callbacks("on_trial_recover", trial=trial)
            return
        trial.error = error
        self._state_changed()
        if self.driver_scheduler is not None:
            self.driver_scheduler.on_trial_error(self.scheduler_view, trial)
        self.search.on_trial_complete(trial.trial_id, result=trial.last_result or None, error=True)
        self._callbacks("on_trial_error", trial=trial)
        if self.verbose >= 1:
            print(
                f"Trial {trial.trial_name} errored after {trial.iteration} iterations at {stamp}. "
                f"Error file: {trial.error_file}",
                file=sys.stderr,
                flush=True,
            )
        fail_fast = self.run_config.failure_config.fail_fast
        if fail_fast:
            self._stop_all()
            if fail_fast == "raise":
                self.raise_error = error

    # A TrialScheduler of the user's own.

    def _start_chosen(self) -> None:
        """Starts what the scheduler's `choose_trial_to_run` returns, while it returns a trial that fits."""
        while True:
            chosen = self.driver_scheduler.choose_trial_to_run(self.scheduler_view)
            if chosen is None:
                return
            if not isinstance(chosen, Trial) or chosen not in self.trials:
                raise ValueError(
                    f"{type(self.driver_scheduler).__name__}.choose_trial_to_run returned {chosen!r}; expected "
                    "one of the experiment's trials (tune_controller.get_trials()) or None"
                )
            try:
                action = self.controller.start_chosen(chosen.index)
            except ValueError as e:
                name = type(self.driver_scheduler).__name__
                raise ValueError(f"{name}.choose_trial_to_run chose {chosen}: {e}") from None
            if action is None:
                return
            _, index, restore = action
            self._start(self.trials[index], restore)

    def _driver_verdict(self, trial: Trial, flat: dict, decision: str) -> tuple:
        """(stop, decision) after the scheduler's `on_trial_result`; a PAUSE pauses it in the engine."""
        verdict = self.driver_scheduler.on_trial_result(self.scheduler_view, trial, flat)
        if verdict not in (TrialScheduler.CONTINUE, TrialScheduler.PAUSE, TrialScheduler.STOP, TrialScheduler.NOOP):
            raise ValueError(
                f"{type(self.driver_scheduler).__name__}.on_trial_result returned {verdict!r}; expected "
                "TrialScheduler.CONTINUE, PAUSE, STOP or NOOP"
            )
        if trial.status != "RUNNING":  # the hook paused or stopped it itself
            return False, decision
        if verdict == TrialScheduler.PAUSE:
            self.controller.pause(trial.index)
            return False, "pause"
        return verdict == TrialScheduler.STOP, decision

    def pause_for_scheduler(self, trial: Trial) -> None:
        if trial.status != "RUNNING":
            raise ValueError(f"pause_trial({trial}): the trial is {trial.status}; only a RUNNING trial pauses")
        self.controller.pause(trial.index)
        self._pause(trial)

    def stop_for_scheduler(self, trial: Trial) -> None:
        if trial.status in ("TERMINATED", "ERROR"):
            return
        if trial.status == "RUNNING":
            trial.last_result["done"] = True
            self._finish(trial)
            return
        self.controller.on_ended(trial.index)
        trial.status = "TERMINATED"
        self.driver_scheduler.on_trial_remove(self.scheduler_view, trial)
        self.search.on_trial_complete(trial.trial_id, result=trial.last_result or None, error=False)
        self._callbacks("on_trial_complete", trial=trial)
        self._state_changed()

    def _stop_all(self) -> None:
        waiting = [t for t in self.trials if t.status in ("PENDING", "PAUSED")]
        for index in self.controller.stop_all():
            trial = self.trials[index]
            self._kill(trial)
            trial.last_result["done"] = True
            if self.driver_scheduler is not None:
                self.driver_scheduler.on_trial_complete(self.scheduler_view, trial, flatten(trial.last_result))
            self._callbacks("on_trial_complete", trial=trial)
        for trial in self.trials:
            trial.status = self.controller.status(trial.index)
        if self.driver_scheduler is not None:
            for trial in waiting:
                self.driver_scheduler.on_trial_remove(self.scheduler_view, trial)
        self.search_done = True

    # The loop.

    def run(self) -> list:
        from oxray.tune._internal.dashboard_report import ExperimentReport

        make_private_dirs(self.experiment_path)
        self.dashboard = ExperimentReport(self, self.experiment_id)
        self.dashboard.send()
        deadline = None
        if self.tune_config.time_budget_s:
            deadline = time.monotonic() + float(self.tune_config.time_budget_s)
        if self.reporter is not None:
            self.reporter.header(getattr(self.search, "total", None))
        try:
            self._loop(deadline)
        except BaseException as e:
            self._stop_all()
            self._write_state()
            self.dashboard.ended("ERRORED" if isinstance(e, Exception) else "ABORTED", f"{type(e).__name__}: {e}")
            raise
        finally:
            self._retire_idle_actors()
        self._callbacks_end()
        self._write_state()
        if self.raise_error is None:
            self.dashboard.ended("FINISHED")
        else:
            self.dashboard.ended("ERRORED", f"{type(self.raise_error).__name__}: {self.raise_error}")
        if self.reporter is not None:
            self.reporter.status()
        if self.verbose >= 1:
            where = self.storage.experiment_path
            print(f"\nWrote the latest version of all result files and experiment state to '{where}'", flush=True)
        if self.raise_error is not None:
            raise self.raise_error
        return self.trials

    def _loop(self, deadline) -> None:
        while True:
            self._callbacks("on_step_begin")
            # What waits starts before the searcher is asked for more: the trials run meanwhile.
            self._schedule()
            self._add_trials()
            self._schedule()
            running = {t.future: t for t in self.trials if t.future is not None}
            if not running:
                if self.search_done and self.controller.all_finished():
                    return
                waiting = self.controller.count("PENDING") + self.controller.count("PAUSED")
                if self.driver_scheduler is not None and waiting:
                    raise TuneError(
                        f"{type(self.driver_scheduler).__name__}.choose_trial_to_run returned None while no trial "
                        f"runs and {waiting} wait (PENDING or PAUSED); the experiment would wait for ever"
                    )
                if self.controller.count("PENDING") == 0:
                    raise TuneError(
                        "the search algorithm suggests no trial while none runs; it would wait for ever "
                        "(a ConcurrencyLimiter or searcher returning None with nothing live)"
                    )
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            for due in (self.dashboard.due_in(), self._state_due_in()):
                if due is not None:
                    timeout = due if timeout is None else min(timeout, due)
            ready, _ = ray.wait(list(running), num_returns=1, timeout=timeout)
            for future in ready:
                self._handle(running[future], future)
                self._apply_changes()
            self.iteration += 1
            self._callbacks("on_step_end")
            if self.reporter is not None:
                self.reporter.maybe_status()
            self.dashboard.maybe_send()
            if deadline is not None and time.monotonic() >= deadline:
                if self.verbose >= 1:
                    print("Reached the time budget (time_budget_s): stopping every trial", flush=True)
                self._stop_all()
            self._maybe_write_state()

    def _schedule(self) -> None:
        """Starts or resumes the trials the controller (or a custom scheduler) lets run now."""
        for action, index, restore in self.controller.schedule():
            if action == "start":
                self._start(self.trials[index], restore)
            else:
                self._resume(self.trials[index])
        if self.driver_scheduler is not None:
            self._start_chosen()

    def _handle(self, trial: Trial, future) -> None:
        """One event of a trial's actor: a result, a Train run's demand, its end or its error."""
        # Taken: the trial waits on nothing until `_resume` asks for its next event.
        trial.future = None
        try:
            kind, value = ray.get(future)
        except Exception as e:  # the actor died under the trial
            self._on_error(trial, f"{type(e).__name__}: {e}", e)
            return
        if kind == "result":
            self._on_result(trial, value)
        elif kind == "train_demand":
            # The trial's Train run waits (its `next_result` not asked again) until it may go.
            demand = {k: float(v) for k, v in value.items()}
            for index in self.controller.on_train_demand(trial.index, demand):
                self._resume(self.trials[index])
        elif kind == "done":
            self._finish(trial, returned=True)
        else:
            text, pickled = value
            try:
                error = cloudpickle.loads(pickled)
            except Exception:
                error = RuntimeError(text)
            self._on_error(trial, text, error)

    def _callbacks(self, hook: str, **kwargs) -> None:
        for callback in self.callbacks:
            getattr(callback, hook)(iteration=self.iteration, trials=self.trials, **kwargs)

    def _callbacks_end(self) -> None:
        for callback in self.callbacks:
            callback.on_experiment_end(trials=self.trials)

    def _state_changed(self) -> None:
        """A trial ended: a restore after a kill must find it ended, not run it again. Written now when
        the last write is `state_write_gap` old, else when the loop next wakes (its wait ends then)."""
        self.state_dirty = True
        self._maybe_write_state()

    def _state_due_in(self):
        if not self.state_dirty:
            return None
        return max(0.0, self.last_state_write + self.state_write_gap - time.monotonic())

    def _maybe_write_state(self) -> None:
        if time.monotonic() - self.last_state_write >= (self.state_write_gap if self.state_dirty else STATE_PERIOD_S):
            self._write_state()

    def _write_state(self) -> None:
        started = time.monotonic()
        state = {
            "trial_data": [[t.state_json(), json.dumps({"num_failures": t.num_failures})] for t in self.trials],
            "runner_data": {
                "experiment_hex": self.experiment_hex,
                "experiment_id": self.experiment_id,
                "experiment_name": self.experiment_name,
                "search_done": self.search_done,
                "iteration": self.iteration,
            },
            "stats": {"start_time": time.time()},
        }
        if hasattr(self.search, "remaining"):
            # Ray's name; cloudpickle bytes despite the suffix, as Ray's are.
            variants = self.state_file.replace("experiment_state-", "basic-variant-state-")
            write_atomically(variants, cloudpickle.dumps(self.search.remaining()))
        else:
            # A Searcher (Optuna's study and all) as Ray keeps it, for a restore to go on from.
            searcher = self.state_file.replace("experiment_state-", "searcher-state-").replace(".json", ".pkl")
            write_atomically(searcher, cloudpickle.dumps(self.search))
        write_atomically(self.state_file, json.dumps(state).encode())
        self.storage.sync_up()
        self.last_state_write = time.monotonic()
        self.state_dirty = False
        took = self.last_state_write - started
        self.state_write_gap = min(STATE_PERIOD_S, max(STATE_MIN_GAP_S, STATE_WRITE_COST_SHARE * took))


def _load_error(trial: Trial):
    try:
        with open(os.path.join(trial.local_path, "error.pkl"), "rb") as f:
            return cloudpickle.load(f)
    except Exception:
        return TuneError(f"trial {trial.trial_name} errored (see {trial.error_file})")


def latest_state(experiment_path: str):
    """The newest experiment state and the variants not started then, of the experiment at `experiment_path`."""
    names = sorted(n for n in os.listdir(experiment_path) if n.startswith("experiment_state-") and n.endswith(".json"))
    if not names:
        raise ValueError(f"{experiment_path} has tuner.pkl but no experiment_state-*.json: nothing to restore")
    with open(os.path.join(experiment_path, names[-1])) as f:
        state = json.load(f)
    variants = os.path.join(experiment_path, names[-1].replace("experiment_state-", "basic-variant-state-"))
    searcher = os.path.join(
        experiment_path, names[-1].replace("experiment_state-", "searcher-state-").replace(".json", ".pkl")
    )
    remaining = None
    if os.path.exists(variants):
        with open(variants, "rb") as f:
            remaining = cloudpickle.load(f)
    elif os.path.exists(searcher):
        with open(searcher, "rb") as f:
            remaining = ("searcher", cloudpickle.load(f))
    return state, remaining


def flatten_paths(config: dict) -> dict:
    return {tuple(k.split("/")): v for k, v in flatten(config).items()}


def _short(config: dict) -> str:
    text = json.dumps(config, default=repr)
    return text if len(text) < 300 else text[:297] + "..."
