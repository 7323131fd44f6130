"""Schedulers of the user's own, as Ray's docs write them: a `TrialScheduler`
subclass implementing Ray's hooks, or a `FIFOScheduler` subclass overriding
some. Its hooks run in the driver with a view of the experiment
(`get_trials`, `has_resources_for_trial`, `pause_trial`, `stop_trial`); it
decides which trial starts next and what each result means, and the engine
starts only what it chooses. A subclass of an engine-run scheduler that
overrides a hook is refused by name, before any trial starts."""

import json
import os
import tempfile

import pytest

from oxray import tune
from oxray.tune.experiment import Trial
from oxray.tune.schedulers import ASHAScheduler, FIFOScheduler, TrialScheduler

pytestmark = [pytest.mark.usefixtures("cluster"), pytest.mark.timeout(180)]


def stepping(config):
    """Reports `score = q * step` for `steps` steps with a checkpoint each, resuming from the latest,
    and appends `q` to the run log when it starts (the order trials really ran in)."""
    with open(config["log"], "a") as f:
        f.write(f"{config['q']}\n")
    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            start = int(open(os.path.join(d, "step")).read())
    for step in range(start + 1, config["steps"] + 1):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "step"), "w") as f:
                f.write(str(step))
            tune.report(
                {"score": config["q"] * step, "resumed_from": start}, checkpoint=tune.Checkpoint.from_directory(d)
            )


class NewestFirstWithCutoff(TrialScheduler):
    """Runs the newest trial first; stops a trial whose score is below `cutoff` at its second
    result; records every hook it was called with."""

    def __init__(self, cutoff):
        super().__init__()
        self.cutoff = cutoff
        self.calls = []

    def on_trial_add(self, tune_controller, trial):
        self.calls.append(("add", trial.config["q"]))

    def on_trial_error(self, tune_controller, trial):
        self.calls.append(("error", trial.config["q"]))

    def on_trial_result(self, tune_controller, trial, result):
        if result["training_iteration"] == 2 and result["score"] < self.cutoff:
            return TrialScheduler.STOP
        return TrialScheduler.CONTINUE

    def on_trial_complete(self, tune_controller, trial, result):
        self.calls.append(("complete", trial.config["q"], result["training_iteration"]))

    def on_trial_remove(self, tune_controller, trial):
        self.calls.append(("remove", trial.config["q"]))

    def choose_trial_to_run(self, tune_controller):
        for trial in reversed(tune_controller.get_trials()):
            if trial.status == Trial.PENDING and tune_controller.has_resources_for_trial(trial):
                return trial
        return None

    def debug_string(self):
        return "newest first"


def run_order(log):
    return [int(line) for line in open(log).read().split()]


def test_a_trial_scheduler_subclass_chooses_the_order_and_stops_trials(tmp_path):
    log = str(tmp_path / "ran")
    scheduler = NewestFirstWithCutoff(cutoff=5)
    results = tune.Tuner(
        stepping,
        param_space={"q": tune.grid_search([1, 2, 3, 4]), "steps": 4, "log": log},
        tune_config=tune.TuneConfig(scheduler=scheduler, max_concurrent_trials=1),
        run_config=tune.RunConfig(storage_path=str(tmp_path), name="custom", verbose=0),
    ).fit()
    assert results.num_errors == 0
    # Trials are added as the search suggests them (two ahead of what runs), and the newest waiting
    # one runs first: q=2 before q=1, then q=4 before q=3.
    assert run_order(log) == [2, 4, 3, 1]
    # Score at iteration 2 is 2q: below 5 for q=1 and q=2, which stop there.
    iterations = {r.config["q"]: r.metrics["training_iteration"] for r in results}
    assert iterations == {1: 2, 2: 2, 3: 4, 4: 4}
    assert sorted(c for c in scheduler.calls if c[0] == "add") == [("add", q) for q in (1, 2, 3, 4)]
    assert sorted(c for c in scheduler.calls if c[0] == "complete") == [
        ("complete", 1, 2),
        ("complete", 2, 2),
        ("complete", 3, 4),
        ("complete", 4, 4),
    ]
    assert not [c for c in scheduler.calls if c[0] in ("error", "remove")]


