"""oxray's own Jobs clients: `oxray.job_submission` (Ray's SDK surface) and the
`oxray job` command, against `oxray start --head`, finding the cluster and its
token on this host when no address is given."""

import asyncio
import os

import pytest

from oxray.exceptions import AuthenticationError
from oxray.job_submission import JobDetails, JobStatus, JobSubmissionClient, JobType
from oxray_testutil import wait_job_terminal as wait_terminal
from oxray_testutil import wait_until

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(autouse=True)
def no_token_in_env(monkeypatch):
    for var in ("OXRAY_TOKEN", "RAY_AUTH_TOKEN", "RAY_API_SERVER_ADDRESS"):
        monkeypatch.delenv(var, raising=False)


def test_the_sdk_finds_the_local_cluster_and_runs_a_working_dir(head, tmp_path):
    client = JobSubmissionClient()  # the cluster `oxray start` runs here, with its token file
    work = tmp_path / "work"
    (work / "pkg").mkdir(parents=True)
    (work / "pkg" / "__init__.py").write_text("VALUE = 41\n")
    (work / "main.py").write_text("import os, pkg\nprint(pkg.VALUE + 1, os.environ['EXTRA'])\n")
    (work / "__pycache__").mkdir()
    (work / "__pycache__" / "junk.pyc").write_bytes(b"x" * 10)
    (work / "skip.log").write_text("not uploaded")
    job_id = client.submit_job(
        entrypoint="python main.py && ls",
        runtime_env={"working_dir": str(work), "env_vars": {"EXTRA": "yes"}, "excludes": ["*.log"]},
    )
    assert wait_terminal(client, job_id) == JobStatus.SUCCEEDED
    logs = client.get_job_logs(job_id)
    assert logs.startswith("42 yes\n"), logs
    assert "skip.log" not in logs and "__pycache__" not in logs, logs
    info = client.get_job_info(job_id)
    assert isinstance(info, JobDetails) and info.type == JobType.SUBMISSION
    assert info.status == JobStatus.SUCCEEDED and info.driver_exit_code == 0

    async def tail():
        return "".join([chunk async for chunk in client.tail_job_logs(job_id)])

    assert asyncio.run(tail()) == logs
    assert [j.submission_id for j in client.list_jobs()] == [job_id]
    assert client.delete_job(job_id) is True
    with pytest.raises(RuntimeError, match="404"):
        client.get_job_info(job_id)


def test_the_sdk_refuses_a_wrong_token_and_bad_options(head, monkeypatch):
    monkeypatch.setenv("OXRAY_TOKEN", "0" * 64)
    with pytest.raises(AuthenticationError, match="Invalid authentication token"):
        JobSubmissionClient(head.dashboard_url)
    monkeypatch.delenv("OXRAY_TOKEN")
    with pytest.raises(ValueError, match="create_cluster_if_needed"):
        JobSubmissionClient(head.dashboard_url, create_cluster_if_needed=True)
    with pytest.raises(ValueError, match="expected the head's HTTP address"):
        JobSubmissionClient("127.0.0.1:6379")
    client = JobSubmissionClient(head.dashboard_url)
    with pytest.raises(RuntimeError, match="use entrypoint_num_cpus"):
        client.submit_job(entrypoint="true", entrypoint_resources={"CPU": 1})
    with pytest.raises(ValueError, match="not a directory"):
        client.submit_job(entrypoint="true", runtime_env={"working_dir": "/no/such/dir"})


def test_the_oxray_job_command(head, tmp_path):
    env = {k: v for k, v in head.env.items() if not k.startswith("RAY_")}
    work = tmp_path / "cli"
    work.mkdir()
    (work / "hello.py").write_text("print('hello', 'from', 'oxray job')\n")
    submitted = head.cli(
        "job", "submit", "--entrypoint-num-cpus", "2", "--working-dir", str(work), "--", "python", "hello.py", env=env
    )
    assert "hello from oxray job" in submitted.stdout and "succeeded" in submitted.stdout, submitted.stdout
    failed = head.cli("job", "submit", "--", "sh", "-c", "echo bad; exit 5", check=False, env=env)
    assert failed.returncode == 1 and "failed with exit code 5" in failed.stdout, failed.stdout + failed.stderr
    nowait = head.cli("job", "submit", "--no-wait", "--submission-id", "long", "--", "sleep", "300", env=env)
    assert "Job 'long' submitted successfully" in nowait.stdout
    status = head.cli("job", "status", "long", env=env).stdout
    assert "PENDING" in status or "RUNNING" in status, status
    stopped = head.cli("job", "stop", "long", env=env)
    assert "Job 'long' was stopped" in stopped.stdout, stopped.stdout
    assert "STOPPED" in head.cli("job", "status", "long", env=env).stdout
    listed = head.cli("job", "list", env=env).stdout
    assert "long\tSTOPPED\tsleep 300" in listed, listed
    assert "deleted" in head.cli("job", "delete", "long", env=env).stdout
    missing = head.cli("job", "status", "long", check=False, env=env)
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    empty = head.cli("job", "submit", check=False, env=env)
    assert empty.returncode == 1 and "no entrypoint" in empty.stderr
    assert os.path.isdir(work)


def test_the_sdk_uploads_py_modules(head, tmp_path):
    module = tmp_path / "lib" / "oxray_sdkmod"
    module.mkdir(parents=True)
    (module / "__init__.py").write_text("NAME = 'uploaded module'\n")
    (module / "__pycache__").mkdir()
    (module / "__pycache__" / "junk.pyc").write_bytes(b"not uploaded")
    client = JobSubmissionClient()
    probe = "import oxray_sdkmod, os; print(oxray_sdkmod.NAME, os.listdir(oxray_sdkmod.__path__[0]))"
    job_id = client.submit_job(entrypoint=f'python -c "{probe}"', runtime_env={"py_modules": [str(module)]})
    assert wait_terminal(client, job_id) == JobStatus.SUCCEEDED, client.get_job_logs(job_id)
    assert client.get_job_logs(job_id) == "uploaded module ['__init__.py']\n"
    assert client.get_job_info(job_id).runtime_env["py_modules"][0].startswith("gcs://_ray_pkg_")
    with pytest.raises(ValueError, match="py_modules entry"):
        client.submit_job(entrypoint="true", runtime_env={"py_modules": [str(tmp_path / "nowhere")]})


def test_the_sdk_waits_pending_for_entrypoint_resources(head, tmp_path):
    """The head has 2 CPUs: with both held by one job, a job asking for one
    stays PENDING until the first ends, then runs."""
    client = JobSubmissionClient()
    go, started = tmp_path / "go", tmp_path / "started"
    holder = client.submit_job(entrypoint=f"while [ ! -e {go} ]; do sleep 0.05; done", entrypoint_num_cpus=2)
    wait_until(
        lambda: f"the holder job to run ({client.get_job_info(holder)})",
        lambda: client.get_job_status(holder) == JobStatus.RUNNING,
        timeout=60,
    )
    waiting = client.submit_job(entrypoint=f"touch {started}", entrypoint_num_cpus=1)
    assert wait_terminal(client, client.submit_job(entrypoint="true")) == JobStatus.SUCCEEDED
    assert client.get_job_status(waiting) == JobStatus.PENDING and not started.exists()
    go.touch()
    assert wait_terminal(client, waiting) == JobStatus.SUCCEEDED and started.exists()
    assert wait_terminal(client, holder) == JobStatus.SUCCEEDED
