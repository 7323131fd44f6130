"""Run storage stays inside its root: a path with `..` or an absolute path is
refused by the native storage, and a snapshot naming such a checkpoint is
refused when it is loaded."""

import json

import pytest

from oxray import _native
from oxray.train._internal.checkpoint_manager import CheckpointManager
from oxray.train._internal.storage import SNAPSHOT_FILE, RunStorage
from oxray.train.config import CheckpointConfig


@pytest.mark.parametrize("rel", ["../escape", "run/../../escape", "run/./x/..", "{abs}/escape"])
def test_storage_refuses_paths_outside_its_root(tmp_path, rel):
    # Every escape lands inside tmp_path, so the unfixed code cannot touch anything else.
    root = tmp_path / "a" / "b" / "root"
    root.mkdir(parents=True)
    rel = rel.format(abs=tmp_path / "a")
    storage = _native.Storage(str(root))
    for call in (
        lambda: storage.write_bytes(rel, b"x"),
        lambda: storage.read_bytes(rel),
        lambda: storage.list(rel),
        lambda: storage.delete_dir(rel),
        lambda: storage.upload_dir(str(root), rel),
        lambda: storage.download_dir(rel, str(root / "down")),
    ):
        with pytest.raises(ValueError, match="relative path"):
            call()
    assert [str(p.relative_to(tmp_path)) for p in sorted(tmp_path.rglob("*"))] == ["a", "a/b", "a/b/root"]


def test_a_snapshot_naming_a_checkpoint_outside_the_run_is_refused(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("keep")
    run = tmp_path / "storage" / "run"
    run.mkdir(parents=True)
    snapshot = {
        "checkpoint_results": [{"checkpoint_dir_name": "../../victim", "metrics": {}}],
        "latest_checkpoint_result": None,
    }
    (run / SNAPSHOT_FILE).write_text(json.dumps(snapshot))
    manager = CheckpointManager(RunStorage(str(tmp_path / "storage"), "run"), CheckpointConfig(num_to_keep=1))
    with pytest.raises(ValueError, match="../../victim"):
        manager.load_snapshot()
    assert (victim / "keep").exists()
