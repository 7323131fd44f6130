"""Ray's class API: `Trainable.setup/step/save_checkpoint/load_checkpoint/
cleanup`, checkpoints every `checkpoint_frequency` steps and at the end, a
retry restoring from the latest (a dict checkpoint included), and `cleanup()`
run when Tune stops the trial."""

import os

import pytest

from oxray import tune

pytestmark = pytest.mark.usefixtures("cluster")


class Counter(tune.Trainable):
    def setup(self, config):
        self.count = 0
        self.step_size = config["step"]
        self.marks = config["marks"]

    def step(self):
        self.count += self.step_size
        if self.count == 3 * self.step_size and self.config.get("fail_once"):
            marker = os.path.join(self.marks, "failed")
            if not os.path.exists(marker):
                open(marker, "w").close()
                raise RuntimeError("fails once at step 3")
        return {"count": self.count, "done": self.config.get("finite", True) and self.count >= 5 * self.step_size}

    def save_checkpoint(self, checkpoint_dir):
        return {"count": self.count}

    def load_checkpoint(self, checkpoint):
        self.count = checkpoint["count"]

    def cleanup(self):
        open(os.path.join(self.marks, f"cleanup-{self.trial_id}"), "w").close()


def run_config(tmp_path, **kwargs):
    return tune.RunConfig(storage_path=str(tmp_path), name="exp", verbose=0, **kwargs)


def test_steps_checkpoints_and_cleanup(tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    results = tune.Tuner(
        Counter,
        param_space={"step": tune.grid_search([1, 2]), "marks": str(marks)},
        run_config=run_config(tmp_path, checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=2)),
    ).fit()
    assert sorted(r.metrics["count"] for r in results) == [5, 10]
    for result in results:
        assert result.metrics["training_iteration"] == 5
        checkpoints = sorted(d for d in os.listdir(result.path) if d.startswith("checkpoint_"))
        assert checkpoints == ["checkpoint_000000", "checkpoint_000001", "checkpoint_000002"], "2, 4 and the end"
        assert os.path.basename(result.checkpoint.path) == "checkpoint_000002"
    assert len(list(marks.glob("cleanup-*"))) == 2
    assert os.path.basename(results[0].path).startswith("Counter_")


class Weighted(tune.Trainable):
    def setup(self, config, weights=None, offset=0):
        self.total = int(weights.sum()) * config["k"] + offset

    def step(self):
        return {"total": self.total, "done": True}


def test_with_parameters_hands_a_class_trainable_its_objects_in_setup(tmp_path):
    import numpy as np

    weights = np.arange(100_000, dtype=np.int64)
    trainable = tune.with_resources(tune.with_parameters(Weighted, weights=weights, offset=1), {"cpu": 1})
    results = tune.Tuner(trainable, param_space={"k": tune.grid_search([1, 2])}, run_config=run_config(tmp_path)).fit()
    assert sorted(r.metrics["total"] for r in results) == [int(weights.sum()) + 1, 2 * int(weights.sum()) + 1]


def test_a_retry_restores_the_latest_checkpoint(tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    results = tune.Tuner(
        Counter,
        param_space={"step": 10, "marks": str(marks), "fail_once": True},
        run_config=run_config(
            tmp_path,
            checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=1),
            failure_config=tune.FailureConfig(max_failures=1),
        ),
    ).fit()
    [result] = results
    assert result.error is None and result.metrics["count"] == 50
    assert [r["count"] for r in result._metrics_history] == [10, 20, 30, 40, 50]
    assert [r["training_iteration"] for r in result._metrics_history] == [1, 2, 3, 4, 5]


def test_a_trial_tune_stops_runs_its_cleanup(tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    results = tune.Tuner(
        Counter,
        param_space={"step": 1, "marks": str(marks), "finite": False},
        run_config=run_config(tmp_path, stop={"training_iteration": 2}),
    ).fit()
    assert results[0].metrics["training_iteration"] == 2
    assert [p.name for p in marks.glob("cleanup-*")] == [f"cleanup-{results[0].metrics['trial_id']}"]


def test_checkpoint_frequency_is_refused_for_a_function_trainable(tmp_path):
    def fn(config):
        tune.report({"x": 1})

    with pytest.raises(ValueError, match="only apply to class trainables"):
        tune.Tuner(
            fn, run_config=run_config(tmp_path, checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=2))
        ).fit()


class Resettable(tune.Trainable):
    """Logs its setups, resets and cleanups with its process id."""

    def setup(self, config):
        self.log(f"setup {config['x']}")

    def step(self):
        return {"x": self.config["x"]}

    def reset_config(self, new_config):
        self.log(f"reset {new_config['x']}")
        return new_config.get("resettable", True)

    def cleanup(self):
        self.log("cleanup")

    def log(self, line):
        with open(os.path.join(self.config["marks"], "log"), "a") as f:
            f.write(f"{os.getpid()} {line}\n")


@pytest.mark.parametrize("resettable", [True, False])
def test_stopped_trials_actor_takes_the_next_trial_through_reset_config(tmp_path, resettable):
    marks = tmp_path / "marks"
    marks.mkdir()
    results = tune.Tuner(
        Resettable,
        param_space={"x": tune.grid_search([1, 2, 3]), "marks": str(marks), "resettable": resettable},
        tune_config=tune.TuneConfig(max_concurrent_trials=1),
        run_config=run_config(tmp_path, stop={"training_iteration": 2}),
    ).fit()
    assert [r.metrics["training_iteration"] for r in results] == [2, 2, 2]
    lines = (marks / "log").read_text().splitlines()
    assert len({line.split()[0] for line in lines}) == 1, f"one actor took every trial: {lines}"
    events = [line.split(" ", 1)[1] for line in lines]
    if resettable:
        # Ray's reuse: one setup, then reset_config for each next trial; cleanup once, when the actor goes.
        assert events == ["setup 1", "reset 2", "reset 3", "cleanup"]
    else:
        # reset_config said no: the old instance is cleaned up and a new one set up.
        assert events == ["setup 1", "reset 2", "cleanup", "setup 2", "reset 3", "cleanup", "setup 3", "cleanup"]