class PauseOnce(FIFOScheduler):
    """Pauses each trial once, at its second result, when another trial waits; paused trials come
    back (FIFOScheduler's choice: PENDING first, then PAUSED) from their checkpoints."""

    def __init__(self):
        super().__init__()
        self.paused = set()

    def on_trial_result(self, tune_controller, trial, result):
        waiting = [t for t in tune_controller.get_trials() if t is not trial and t.status in (Trial.PENDING,)]
        if result["training_iteration"] == 2 and trial.trial_id not in self.paused and waiting:
            self.paused.add(trial.trial_id)
            return TrialScheduler.PAUSE
        return TrialScheduler.CONTINUE


def test_a_fifo_subclass_pauses_and_paused_trials_resume_from_their_checkpoints(tmp_path):
    log = str(tmp_path / "ran")
    results = tune.Tuner(
        stepping,
        param_space={"q": tune.grid_search([1, 2]), "steps": 4, "log": log},
        tune_config=tune.TuneConfig(scheduler=PauseOnce(), max_concurrent_trials=1),
        run_config=tune.RunConfig(storage_path=str(tmp_path), name="paused", verbose=0),
    ).fit()
    assert results.num_errors == 0
    # q=1 pauses at 2 while q=2 waits; q=2 runs (nobody waits any more at its second result) to its
    # end, then q=1 resumes from its checkpoint at step 2.
    assert run_order(log) == [1, 2, 1]
    for result in results:
        with open(os.path.join(result.path, "result.json")) as f:
            lines = [json.loads(line) for line in f]
        assert [r["training_iteration"] for r in lines] == [1, 2, 3, 4]
        expected = [0, 0, 2, 2] if result.config["q"] == 1 else [0, 0, 0, 0]
        assert [r["resumed_from"] for r in lines] == expected


class StopsTheOthers(FIFOScheduler):
    """At each result, stops every PENDING trial through the controller."""

    def __init__(self):
        super().__init__()
        self.removed = []

    def on_trial_result(self, tune_controller, trial, result):
        for other in tune_controller.get_live_trials():
            if other.status == Trial.PENDING:
                tune_controller.stop_trial(other)
        return TrialScheduler.CONTINUE

    def on_trial_remove(self, tune_controller, trial):
        self.removed.append(trial.config["q"])


def test_stop_trial_removes_pending_trials_that_never_run(tmp_path):
    log = str(tmp_path / "ran")
    scheduler = StopsTheOthers()
    results = tune.Tuner(
        stepping,
        param_space={"q": tune.grid_search([1, 2, 3]), "steps": 2, "log": log},
        tune_config=tune.TuneConfig(scheduler=scheduler, max_concurrent_trials=1),
        run_config=tune.RunConfig(storage_path=str(tmp_path), name="stopped", verbose=0),
    ).fit()
    # q=2 (suggested with q=1) stops at q=1's first result, q=3 (suggested after it) at its second.
    assert run_order(log) == [1]
    assert sorted(scheduler.removed) == [2, 3]
    assert sorted((r.metrics or {}).get("training_iteration", 0) for r in results) == [0, 0, 2]
    assert results.num_terminated == 3


class StricterAsha(ASHAScheduler):
    def on_trial_result(self, tune_controller, trial, result):
        return TrialScheduler.STOP


def test_overriding_a_hook_of_an_engine_scheduler_is_refused_by_name(tmp_path):
    log = str(tmp_path / "ran")
    with pytest.raises(NotImplementedError, match="StricterAsha overrides on_trial_result of AsyncHyperBandScheduler"):
        tune.Tuner(
            stepping,
            param_space={"q": 1, "steps": 1, "log": log},
            tune_config=tune.TuneConfig(metric="score", mode="max", scheduler=StricterAsha()),
            run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0),
        ).fit()
    assert not os.path.exists(log), "no trial started"


class ChoosesNonsense(FIFOScheduler):
    def choose_trial_to_run(self, tune_controller):
        return "trial one"


def test_a_chooser_returning_something_else_than_a_trial_is_named(tmp_path):
    with pytest.raises(ValueError, match="ChoosesNonsense.choose_trial_to_run returned 'trial one'"):
        tune.Tuner(
            stepping,
            param_space={"q": 1, "steps": 1, "log": str(tmp_path / "ran")},
            tune_config=tune.TuneConfig(scheduler=ChoosesNonsense()),
            run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0),
        ).fit()
