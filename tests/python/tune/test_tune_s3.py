"""Tune experiments on S3 (a moto server): `RunConfig(storage_path="s3://...")`
puts the driver's files and every trial's checkpoints in the bucket, with
retention applied there; results, checkpoints and `Tuner.restore` read them
back from it, as Ray's do."""

import json
import os
import tempfile

import pytest

import oxray as ray
from oxray import tune

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def s3_cluster(moto_s3):
    """A cluster started after the AWS variables point at moto, so its workers see them."""
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, object_store_memory=200 * 1024**2)
    try:
        yield moto_s3
    finally:
        ray.shutdown()


def keys(s3, prefix):
    listed = s3.list_objects_v2(Bucket="oxray-test", Prefix=prefix).get("Contents", [])
    return sorted(o["Key"].removeprefix(prefix) for o in listed)


def counting(config):
    """Counts to `config["steps"]`, checkpointing each step; fails once at step 2 while the fail file exists."""
    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            start = int(open(os.path.join(d, "step")).read())
    for step in range(start + 1, config["steps"] + 1):
        if step == 2 and os.path.exists(config["fail_once"]):
            os.remove(config["fail_once"])
            raise RuntimeError("failing once at step 2")
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "step"), "w") as f:
                f.write(str(step))
            tune.report({"step": step, "start": start}, checkpoint=tune.Checkpoint.from_directory(d))


def test_an_experiment_on_s3_keeps_its_files_and_checkpoints_in_the_bucket(s3_cluster, tmp_path):
    s3 = s3_cluster
    results = tune.Tuner(
        counting,
        param_space={"steps": tune.grid_search([3, 4]), "fail_once": str(tmp_path / "never")},
        run_config=tune.RunConfig(
            name="counting",
            storage_path="s3://oxray-test/tune",
            checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
            verbose=0,
        ),
    ).fit()
    assert results.num_errors == 0 and results.experiment_path == "s3://oxray-test/tune/counting"
    stored = keys(s3, "tune/counting/")
    assert "tuner.pkl" in stored and ".validate_storage_marker" in stored
    assert any(k.startswith("experiment_state-") for k in stored), stored
    for result in results:
        assert result.path.startswith("s3://oxray-test/tune/counting/counting_"), result.path
        trial_dir = result.path.removeprefix("s3://oxray-test/")
        in_trial = keys(s3, trial_dir + "/")
        steps = result.metrics["step"]
        # num_to_keep=2: only the last two checkpoints are in the bucket.
        assert [k for k in in_trial if k.endswith("/step")] == [
            f"checkpoint_{i:06d}/step" for i in (steps - 2, steps - 1)
        ], in_trial
        assert {"params.json", "progress.csv", "result.json"} <= set(in_trial), in_trial
        lines = s3.get_object(Bucket="oxray-test", Key=trial_dir + "/result.json")["Body"].read().splitlines()
        assert [json.loads(line)["step"] for line in lines] == list(range(1, steps + 1))
        assert result.checkpoint.path == f"{result.path}/checkpoint_{steps - 1:06d}"
        with result.checkpoint.as_directory() as d:
            assert open(os.path.join(d, "step")).read() == str(steps)
        assert type(result.checkpoint.filesystem).__name__ == "S3FileSystem"
    # The driver's staging copy (in the session's directory) has the trials' files but no checkpoint:
    # those went from the trials to the bucket.
    staging = os.path.join(ray._private.api.STATE.address_info["session_dir"], "artifacts")
    staged = [(root, dirs, files) for root, dirs, files in os.walk(staging) if "counting" in root]
    assert sum("result.json" in files for _, _, files in staged) == 2, staged
    assert [d for _, dirs, _ in staged for d in dirs if d.startswith("checkpoint_")] == []


def test_an_s3_experiment_is_restored_from_the_bucket_and_resumes_from_its_checkpoint(s3_cluster, tmp_path):
    fail_once = tmp_path / "fail-once"
    fail_once.write_text("")
    uri = "s3://oxray-test/restored/exp"
    first = tune.Tuner(
        counting,
        param_space={"steps": 4, "fail_once": str(fail_once)},
        run_config=tune.RunConfig(name="exp", storage_path="s3://oxray-test/restored", verbose=0),
    ).fit()
    assert first.num_errors == 1 and first[0].metrics["step"] == 1
    assert tune.Tuner.can_restore(uri) and not tune.Tuner.can_restore("s3://oxray-test/restored/none")
    restored = tune.Tuner.restore(uri, counting, resume_errored=True).fit()
    [result] = restored
    assert result.error is None and result.metrics["step"] == 4
    assert result.metrics["start"] == 1, "resumed from the checkpoint in the bucket, not from scratch"
    trial_dir = result.path.removeprefix("s3://oxray-test/")
    body = s3_cluster.get_object(Bucket="oxray-test", Key=trial_dir + "/result.json")["Body"].read()
    assert [json.loads(line)["step"] for line in body.splitlines()] == [1, 2, 3, 4]


