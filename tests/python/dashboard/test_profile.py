"""Live profiling from the dashboard, in headless Chromium: a busy actor's
Python stack now and a CPU flame graph over two seconds, both naming the
function it is busy in, taken by py-spy on its node; and the API refusing a
process that is not a worker, or a kind it does not know."""

import base64
import re
import time

import pytest
from playwright.sync_api import expect

import oxray as ray
from oxray_testutil import http_call

pytestmark = pytest.mark.timeout(180)


@ray.remote
class Busy:
    def spin_hot_loop(self, seconds):
        deadline = time.monotonic() + seconds
        n = 0
        while time.monotonic() < deadline:
            n += 1
        return n

    def pid(self):
        import os

        return os.getpid()


def test_a_busy_actors_stack_and_flame_graph_name_where_it_spins(head, browser, screenshots, console_errors):
    ray.init(address=head.address)
    busy = Busy.options(max_concurrency=2, name="busy").remote()
    pid = ray.get(busy.pid.remote())
    busy.spin_hot_loop.remote(60)  # runs out on its own: actor calls are not force-cancelled
    page = browser.new_context().new_page()
    errors = console_errors(page)
    page.goto(f"{head.dashboard_url}/?token={head.token}")
    page.goto(f"{head.dashboard_url}/actors")
    page.locator("#actors tr", has_text="busy").locator("a.profile").click()
    expect(page).to_have_url(re.compile(rf"/profile\?.*pid={pid}"))
    page.click("#take-stacks")
    expect(page.locator("#stacks")).to_contain_text("spin_hot_loop", timeout=30_000)
    page.fill("#seconds", "2")
    page.click("#take-flamegraph")
    graph = page.locator("#flamegraph")
    expect(graph).to_be_visible(timeout=60_000)
    svg = base64.b64decode(graph.get_attribute("src").split(",", 1)[1]).decode()
    assert "<svg" in svg and "spin_hot_loop" in svg
    page.screenshot(path=screenshots("profile"), full_page=True)
    # A running task's worker is reached from the tasks table the same way.
    page.goto(f"{head.dashboard_url}/tasks?state=RUNNING")
    page.locator("#tasks tr", has_text="Busy.spin_hot_loop").locator("a.profile").click()
    page.click("#take-stacks")
    expect(page.locator("#stacks")).to_contain_text("spin_hot_loop", timeout=30_000)
    assert errors.seen == []

    node = next(n["NodeID"] for n in ray.nodes())
    url, token = head.dashboard_url, head.token
    status, text = http_call("GET", f"{url}/api/oxray/profile?node_id={node}&pid=1", token=token)
    assert status == 400 and "not a worker of this node" in text
    status, text = http_call("GET", f"{url}/api/oxray/profile?node_id={node}&pid={pid}&kind=perf", token=token)
    assert status == 400 and "expected dump or flamegraph" in text
    status, text = http_call(
        "GET", f"{url}/api/oxray/profile?node_id={node}&pid={pid}&kind=flamegraph&duration=99", token=token
    )
    assert status == 400 and "1 to 60 seconds" in text
