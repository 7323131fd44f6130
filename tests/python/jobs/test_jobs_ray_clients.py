"""Ray's own Jobs clients, unmodified (the `ray` package's `JobSubmissionClient`
and `ray job` CLI), against an oxray head started with `oxray start --head`:
submit with a working_dir, status, logs (whole and followed), stop, list,
delete, a failing entrypoint, and a job whose bare `init()` joins the cluster."""

import os
import subprocess
import sys
import textwrap

import pytest

from oxray_testutil import wait_job_terminal as wait_terminal
from oxray_testutil import wait_until

pytestmark = [pytest.mark.timeout(240)]
job_submission = pytest.importorskip("ray.job_submission")
JobStatus = job_submission.JobStatus


@pytest.fixture
def client(head):
    # Ray's SDK takes the token as a header (its CLI, below, from RAY_AUTH_MODE/RAY_AUTH_TOKEN).
    return job_submission.JobSubmissionClient(head.dashboard_url, headers={"Authorization": f"Bearer {head.token}"})


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_submit_a_working_dir_and_read_its_logs(client, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "script.py").write_text("import helper\nprint('hello from', helper.NAME)\n")
    (work / "helper.py").write_text("NAME = 'the working dir'\n")
    job_id = client.submit_job(
        entrypoint="python script.py",
        runtime_env={"working_dir": str(work), "env_vars": {"GREETING": "hi"}},
        metadata={"owner": "tests"},
    )
    assert job_id.startswith("raysubmit_")
    assert wait_terminal(client, job_id) == JobStatus.SUCCEEDED
    assert client.get_job_logs(job_id) == "hello from the working dir\n"
    info = client.get_job_info(job_id)
    assert info.status == JobStatus.SUCCEEDED and info.message == "Job finished successfully."
    assert info.metadata == {"owner": "tests"} and info.driver_exit_code == 0
    assert info.runtime_env["working_dir"].startswith("gcs://_ray_pkg_")
    assert job_id in [j.submission_id for j in client.list_jobs()]
    assert client.delete_job(job_id) is True
    with pytest.raises(RuntimeError, match="does not exist"):
        client.get_job_status(job_id)


def test_a_failing_entrypoint_is_failed_with_its_exit_code_and_output(client):
    job_id = client.submit_job(entrypoint="echo about to fail; exit 3", submission_id="failing-job")
    assert job_id == "failing-job"
    assert wait_terminal(client, job_id) == JobStatus.FAILED
    info = client.get_job_info(job_id)
    assert info.error_type == "JOB_ENTRYPOINT_COMMAND_ERROR" and info.driver_exit_code == 3
    assert "failed with exit code 3" in info.message and "about to fail" in info.message
    with pytest.raises(RuntimeError, match="already exists"):
        client.submit_job(entrypoint="true", submission_id="failing-job")


def test_stop_kills_the_whole_process_tree(client, tmp_path):
    marker = tmp_path / "child.pid"
    script = f"sleep 300 & echo $! > {marker}; echo started; wait"
    job_id = client.submit_job(entrypoint=script)
    wait_until("the job to write its pid", lambda: marker.exists() and marker.read_text().strip(), timeout=60)
    child = int(marker.read_text())
    assert client.stop_job(job_id) is True
    assert wait_terminal(client, job_id) == JobStatus.STOPPED
    assert client.get_job_info(job_id).message == "Job was intentionally stopped."
    wait_until(f"the job's child {child} to go with the stop", lambda: not process_alive(child))
    assert client.stop_job(job_id) is False, "a finished job is not stopped again"


def test_a_job_joins_the_cluster_it_was_submitted_to(client, tmp_path):
    work = tmp_path / "driver"
    work.mkdir()
    (work / "driver.py").write_text(
        textwrap.dedent(
            """
            import oxray as ray

            ray.init()

            @ray.remote
            def square(x):
                return x * x

            print("squares", sum(ray.get([square.remote(i) for i in range(10)])))
            print("cpus", ray.cluster_resources()["CPU"])
            """
        )
    )
    job_id = client.submit_job(entrypoint="python driver.py", runtime_env={"working_dir": str(work)})
    assert wait_terminal(client, job_id) == JobStatus.SUCCEEDED, client.get_job_logs(job_id)
    logs = client.get_job_logs(job_id)
    assert "squares 285" in logs and "cpus 2.0" in logs, logs


