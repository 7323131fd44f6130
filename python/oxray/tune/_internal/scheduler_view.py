"""What a `TrialScheduler` of the user's own sees of the experiment: Ray passes its
`TuneController` to the hooks, and schedulers call these of its methods. Pausing and
stopping go through the driver loop, which keeps the engine's controller in step."""

from __future__ import annotations


class SchedulerView:
    def __init__(self, runner):
        self._runner = runner

    def get_trials(self) -> list:
        return list(self._runner.trials)

    def get_live_trials(self) -> list:
        return [t for t in self._runner.trials if t.status not in ("TERMINATED", "ERROR")]

    def has_resources_for_trial(self, trial) -> bool:
        """Whether the trial would start now: its resources are free and `max_concurrent_trials` allows."""
        return self._runner.controller.has_room_for(trial.index)

    def pause_trial(self, trial, should_checkpoint: bool = True) -> None:
        """Stops a RUNNING trial's run; it waits, PAUSED, until `choose_trial_to_run` returns it, then
        resumes from its latest checkpoint (a function trainable checkpoints itself: without one it
        starts over, with a warning)."""
        self._runner.pause_for_scheduler(trial)

    def stop_trial(self, trial) -> None:
        """Ends the trial: a RUNNING one completes (`on_trial_complete`), a PENDING or PAUSED one is
        removed (`on_trial_remove`)."""
        self._runner.stop_for_scheduler(trial)
