"""Jobs on a cluster of several nodes (agents on 127.0.0.1 with their own ports
and temp dirs): a job whose entrypoint resources only another node has runs on
that node, under its agent; its uploaded working_dir goes with it, its output
streams back to the head's log, it can be stopped, and a restarted head
re-attaches to it."""

import json
import os
import signal
import textwrap

import psutil
import pytest

from cli_cluster import running_cluster
from oxray_testutil import ray_jobs_client as connect
from oxray_testutil import wait_job_terminal as wait_terminal
from oxray_testutil import wait_until

pytestmark = [pytest.mark.timeout(300)]
job_submission = pytest.importorskip("ray.job_submission")
JobStatus = job_submission.JobStatus


SCRIPT = textwrap.dedent(
    """
    import psutil
    import helper

    print("ancestors", [p.pid for p in psutil.Process().parents()])
    print(helper.GREETING)
    """
)


def test_a_job_runs_on_the_node_that_has_its_entrypoint_resources(tmp_path, monkeypatch):
    with running_cluster(tmp_path / "oxray", monkeypatch) as cluster:
        cluster.start_head(num_cpus=1)
        cluster.add_node(num_cpus=1, resources={"worker_slot": 1})
        head = cluster.node_with_pid_record(head=True)
        worker = cluster.node_with_pid_record(head=False)
        client = connect(cluster)
        work = tmp_path / "work"
        work.mkdir()
        (work / "script.py").write_text(SCRIPT)
        (work / "helper.py").write_text("GREETING = 'hello from the worker node'\n")
        job_id = client.submit_job(
            entrypoint="python script.py",
            runtime_env={"working_dir": str(work)},
            entrypoint_resources={"worker_slot": 1},
        )
        assert wait_terminal(client, job_id) == JobStatus.SUCCEEDED, client.get_job_info(job_id).message
        logs = client.get_job_logs(job_id)
        ancestors = json.loads(logs.splitlines()[0].removeprefix("ancestors "))
        assert int(worker["pid"]) in ancestors and int(head["pid"]) not in ancestors, (logs, worker, head)
        assert logs.endswith("hello from the worker node\n"), logs
        failed = client.submit_job(entrypoint="echo bad; exit 4", entrypoint_resources={"worker_slot": 1})
        assert wait_terminal(client, failed) == JobStatus.FAILED
        assert "exit code 4" in client.get_job_info(failed).message

        long = client.submit_job(
            entrypoint="echo started; exec sleep 300", entrypoint_resources={"worker_slot": 1}, submission_id="long"
        )
        wait_until("the long job to start", lambda: "started" in client.get_job_logs(long), timeout=60)
        os.kill(int(head["pid"]), 9)  # the head dies; the worker node (and the job on it) lives on
        cluster.start_head(num_cpus=1)
        client = connect(cluster)
        assert client.get_job_status(long) == JobStatus.RUNNING
        assert client.get_job_logs(long) == "started\n"
        assert client.stop_job(long) is True
        assert wait_terminal(client, long) == JobStatus.STOPPED

        # A node that shuts down stops the jobs it runs; the head marks them failed.
        marker = tmp_path / "job.pid"
        last = client.submit_job(
            entrypoint=f"echo $$ > {marker}; exec sleep 300", entrypoint_resources={"worker_slot": 1}
        )
        wait_until(
            lambda: f"the job to write its pid ({client.get_job_info(last)})",
            lambda: marker.exists() and marker.read_text().strip(),
            timeout=60,
        )
        job_pid = int(marker.read_text())
        os.kill(int(worker["pid"]), signal.SIGTERM)
        assert wait_terminal(client, last) == JobStatus.FAILED
        wait_until("the node to stop its job", lambda: not psutil.pid_exists(job_pid), timeout=60)
