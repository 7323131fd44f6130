"""The dashboard in a real browser (headless Debian Chromium through
Playwright): logging in with the token (a wrong one refused), every page
loading with no console error, a job's output tailing live and the job
stopped and deleted from its page, and the actor table filtered as one types."""

import os
import re
import sys

import pytest
from playwright.sync_api import expect

import oxray as ray
from oxray_testutil import RecordingServer, http_call, wait_until

pytestmark = pytest.mark.timeout(240)

PAGES = ["overview", "jobs", "actors", "tasks", "train", "datasets", "charts", "logs"]


def logged_in(browser, cluster):
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{cluster.dashboard_url}/?token={cluster.token}")
    expect(page).to_have_url(re.compile(r"/overview$"))
    return page


def test_logging_in_with_the_token_and_a_wrong_one_refused(head, browser, screenshots):
    page = browser.new_context().new_page()
    page.goto(head.dashboard_url)
    page.screenshot(path=screenshots("login"))
    page.fill("input[name=token]", "not-the-token")
    page.click("button[type=submit]")
    expect(page.locator("form.login .error")).to_have_text("That is not this cluster's token.")
    expect(page).to_have_url(f"{head.dashboard_url}/")
    page.fill("input[name=token]", head.token)
    page.click("button[type=submit]")
    expect(page).to_have_url(re.compile(r"/overview$"))
    expect(page.locator("#nodes-alive")).to_have_text("1")
    expect(page.locator("#nodes tbody tr")).to_have_count(1)
    (cookie,) = page.context.cookies()
    assert cookie["name"] == f"oxray-session-{head.dashboard_port}" and head.token not in cookie["value"]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/"

    fresh = browser.new_context().new_page()
    fresh.goto(f"{head.dashboard_url}/?token=wrong")
    expect(fresh.locator("form.login .error")).to_contain_text("not this cluster's")
    fresh.goto(f"{head.dashboard_url}/actors")
    expect(fresh.locator("form.login")).to_be_visible()


def _other_server(page: str) -> RecordingServer:
    """A web server on another port of this host, serving `page` (HTML) and recording cookies."""
    return RecordingServer(lambda path: ("text/html", page.encode()))


def test_the_cookie_another_port_receives_is_no_token_and_a_logout_ends_the_session(head, browser):
    page = logged_in(browser, head)
    other = _other_server("<p>hello</p>")
    try:
        page.goto(other.url)  # cookies are not bound to a port: this server gets the dashboard's
        cookies = other.sent("Cookie", "")
        assert cookies and all(head.token not in c for c in cookies), cookies
    finally:
        other.close()
    (session,) = page.context.cookies()
    replayed = {"Cookie": f"{session['name']}={session['value']}"}
    assert http_call("GET", f"{head.dashboard_url}/api/version", headers=replayed)[0] == 200
    page.goto(f"{head.dashboard_url}/overview")
    page.click("#logout")
    expect(page.locator("form.login")).to_be_visible()
    assert page.context.cookies() == []
    assert http_call("GET", f"{head.dashboard_url}/api/version", headers=replayed)[0] == 403


def test_a_page_on_another_port_cannot_read_a_jobs_output_over_the_websocket(head, browser, tmp_path):
    from oxray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(head.dashboard_url, headers={"Authorization": f"Bearer {head.token}"})
    job_id = client.submit_job(entrypoint="echo SECRET=hunter2 && sleep 600")
    wait_until("the job's output", lambda: "SECRET=hunter2" in client.get_job_logs(job_id), timeout=60)
    tail = f"ws://127.0.0.1:{head.dashboard_port}/api/jobs/{job_id}/logs/tail"
    evil = _other_server(
        "<pre id=out></pre><script>"
        f"const s = new WebSocket({tail!r});"
        "s.onmessage = (e) => { document.getElementById('out').textContent += e.data; document.title = 'read'; };"
        "s.onclose = () => { if (document.title !== 'read') document.title = 'refused'; };"
        "</script>"
    )
    try:
        page = logged_in(browser, head)
        page.goto(evil.url)
        expect(page).to_have_title(re.compile("read|refused"))  # whichever happens first
        assert page.title() == "refused", page.locator("#out").text_content()
        # The dashboard's own page still tails it.
        page.goto(f"{head.dashboard_url}/jobs/{job_id}")
        expect(page.locator("#job-log")).to_contain_text("SECRET=hunter2")
    finally:
        evil.close()
        client.stop_job(job_id)