def test_a_checkpoint_is_copied_within_the_bucket_for_pbt(s3_cluster, tmp_path):
    from oxray.train._internal.storage import open_storage
    from oxray.tune._internal.experiment_storage import ExperimentStorage

    source = tmp_path / "ckpt"
    (source / "sub").mkdir(parents=True)
    (source / "sub" / "weights").write_bytes(b"w" * 1000)
    open_storage("s3://oxray-test/pbt/exp/a").upload_dir(str(source), "checkpoint_000000")
    storage = ExperimentStorage("s3://oxray-test/pbt", "exp")
    storage.copy_checkpoint(
        "s3://oxray-test/pbt/exp/a/checkpoint_000000", "s3://oxray-test/pbt/exp/b/checkpoint_000003"
    )
    assert keys(s3_cluster, "pbt/exp/b/") == ["checkpoint_000003/sub/weights"]
    assert storage.checkpoint_exists("s3://oxray-test/pbt/exp/b/checkpoint_000003")
    storage.delete_checkpoint("s3://oxray-test/pbt/exp/b/checkpoint_000003")
    assert not storage.checkpoint_exists("s3://oxray-test/pbt/exp/b/checkpoint_000003")


def test_the_endpoint_in_the_storage_paths_query_reaches_the_trials_processes(moto_s3, monkeypatch, tmp_path):
    # The trials' processes learn the endpoint from the query alone: not from the environment.
    endpoint = moto_s3.endpoint
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, object_store_memory=200 * 1024**2)
    try:
        host = endpoint.removeprefix("http://")
        results = tune.Tuner(
            counting,
            param_space={"steps": tune.grid_search([2, 3]), "fail_once": str(tmp_path / "never")},
            tune_config=tune.TuneConfig(max_concurrent_trials=1),
            run_config=tune.RunConfig(
                name="query",
                storage_path=f"s3://oxray-test/q?scheme=http&endpoint_override={host}&region=us-east-1",
                verbose=0,
            ),
        ).fit()
    finally:
        ray.shutdown()
    assert results.num_errors == 0, [str(r.error) for r in results]
    assert sorted(os.path.basename(r.checkpoint.path) for r in results) == ["checkpoint_000001", "checkpoint_000002"]
    stored = keys(moto_s3, "q/query/")
    assert sum(k.endswith("/checkpoint_000001/step") for k in stored) == 2


def test_a_storage_path_of_another_scheme_is_refused_by_name():
    with pytest.raises(NotImplementedError, match="gs://bucket/x.*s3:// only"):
        tune.RunConfig(storage_path="gs://bucket/x")


def test_experiment_analysis_reads_an_experiment_from_the_bucket(s3_cluster, tmp_path):
    from oxray.tune import ExperimentAnalysis

    tune.Tuner(
        counting,
        param_space={"steps": tune.grid_search([2, 3]), "fail_once": str(tmp_path / "never")},
        run_config=tune.RunConfig(name="analysed", storage_path="s3://oxray-test/analysis", verbose=0),
    ).fit()
    analysis = ExperimentAnalysis("s3://oxray-test/analysis/analysed", default_metric="step", default_mode="max")
    assert analysis.experiment_path == "s3://oxray-test/analysis/analysed"
    assert sorted(t.config["steps"] for t in analysis.trials) == [2, 3]
    assert analysis.best_config["steps"] == 3 and analysis.best_result["step"] == 3
    best = analysis.best_checkpoint
    assert best.path.startswith("s3://oxray-test/analysis/analysed/") and best.path.endswith("checkpoint_000002")
    with best.as_directory() as d:
        assert open(os.path.join(d, "step")).read() == "3"
    assert sorted(len(df) for df in analysis.trial_dataframes.values()) == [2, 3]
    with pytest.raises(ValueError, match="no experiment_state"):
        ExperimentAnalysis("s3://oxray-test/analysis/none")