def test_bad_submissions_are_refused_with_the_reason(client):
    with pytest.raises(RuntimeError, match="conda"):
        client.submit_job(entrypoint="true", runtime_env={"conda": "my-env"})
    with pytest.raises(RuntimeError, match="entrypoint_num_cpus"):
        client.submit_job(entrypoint="true", entrypoint_num_cpus=-1)
    with pytest.raises(RuntimeError, match="entrypoint_label_selector"):
        client.submit_job(entrypoint="true", entrypoint_label_selector={"zone": "a"})


def test_entrypoint_resources_are_held_and_a_job_waits_pending_for_them(client, tmp_path):
    """The head has 2 CPUs: a job holding both leaves none to tasks, and a job
    asking for one waits PENDING (never started) until the first ends."""
    go, started = tmp_path / "go", tmp_path / "started"
    holder = client.submit_job(
        entrypoint=f"while [ ! -e {go} ]; do sleep 0.05; done", entrypoint_num_cpus=2, entrypoint_memory=1 << 20
    )
    wait_until("the holder job to run", lambda: client.get_job_status(holder) == JobStatus.RUNNING, timeout=60)
    waiting = client.submit_job(entrypoint=f"touch {started}", entrypoint_num_cpus=1)
    stopped_while_waiting = client.submit_job(entrypoint=f"touch {started}", entrypoint_num_cpus=1)
    probe = "import oxray as ray; ray.init(); print('free CPU', ray.available_resources().get('CPU', 0))"
    free = client.submit_job(entrypoint=f'python -c "{probe}"')
    assert wait_terminal(client, free) == JobStatus.SUCCEEDED, client.get_job_logs(free)
    assert "free CPU 0" in client.get_job_logs(free), client.get_job_logs(free)
    info = client.get_job_info(waiting)
    assert info.status == JobStatus.PENDING and "waiting for resources" in info.message, info
    assert client.stop_job(stopped_while_waiting) is True
    assert wait_terminal(client, stopped_while_waiting) == JobStatus.STOPPED
    assert not started.exists()
    go.touch()
    assert wait_terminal(client, holder) == JobStatus.SUCCEEDED
    assert wait_terminal(client, waiting) == JobStatus.SUCCEEDED, client.get_job_info(waiting)
    assert started.exists()


def test_entrypoint_resources_no_node_can_give_fail_the_job(client):
    job_id = client.submit_job(entrypoint="true", entrypoint_num_gpus=1, entrypoint_resources={"tpu_pod": 2})
    assert wait_terminal(client, job_id) == JobStatus.FAILED
    info = client.get_job_info(job_id)
    assert info.error_type == "JOB_SUPERVISOR_ACTOR_UNSCHEDULABLE", info
    assert "GPU=1" in info.message and "tpu_pod=2" in info.message, info.message


