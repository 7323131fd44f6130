"""The Jobs API under the audit's attacks and faults (issue 30), over a real socket to an
`oxray start --head`: submission ids that could break out of a URL or a file name, two
submits racing with one id, commands and variables that could never run, and a reused
id inheriting a deleted job's log."""

import concurrent.futures
import json

import pytest

from oxray.job_submission import JobStatus, JobSubmissionClient
from oxray_testutil import http_call, wait_job_terminal, wait_until

pytestmark = pytest.mark.timeout(240)


def submit(head, body: dict):
    return http_call(
        "POST", f"{head.dashboard_url}/api/jobs/", token=head.token, body=json.dumps(body).encode(), headers={}
    )


def jobs_client(head):

    return JobSubmissionClient(head.dashboard_url, headers={"Authorization": f"Bearer {head.token}"})


def test_ids_that_could_leave_a_url_or_a_file_name_are_400(head):
    # The stored XSS's id (backslashes are slashes to a browser), NUL, an id too long to ever
    # delete (414 on DELETE), markup: each is refused before anything is stored.
    for bad in [r"x\..\..\..\api\v0\logs\file?submission_id=other", "nul\0id", "y" * 100_000, "<b>x</b>", "a b"]:
        status, text = submit(head, {"entrypoint": "true", "submission_id": bad})
        assert status == 400 and "not a valid id" in text, (bad[:40], status, text[:300])
    status, text = http_call("GET", f"{head.dashboard_url}/api/jobs/", token=head.token)
    assert status == 200 and json.loads(text) == [], "nothing was recorded"
    status, text = submit(head, {"entrypoint": "true", "submission_id": "raysubmit_Ok-1.2"})
    assert status == 200 and json.loads(text)["submission_id"] == "raysubmit_Ok-1.2", text


def test_commands_and_variables_that_could_never_run_are_400_naming_the_field(head):
    status, text = submit(head, {"entrypoint": "echo " + "x" * 1_900_000})
    assert status == 400 and "entrypoint is" in text and "bytes" in text, text[:300]
    status, text = submit(head, {"entrypoint": "true", "runtime_env": {"env_vars": {"A=B": "1"}}})
    assert status == 400 and "env_vars" in text and "A=B" in text, text


def test_two_submits_with_one_id_never_both_run_and_no_reservation_leaks(head):
    rounds, winners = 40, []
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for i in range(rounds):
            body = {"entrypoint": "true", "submission_id": f"race-{i}", "entrypoint_num_cpus": 1}
            replies = list(pool.map(lambda b: submit(head, b), [body, body]))
            accepted = [r for r in replies if r[0] == 200]
            refused = [r for r in replies if r[0] != 200]
            assert len(accepted) == 1 and "already exists" in refused[0][1], (i, replies)
            winners.append(f"race-{i}")
    client = jobs_client(head)
    for job_id in winners:
        assert wait_job_terminal(client, job_id) == JobStatus.SUCCEEDED, client.get_job_info(job_id)
    # Every reservation was given back: a job that needs both of the head's CPUs still starts.
    whole = client.submit_job(entrypoint="true", entrypoint_num_cpus=2)
    assert wait_job_terminal(client, whole) == JobStatus.SUCCEEDED


def test_a_reused_id_starts_a_log_of_its_own(head):
    client = jobs_client(head)
    first = client.submit_job(entrypoint="echo from-the-first-job", submission_id="reused")
    assert wait_job_terminal(client, first) == JobStatus.SUCCEEDED
    assert "from-the-first-job" in client.get_job_logs(first)
    client.delete_job(first)
    again = client.submit_job(entrypoint="echo from-the-second-job", submission_id="reused")
    assert wait_job_terminal(client, again) == JobStatus.SUCCEEDED
    logs = wait_until("the second job's output", lambda: client.get_job_logs(again) or None)
    assert "from-the-second-job" in logs and "from-the-first-job" not in logs, logs