def test_every_page_loads_without_console_errors(head, browser, screenshots, console_errors):
    head.add_node(num_cpus=1)
    ray.init(address=head.address)

    @ray.remote
    class Worker:
        def ping(self):
            return os.getpid()

    workers = [Worker.options(name=f"worker-{i}").remote() for i in range(3)]
    ray.get([w.ping.remote() for w in workers])
    page = logged_in(browser, head)
    errors = console_errors(page)
    expect(page.locator("#nodes tbody tr")).to_have_count(2)
    expect(page.locator("#nodes td.cpu-used").first).to_have_text(re.compile(r"^\d+%$"))  # measured, not reserved
    expect(page.locator("#nodes td.store-used").first).to_contain_text("/")
    for name in PAGES:
        page.click(f"nav a[href='/{name}']")  # every page is in the navigation bar
        expect(page).to_have_url(f"{head.dashboard_url}/{name}")
        expect(page.locator("nav a.here")).to_have_attribute("href", f"/{name}")
        page.wait_for_load_state("networkidle")
        if name not in ("train", "datasets", "logs"):  # their own tests take them with something on them
            page.screenshot(path=screenshots(name), full_page=True)
    # The charts draw each node's samples (one line per node).
    page.goto(f"{head.dashboard_url}/charts")
    expect(page.locator("#chart-cpu canvas").first).to_be_visible()
    page.wait_for_function("Number(document.getElementById('charts').dataset.samples) >= 4")
    expect(page.locator("#chart-cpu .u-legend .u-series")).to_have_count(3)  # the time axis and two nodes
    # The refreshing parts swap in with no error either.
    page.goto(f"{head.dashboard_url}/actors")
    with page.expect_response(re.compile(r"/ui/actors")):
        pass
    assert errors.seen == []


def test_a_jobs_output_tails_live_and_the_job_is_stopped_and_deleted(head, browser, tmp_path, screenshots):
    from oxray.job_submission import JobStatus, JobSubmissionClient

    go = tmp_path / "go"
    script = (
        "import os, sys, time\n"
        "print('first line', flush=True)\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.05)\n"
        "print('second line', flush=True)\n"
        "time.sleep(600)\n"
    )
    (tmp_path / "job.py").write_text(script)
    client = JobSubmissionClient(head.dashboard_url, headers={"Authorization": f"Bearer {head.token}"})
    job_id = client.submit_job(entrypoint=f"{sys.executable} job.py", runtime_env={"working_dir": str(tmp_path)})
    page = logged_in(browser, head)
    page.goto(f"{head.dashboard_url}/jobs")
    page.click(f"a[href='/jobs/{job_id}']")
    log = page.locator("#job-log")
    expect(log).to_contain_text("first line")
    expect(log).not_to_contain_text("second line")
    go.write_text("")
    expect(log).to_contain_text("second line")
    expect(page.locator("#job-status")).to_have_text("RUNNING")
    page.screenshot(path=screenshots("job"), full_page=True)
    page.click("#stop-job")
    expect(page.locator("#job-status")).to_have_text("STOPPED", timeout=20_000)
    assert client.get_job_status(job_id) == JobStatus.STOPPED
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#delete-job")
    expect(page).to_have_url(re.compile(r"/jobs$"))
    assert job_id not in [j.submission_id for j in client.list_jobs()]


def test_the_actor_table_filters_as_one_types(head, browser):
    ray.init(address=head.address)

    @ray.remote
    class Shard:
        def ping(self):
            return 1

    shards = [Shard.options(name=f"shard-{i}").remote() for i in range(12)]
    ray.get([s.ping.remote() for s in shards])
    ray.kill(shards[0])
    page = logged_in(browser, head)
    page.goto(f"{head.dashboard_url}/actors")
    rows = page.locator("#actors tbody tr")
    expect(rows).to_have_count(12)
    page.fill("input[name=q]", "shard-1")  # shard-1, shard-10, shard-11
    expect(rows).to_have_count(3)
    page.fill("input[name=q]", "")
    page.select_option("select[name=state]", "DEAD")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("shard-0")


