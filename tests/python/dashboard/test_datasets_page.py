"""The Datasets page in headless Chromium: a dataset's operators (rows in and
out, bytes, rows/s, blocks in flight), the memory it holds and the time it
waits on its consumer, shown while it streams and once it has ended; and
Ray's `/api/data/datasets/{job_id}` listing the same execution."""

import json
import threading
import time

import pytest
from playwright.sync_api import expect

import oxray as ray
from oxray_testutil import http_call

pytestmark = pytest.mark.timeout(180)


def slow_double(batch):
    time.sleep(0.02)
    return {"id": batch["id"] * 2}


def test_a_streaming_datasets_operators_are_shown_while_it_runs(head, browser, screenshots, console_errors):
    ray.init(address=head.address)
    ds = ray.data.range(2000, override_num_blocks=20).map_batches(slow_double, batch_size=100)
    first_batch, go_on, done = threading.Event(), threading.Event(), []

    def consume():
        total = 0
        for batch in ds.iter_batches(batch_size=100):
            total += len(batch["id"])
            first_batch.set()
            go_on.wait(60)
        done.append(total)

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    assert first_batch.wait(60)
    page = browser.new_context().new_page()
    errors = console_errors(page)
    page.goto(f"{head.dashboard_url}/?token={head.token}")
    page.click("nav a[href='/datasets']")
    section = page.locator("section.dataset").first
    expect(section.locator(".state")).to_have_text("RUNNING", timeout=30_000)
    # The read and the map run fused, as one operator (Ray's name for it).
    operators = section.locator("table.operators tbody tr")
    expect(operators).to_have_count(1)
    expect(operators.nth(0)).to_contain_text("ReadRange->MapBatches(slow_double)")
    page.screenshot(path=screenshots("datasets"), full_page=True)
    go_on.set()
    consumer.join(60)
    assert done == [2000]
    expect(section.locator(".state")).to_have_text("FINISHED", timeout=30_000)
    expect(section.locator(".rows-emitted")).to_have_text("2000")
    expect(operators.nth(0).locator("td").nth(2)).to_have_text("2000")  # rows out of the map
    assert errors.seen == []

    job_id = ray.get_runtime_context().get_job_id()
    status, body = http_call("GET", f"{head.dashboard_url}/api/data/datasets/{job_id}", token=head.token)
    [listed] = json.loads(body)["datasets"]
    assert status == 200 and listed["state"] == "FINISHED" and listed["progress"] == 2000
    assert [op["operator"] for op in listed["operators"]] == ["ReadRange->MapBatches(slow_double)"]
