"""A head started with `oxray start --head` (2 CPUs, its own HTTP port) under a
private temp root, stopped after each test."""

import pytest

from cli_cluster import running_cluster


@pytest.fixture
def head(tmp_path, monkeypatch):
    with running_cluster(tmp_path / "oxray", monkeypatch) as cluster:
        cluster.start_head(num_cpus=2)
        yield cluster