def test_browser_requests_that_change_something_need_the_dashboards_header(head):
    url = f"{head.dashboard_url}/api/jobs/"
    browser_like = {"User-Agent": "Mozilla/5.0", "Content-Type": "application/json"}
    body = b'{"entrypoint": "true"}'
    status, text = http_call("POST", url, token=head.token, body=body, headers=browser_like)
    assert status == 405 and "X-Oxray-Csrf" in text
    forged = {**browser_like, "X-Oxray-Csrf": "1", "Origin": "http://evil.example"}
    assert http_call("POST", url, token=head.token, body=body, headers=forged)[0] == 405
    same_site = {**browser_like, "X-Oxray-Csrf": "1", "Origin": head.dashboard_url}
    status, text = http_call("POST", url, token=head.token, body=body, headers=same_site)
    assert status == 200, text
    for path in ("/overview", "/jobs", "/actors", "/tasks", "/ui/overview", "/ui/tasks"):
        assert http_call("GET", f"{head.dashboard_url}{path}")[0] == 401
        assert http_call("GET", f"{head.dashboard_url}{path}", token="wrong")[0] == 403
        assert http_call("GET", f"{head.dashboard_url}{path}", token=head.token)[0] == 200


def test_the_login_link_is_printed_only_when_asked_for(tmp_path, monkeypatch, browser):
    import shlex
    import subprocess

    from cli_cluster import OXRAY, running_cluster

    with running_cluster(tmp_path / "oxray", monkeypatch) as cluster:
        args = ["start", "--head", "--dashboard-port", str(cluster.dashboard_port), "--port", str(cluster.port)]
        command = " ".join(shlex.quote(a) for a in [*OXRAY, *args, "--num-cpus", "1"])
        # `script` gives the command a terminal, as a person running it has: still no token.
        started = subprocess.run(
            ["script", "-qec", command, "/dev/null"], env=cluster.env, capture_output=True, text=True, timeout=120
        )
        assert started.returncode == 0, started.stdout + started.stderr
        assert cluster.token not in started.stdout and "oxray dashboard-url" in started.stdout, started.stdout
        # init()'s return value (a notebook shows it) holds no token either.
        info = ray.init()
        assert cluster.token not in repr(info) and cluster.token not in repr(vars(info)), info
        link = cluster.cli("dashboard-url").stdout.strip()
        assert link == f"{cluster.dashboard_url}/?token={cluster.token}"
        page = browser.new_context().new_page()
        page.goto(link)
        expect(page).to_have_url(re.compile(r"/overview$"))
        expect(page.locator("#nodes-alive")).to_have_text("1")


def test_markup_in_entrypoints_names_and_output_is_shown_as_text_never_run(head, browser):
    from oxray.job_submission import JobSubmissionClient

    marker = '<img id=injected src=x onerror="document.title=1">'  # no single quote: the shell echoes it whole
    client = JobSubmissionClient(head.dashboard_url, headers={"Authorization": f"Bearer {head.token}"})
    job_id = client.submit_job(entrypoint=f"echo '{marker}' && sleep 600")
    ray.init(address=head.address)

    @ray.remote
    class Named:
        def ping(self):
            return 1

    named = Named.options(name=marker).remote()
    ray.get(named.ping.remote())
    page = logged_in(browser, head)
    try:
        for path in ("/jobs", f"/jobs/{job_id}", "/actors"):
            page.goto(f"{head.dashboard_url}{path}")
            expect(page.get_by_text(marker).first).to_be_visible()  # the markup, as text
            assert page.title() != "1" and page.locator("#injected").count() == 0, path
        page.goto(f"{head.dashboard_url}/jobs/{job_id}")
        expect(page.locator("#job-log")).to_contain_text(marker)
        assert page.title() != "1" and page.locator("#injected").count() == 0
    finally:
        client.stop_job(job_id)
