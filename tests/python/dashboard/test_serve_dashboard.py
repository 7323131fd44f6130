"""Serve on the dashboard, in headless Chromium: the page says Serve is not started, then shows an
application with its deployment's replicas and their states, and charts its request rate, error
rate and latency from the proxies' counters while requests flow."""

import http.client
import json
import re
import socket
import threading

import pytest
from playwright.sync_api import expect

import oxray as ray
from oxray import serve

pytestmark = pytest.mark.timeout(240)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def traffic(port, stop: threading.Event):
    """Requests until `stop`: most succeed, every fourth fails in user code (a 500)."""
    i = 0
    while not stop.is_set():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", f"/hello?fail={int(i % 4 == 0)}")
        conn.getresponse().read()
        conn.close()
        i += 1


def test_the_serve_page_shows_applications_replicas_and_charts(head, browser, screenshots, console_errors):
    ray.init(address=head.address)
    page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    errors = console_errors(page)
    page.goto(f"{head.dashboard_url}/?token={head.token}")
    expect(page).to_have_url(re.compile(r"/overview$"))
    page.click("nav a[href='/serve']")
    expect(page.locator("#serve-not-started")).to_be_visible()

    @serve.deployment(num_replicas=2, ray_actor_options={"num_cpus": 0.1})
    class Hello:
        def __call__(self, request):
            if request.query_params.get("fail") == "1":
                raise RuntimeError("asked to fail")
            return "hello"

    port = free_port()
    serve.start(http_options={"port": port})
    serve.run(Hello.bind(), name="hello", route_prefix="/hello")
    app_row = page.locator("tr.serve-app[data-app='hello']")
    expect(app_row).to_contain_text("RUNNING", timeout=30_000)
    expect(app_row).to_contain_text("2/2")
    expect(app_row).to_contain_text("/hello")
    deployment_row = page.locator("tr.serve-deployment[data-deployment='Hello']")
    expect(deployment_row).to_contain_text("HEALTHY")
    expect(deployment_row).to_contain_text("2 RUNNING")
    expect(page.locator("#serve-system")).to_contain_text(f"127.0.0.1:{port}")

    stop = threading.Event()
    sender = threading.Thread(target=traffic, args=(port, stop), daemon=True)
    sender.start()
    try:
        for chart in ("serve-qps-chart", "serve-errors-chart", "serve-latency-chart"):
            box = page.locator(f"#{chart}")
            expect(box.locator("canvas")).to_be_visible(timeout=30_000)
            page.wait_for_function(
                "id => { const l = JSON.parse(document.getElementById(id).dataset.latest || '{}');"
                " return typeof l.hello === 'number' && l.hello > 0; }",
                arg=chart,
                timeout=30_000,
            )
        page.screenshot(path=screenshots("serve"), full_page=True)
    finally:
        stop.set()
        sender.join()
    latest = json.loads(page.locator("#serve-qps-chart").get_attribute("data-latest"))
    assert latest["hello"] > 0
    assert errors.seen == []
    serve.shutdown()
