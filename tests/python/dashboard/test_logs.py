"""Every node's session logs: Ray's `/api/v0/logs` listing and `/api/v0/logs/file`
reading (by file, worker pid, actor id or job) and `/api/v0/logs/stream`
following, through `oxray.util.state` and `oxray logs` (Ray's own `get_log`
needs a GCS address, not an HTTP one, so it cannot point at an oxray head);
names outside the log
directories refused; and the Logs pages in Chromium (an actor's log reached
from the actors table, its tail growing live, a search of its lines)."""

import json
import os
import re
import subprocess
import sys

import pytest
from playwright.sync_api import expect

import oxray as ray
from oxray_testutil import http_call, wait_until

pytestmark = pytest.mark.timeout(180)


@ray.remote
class Talker:
    def say(self, text):
        print(text, flush=True)
        return os.getpid()


@ray.remote(resources={"second": 1})
def on_second_node(text):
    print(text, flush=True)
    return os.getpid(), ray.get_runtime_context().get_node_id()


def test_logs_are_listed_and_read_by_file_pid_actor_and_job(head, monkeypatch):
    from oxray.job_submission import JobSubmissionClient
    from oxray.util.state import get_log, list_logs

    head.add_node(num_cpus=1, resources={"second": 1})
    monkeypatch.setenv("OXRAY_TOKEN", head.token)
    monkeypatch.setenv("RAY_ADDRESS", head.dashboard_url)
    ray.init(address=head.address)
    talker = Talker.remote()
    pid = ray.get(talker.say.remote("hello from the actor"))
    actor_id = talker._actor_id.hex()
    remote_pid, remote_node = ray.get(on_second_node.remote("hello from the second node"))
    head_node = next(n["NodeID"] for n in ray.nodes() if n["NodeID"] != remote_node)

    listed = list_logs(node_id=head_node)
    worker_logs = listed["worker_out"]
    assert any(name.endswith(f"-{pid}.log") for name in worker_logs), listed
    assert list_logs(node_id=head_node, glob_filter=f"*-{pid}.log") == {
        "worker_out": [n for n in worker_logs if n.endswith(f"-{pid}.log")]
    }
    by_actor = "".join(get_log(actor_id=actor_id))
    wait_until(
        f"the actor's output in its log (first read: {by_actor!r})",
        lambda: "hello from the actor" in "".join(get_log(actor_id=actor_id)),
        timeout=60,
    )
    by_pid = "".join(get_log(node_id=remote_node, pid=remote_pid))
    assert "hello from the second node" in by_pid, "a worker's log on another node, by pid"
    name = next(n for n in worker_logs if n.endswith(f"-{pid}.log"))
    assert "hello from the actor" in "".join(get_log(node_id=head_node, filename=name, tail=1))

    client = JobSubmissionClient(head.dashboard_url, headers={"Authorization": f"Bearer {head.token}"})
    job = client.submit_job(entrypoint="echo job output here")
    wait_until("the job to end", lambda: client.get_job_status(job).is_terminal(), timeout=60)
    assert "job output here" in "".join(get_log(submission_id=job))

    # Following: the last lines, then what the log gains.
    followed = get_log(actor_id=actor_id, follow=True, tail=1)
    assert "hello from the actor" in next(followed)
    ray.get(talker.say.remote("said while followed"))
    assert "said while followed" in next(followed)
    followed.close()
    with pytest.raises(Exception, match="oxray job logs --follow"):
        next(get_log(submission_id=job, follow=True))

    url, token = head.dashboard_url, head.token
    for bad in ["../state/token", "secret", "/etc/passwd", "logs/../../x"]:
        status, body = http_call("GET", f"{url}/api/v0/logs/file?node_id={head_node}&filename={bad}", token=token)
        assert status == 400 and "not a log file of this node" in body, (bad, status, body)
    # A name of the right shape that is not there is missing, not refused.
    status, body = http_call("GET", f"{url}/api/v0/logs/file?node_id={head_node}&filename=logs/none.log", token=token)
    assert status == 404 and "no log file" in body, (status, body)
    status, body = http_call("GET", f"{url}/api/v0/logs/tail?node_id={head_node}&filename={name}", token=token)
    assert status == 400 and "expected file or stream" in body
    status, body = http_call("GET", f"{url}/api/v0/logs", token=token)
    assert status == 400 and "node id" in json.loads(body)["msg"]
    assert http_call("GET", f"{url}/api/v0/logs?node_id={head_node}")[0] == 401

    cli = [sys.executable, "-m", "oxray.scripts.cli", "logs"]
    printed = subprocess.run(cli + ["--actor-id", actor_id], capture_output=True, text=True, timeout=60)
    assert printed.returncode == 0 and "hello from the actor" in printed.stdout, printed.stderr
    listing = subprocess.run(cli, capture_output=True, text=True, timeout=60)
    assert listing.returncode == 0 and name in listing.stdout and "worker_out:" in listing.stdout, listing.stderr
    refused = subprocess.run(cli + ["--node-id", head_node, "logs/../x.log"], capture_output=True, text=True)
    assert refused.returncode == 1 and "not a log file" in refused.stderr


def test_an_actors_log_tails_live_and_is_searched_in_the_browser(head, browser, screenshots, console_errors):
    ray.init(address=head.address)
    talker = Talker.options(name="talker").remote()
    pid = ray.get(talker.say.remote("first words"))
    page = browser.new_context().new_page()
    errors = console_errors(page)
    page.goto(f"{head.dashboard_url}/?token={head.token}")
    page.goto(f"{head.dashboard_url}/actors")
    page.click(f"#actors a:text('{pid}')")
    expect(page).to_have_url(re.compile(r"/logs/worker\?"))
    tail = page.locator("#log-text")
    expect(tail).to_contain_text("first words")
    ray.get(talker.say.remote("later words"))
    expect(tail).to_contain_text("later words")  # refreshed in place
    page.fill("input[name=q]", "LATER")
    page.click("button[type=submit]")
    expect(page.locator("#log-search tr")).to_have_count(1)
    expect(page.locator("#log-search")).to_contain_text("later words")
    page.screenshot(path=screenshots("log"), full_page=True)
    page.click("nav a[href='/logs']")
    expect(page.locator("table.log-files a", has_text=f"-{pid}.log")).to_have_count(1)
    page.screenshot(path=screenshots("logs"), full_page=True)
    assert errors.seen == []