def ray_cli(head, *args, timeout=180):
    env = {**os.environ, "RAY_ADDRESS": head.dashboard_url, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": head.token}
    ray = os.path.join(os.path.dirname(sys.executable), "ray")
    return subprocess.run([ray, "job", *args], env=env, capture_output=True, text=True, timeout=timeout)


def test_the_ray_job_cli_submits_follows_and_lists(head, tmp_path):
    work = tmp_path / "cli"
    work.mkdir()
    (work / "script.py").write_text("for i in range(3):\n    print('line', i)\n")
    submitted = ray_cli(head, "submit", "--working-dir", str(work), "--", "python", "script.py")
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    out = submitted.stdout + submitted.stderr
    assert "line 0" in out and "line 2" in out and "succeeded" in out.lower(), out
    failed = ray_cli(head, "submit", "--", "sh", "-c", "echo boom; exit 2")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    nowait = ray_cli(head, "submit", "--no-wait", "--submission-id", "cli-job", "--", "echo", "quick")
    assert nowait.returncode == 0, nowait.stdout + nowait.stderr
    followed = ray_cli(head, "logs", "--follow", "cli-job")
    assert followed.returncode == 0 and "quick" in followed.stdout, followed.stdout + followed.stderr
    status = ray_cli(head, "status", "cli-job")
    assert "Job 'cli-job' succeeded" in status.stdout, status.stdout + status.stderr
    listed = ray_cli(head, "list")
    assert "cli-job" in listed.stdout, listed.stdout + listed.stderr
    deleted = ray_cli(head, "delete", "cli-job")
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr


def test_a_head_restart_keeps_every_job_and_adopts_the_running_ones(head, tmp_path):
    """SIGKILL the head mid-job: after the restart every record and log is there; a
    job still running is adopted (followed to its end, stoppable), one that ended
    meanwhile gets its exit code, one killed meanwhile is marked failed."""
    client = job_submission.JobSubmissionClient(head.dashboard_url, headers={"Authorization": f"Bearer {head.token}"})
    done = client.submit_job(entrypoint="echo kept across the restart", submission_id="done-before")
    assert wait_terminal(client, done) == JobStatus.SUCCEEDED

    def waiting_job(name, then):
        flag, pid = tmp_path / f"{name}.go", tmp_path / f"{name}.pid"
        entrypoint = f"echo $$ > {pid}; echo before; while [ ! -e {flag} ]; do sleep 0.05; done; {then}"
        client.submit_job(entrypoint=entrypoint, submission_id=name)
        wait_until(f"job {name} to start", lambda: "before" in client.get_job_logs(name), timeout=60)
        return flag, int(pid.read_text())

    adopted_flag, adopted_pid = waiting_job("adopted", "echo after")
    stopped_flag, stopped_pid = waiting_job("stopped-after-adoption", "true")
    exited_flag, exited_pid = waiting_job("exited-meanwhile", "exit 3")
    killed_flag, killed_pid = waiting_job("killed-meanwhile", "true")
    [record] = [r for r in head.records() if r["head"]]
    os.kill(int(record["pid"]), 9)  # the head dies without any cleanup
    head.cli("stop", "--force", check=False)
    exited_flag.touch()
    os.killpg(os.getpgid(killed_pid), 9)
    wait_until(
        "both jobs' processes to end",
        lambda: not process_alive(exited_pid) and not process_alive(killed_pid),
        timeout=60,
    )
    head.start_head(num_cpus=2)
    client = job_submission.JobSubmissionClient(head.dashboard_url, headers={"Authorization": f"Bearer {head.token}"})
    jobs = {j.submission_id: j for j in client.list_jobs()}
    assert jobs["done-before"].status == JobStatus.SUCCEEDED
    assert client.get_job_logs("done-before") == "kept across the restart\n"
    assert jobs["adopted"].status == JobStatus.RUNNING, jobs["adopted"]
    assert jobs["exited-meanwhile"].status == JobStatus.FAILED
    assert "exit code 3" in jobs["exited-meanwhile"].message and jobs["exited-meanwhile"].driver_exit_code == 3
    killed = jobs["killed-meanwhile"]
    assert killed.status == JobStatus.FAILED and "without an exit code" in killed.message, killed
    adopted_flag.touch()
    assert wait_terminal(client, "adopted") == JobStatus.SUCCEEDED
    assert client.get_job_logs("adopted") == "before\nafter\n"
    assert client.get_job_info("adopted").driver_exit_code == 0
    assert client.stop_job("stopped-after-adoption") is True
    assert wait_terminal(client, "stopped-after-adoption") == JobStatus.STOPPED
    wait_until("the stopped job's process to end", lambda: not process_alive(stopped_pid), timeout=60)
    assert not process_alive(adopted_pid)


def test_stopping_the_head_stops_its_jobs(head, tmp_path):
    client = job_submission.JobSubmissionClient(head.dashboard_url, headers={"Authorization": f"Bearer {head.token}"})
    marker = tmp_path / "job.pid"
    client.submit_job(entrypoint=f"echo $$ > {marker}; exec sleep 300", submission_id="running-at-stop")
    wait_until("the job to write its pid", lambda: marker.exists() and marker.read_text().strip(), timeout=60)
    job_pid = int(marker.read_text())
    head.cli("stop")
    assert not process_alive(job_pid), "a stopped head left its job running"
    head.start_head(num_cpus=2)
    client = job_submission.JobSubmissionClient(head.dashboard_url, headers={"Authorization": f"Bearer {head.token}"})
    info = client.get_job_info("running-at-stop")
    assert info.status == JobStatus.STOPPED and "head shut down" in info.message, info


HAND_DRIVER = """
import sys
import oxray as ray

ray.init(address=sys.argv[1])
print("joined", flush=True)
sys.stdin.read()  # runs until the test closes its stdin
"""


def test_drivers_are_listed_and_linked_to_their_submissions(client, head, tmp_path):
    """A driver started by hand is a DRIVER row (RUNNING, then SUCCEEDED once it
    exits); a submitted job's driver fills in the submission's `job_id` and
    `driver_info`, and its JobID addresses the submission."""
    script = tmp_path / "hand_driver.py"
    script.write_text(HAND_DRIVER)
    env = {**head.env, "OXRAY_TOKEN": head.token}
    hand = subprocess.Popen(
        [sys.executable, str(script), head.address], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert hand.stdout.readline() == "joined\n"
        [row] = [j for j in client.list_jobs() if j.type == job_submission.JobType.DRIVER]
        assert row.status == JobStatus.RUNNING and row.submission_id is None, row
        assert row.driver_info.pid == str(hand.pid) and "hand_driver.py" in row.entrypoint, row
        assert len(row.job_id) == 8 and client.get_job_info(row.job_id).type == job_submission.JobType.DRIVER
        with pytest.raises(RuntimeError, match="400"):
            client.get_job_logs(row.job_id)
        with pytest.raises(RuntimeError, match="400"):
            client.stop_job(row.job_id)
    finally:
        hand.stdin.close()
        hand.wait(timeout=60)
    wait_until(
        "the driver's job to succeed", lambda: client.get_job_info(row.job_id).status == JobStatus.SUCCEEDED, timeout=60
    )
    assert client.get_job_info(row.job_id).end_time > 0

    flag = tmp_path / "go"
    work = tmp_path / "submitted"
    work.mkdir()
    (work / "driver.py").write_text(
        f"import os, time\nimport oxray as ray\nray.init()\nprint('pid', os.getpid(), flush=True)\n"
        f"while not os.path.exists({str(flag)!r}):\n    time.sleep(0.05)\n"
    )
    submission = client.submit_job(entrypoint="python driver.py", runtime_env={"working_dir": str(work)})
    wait_until("the job's driver to register", lambda: client.get_job_info(submission).job_id is not None, timeout=60)
    info = client.get_job_info(submission)
    # The driver registers during `ray.init()` and prints after it: wait for the line.
    wait_until(
        lambda: f"the driver's line in the job's logs ({info})",
        lambda: f"pid {info.driver_info.pid}" in client.get_job_logs(submission),
        timeout=60,
    )
    assert client.get_job_info(info.job_id).submission_id == submission
    assert [j.type for j in client.list_jobs()].count(job_submission.JobType.DRIVER) == 1, "no DRIVER row of its own"
    flag.touch()
    assert wait_terminal(client, info.job_id) == JobStatus.SUCCEEDED


TRAIN_SCRIPT = """
import torch

import oxray as ray
from oxray import train
from oxray.train import ScalingConfig
from oxray.train.torch import TorchTrainer, prepare_model


def loop(config):
    torch.manual_seed(0)
    model = prepare_model(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(64, 4), torch.randn(64, 1)
    for epoch in range(3):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        train.report({"epoch": epoch, "loss": loss.item(), "rank": train.get_context().get_world_rank()})


ray.init()
result = TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=2)).fit()
print("trained without error:", result.error is None)
"""


def test_a_job_trains_with_torch_trainer_on_its_cluster(client, tmp_path):
    work = tmp_path / "trainjob"
    work.mkdir()
    (work / "train_job.py").write_text(TRAIN_SCRIPT)
    job_id = client.submit_job(
        entrypoint="python train_job.py",
        runtime_env={"working_dir": str(work), "env_vars": {"OXRAY_STORAGE_PATH": str(tmp_path / "runs")}},
    )
    status = wait_terminal(client, job_id, timeout=200)
    logs = client.get_job_logs(job_id)
    assert status == JobStatus.SUCCEEDED, logs
    assert "trained without error: True" in logs, logs
