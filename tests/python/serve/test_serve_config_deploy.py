"""Deploying by config through the head's Serve REST API, driven by Ray's own `serve` CLI
(`ray[serve]` 2.60, unmodified) against an oxray head started with `oxray start --head`: deploy
a config whose application is imported from a module, reach it over HTTP, read `serve status`
and `serve config`, redeploy without it, see an import error fail only its application, and
shut Serve down."""

import http.client
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from cli_cluster import free_port, running_cluster
from oxray_testutil import http_call, wait_until
from oxray_testutil import http_get_local as fetch

pytestmark = [pytest.mark.timeout(300)]
SERVE = shutil.which("serve", path=os.path.dirname(sys.executable))
if SERVE is None:
    pytest.skip("Ray's `serve` CLI (ray[serve]) is not installed", allow_module_level=True)
yaml = pytest.importorskip("yaml")


APP_MODULE = textwrap.dedent(
    """
    from oxray import serve

    @serve.deployment
    class Greeter:
        def __init__(self, greeting):
            self.greeting = greeting

        def __call__(self, request):
            return f"{self.greeting}, {request.query_params.get('name', 'world')}"

    app = Greeter.bind("hello")

    def builder(args):
        return Greeter.bind(args["greeting"])

    @serve.deployment(user_config={"greeting": "hi"})
    class Configured:
        def __init__(self):
            import os

            self.pid, self.greeting = os.getpid(), None

        def reconfigure(self, config):
            self.greeting = config["greeting"]

        def __call__(self, request):
            return f"{self.greeting} from {self.pid}"

    configured = Configured.bind()
    """
)


@pytest.fixture
def head(tmp_path, monkeypatch):
    code = tmp_path / "code"
    code.mkdir()
    (code / "greeting_app.py").write_text(APP_MODULE)
    env = {"PYTHONPATH": f"{code}:{os.environ.get('PYTHONPATH', '')}"}
    with running_cluster(tmp_path / "oxray", monkeypatch, env=env) as cluster:
        cluster.start_head(num_cpus=4)
        yield cluster


def serve_cli(head, *args, check=True):
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": head.token}
    done = subprocess.run(
        [SERVE, *args, "--address", head.dashboard_url], env=env, capture_output=True, text=True, timeout=120
    )
    if check:
        assert done.returncode == 0, f"serve {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done


def status(head):
    return yaml.safe_load(serve_cli(head, "status").stdout)


def test_rays_serve_cli_deploys_to_an_oxray_head(head, tmp_path):
    port = free_port()
    config = {
        "http_options": {"host": "127.0.0.1", "port": port},
        "applications": [
            {"name": "greet", "route_prefix": "/greet", "import_path": "greeting_app:app"},
            {
                "name": "built",
                "route_prefix": "/built",
                "import_path": "greeting_app:builder",
                "args": {"greeting": "hi"},
                "deployments": [{"name": "Greeter", "num_replicas": 2}],
            },
        ],
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    serve_cli(head, "deploy", str(path))

    def running():
        apps = status(head)["applications"]
        return all(apps.get(name, {}).get("status") == "RUNNING" for name in ("greet", "built"))

    wait_until(lambda: f"both applications RUNNING: {status(head)}", running, timeout=120)
    assert fetch(port, "/greet?name=ray") == (200, b"hello, ray")
    assert fetch(port, "/built") == (200, b"hi, world")
    assert fetch(port, "/nowhere")[0] == 404
    # The proxy's series, under Ray's names, on the node's /metrics.
    _, body = http_call("GET", f"{head.dashboard_url}/api/prometheus/sd", token=head.token)
    [target] = json.loads(body)[0]["targets"]
    text = http_call("GET", f"http://{target}/metrics", token=head.token)[1]
    greeted = 'route="/greet",method="GET",application="greet",status_code="200"'
    assert f"ray_serve_num_http_requests_total{{{greeted}}} 1" in text
    assert 'ray_serve_num_http_error_requests_total{route="",error_code="404",method="GET",application=""} 1' in text
    built = 'route="/built",method="GET",application="built",status_code="200"'
    assert f"ray_serve_http_request_latency_ms_count{{{built}}} 1" in text
    apps = status(head)["applications"]
    assert apps["built"]["deployments"]["Greeter"]["replica_states"] == {"RUNNING": 2}
    configs = list(yaml.safe_load_all(serve_cli(head, "config").stdout))
    assert {c["name"]: c["import_path"] for c in configs} == {
        "greet": "greeting_app:app",
        "built": "greeting_app:builder",
    }

    # A new config without `built`, and an application whose import fails: only it fails.
    config["applications"] = [
        config["applications"][0],
        {"name": "broken", "route_prefix": "/broken", "import_path": "no_such_module:app"},
    ]
    path.write_text(yaml.safe_dump(config))
    serve_cli(head, "deploy", str(path))
    wait_until(
        lambda: f"broken failed and built gone: {status(head)}",
        lambda: (
            (apps := status(head)["applications"]).get("broken", {}).get("status") == "DEPLOY_FAILED"
            and "built" not in apps
        ),
        timeout=120,
    )
    assert "No module named 'no_such_module'" in status(head)["applications"]["broken"]["message"]
    assert fetch(port, "/greet") == (200, b"hello, world")

    serve_cli(head, "shutdown", "-y")
    wait_until(lambda: "Serve gone", lambda: status(head)["applications"] == {}, timeout=60)


def test_a_bad_config_is_a_400_naming_the_problem(head, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"applications": [{"name": "a", "route_prefix": "/a"}]}))
    done = serve_cli(head, "deploy", str(path), check=False)
    assert done.returncode != 0
    assert "import_path" in done.stdout + done.stderr


def test_the_rest_api_needs_the_token(head):
    conn = http.client.HTTPConnection("127.0.0.1", int(head.dashboard_url.rsplit(":", 1)[1]), timeout=30)
    conn.request("GET", "/api/serve/applications/")
    assert conn.getresponse().status == 401
    conn.close()
    conn = http.client.HTTPConnection("127.0.0.1", int(head.dashboard_url.rsplit(":", 1)[1]), timeout=30)
    conn.request("GET", "/api/serve/applications/", headers={"Authorization": f"Bearer {head.token}"})
    response = conn.getresponse()
    assert response.status == 200
    assert json.loads(response.read()) == {
        "controller_info": {},
        "proxies": {},
        "applications": {},
        "target_capacity": None,
    }


def test_oxrays_own_serve_commands(head, tmp_path):
    """`oxray serve deploy|status|config|shutdown` over the same REST API; `build` writes a config."""
    env = {**head.env, "OXRAY_TOKEN": head.token}

    def oxray_serve(*args):
        done = subprocess.run(
            [sys.executable, "-m", "oxray.scripts.cli", "serve", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=str(tmp_path),
        )
        assert done.returncode == 0, f"oxray serve {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    code_dir = head.env["PYTHONPATH"].split(":")[0]
    built = yaml.safe_load(
        subprocess.run(
            [sys.executable, "-m", "oxray.scripts.cli", "serve", "build", "greeting_app:app"],
            env={**env, "PYTHONPATH": f"{code_dir}:{env.get('PYTHONPATH', '')}"},
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout
    )
    assert built["applications"] == [
        {
            "name": "app1",
            "route_prefix": "/",
            "import_path": "greeting_app:app",
            "runtime_env": {},
            "deployments": [{"name": "Greeter"}],
        }
    ]
    port = free_port()
    built["http_options"] = {"host": "127.0.0.1", "port": port}
    path = tmp_path / "built.yaml"
    path.write_text(yaml.safe_dump(built))
    address = ["--address", head.dashboard_url]
    assert "Sent deploy request" in oxray_serve("deploy", str(path), *address)
    wait_until(
        lambda: "app1 RUNNING",
        lambda: (
            yaml.safe_load(oxray_serve("status", *address))["applications"].get("app1", {}).get("status") == "RUNNING"
        ),
        timeout=120,
    )
    assert fetch(port, "/") == (200, b"hello, world")
    assert yaml.safe_load(oxray_serve("config", *address))["import_path"] == "greeting_app:app"
    oxray_serve("shutdown", "-y", *address)
    wait_until(
        lambda: "Serve gone",
        lambda: yaml.safe_load(oxray_serve("status", *address))["applications"] == {},
        timeout=60,
    )


def test_a_config_change_applies_in_place_unless_replicas_must_restart(head, tmp_path):
    """As Ray's lightweight updates: a new `num_replicas` and `user_config` keep the running
    replica (reconfigured), a new `ray_actor_options` replaces the replicas."""
    port = free_port()

    def deploy(**options):
        deployment = {"name": "Configured", **options}
        app = {"name": "conf", "route_prefix": "/conf", "import_path": "greeting_app:configured"}
        config = {"http_options": {"port": port}, "applications": [{**app, "deployments": [deployment]}]}
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        serve_cli(head, "deploy", str(path))

    def answers():
        """What the replicas answer, by pid: ``{pid: greeting}``, once RUNNING."""
        seen = {}
        for _ in range(30):
            status, body = fetch(port, "/conf")
            if status != 200:
                return {}
            greeting, pid = body.decode().split(" from ")
            seen[pid] = greeting
        return seen

    def running(replicas):
        app = status(head)["applications"].get("conf", {})
        states = app.get("deployments", {}).get("Configured", {}).get("replica_states")
        return app.get("status") == "RUNNING" and states == {"RUNNING": replicas}

    deploy(num_replicas=1, user_config={"greeting": "hello"})
    wait_until(lambda: f"one replica: {status(head)}", lambda: running(1), timeout=120)
    [(first, greeting)] = answers().items()
    assert greeting == "hello"

    deploy(num_replicas=2, user_config={"greeting": "hey"})
    seen = wait_until(
        lambda: f"two replicas saying hey: {status(head)}",
        lambda: running(2) and (seen := answers()) and set(seen.values()) == {"hey"} and len(seen) == 2 and seen,
        timeout=120,
    )
    assert first in seen, f"the first replica ({first}) was reconfigured, not replaced: {seen}"

    deploy(num_replicas=2, user_config={"greeting": "hey"}, ray_actor_options={"num_cpus": 0.5})
    replaced = wait_until(
        lambda: f"new replicas: {status(head)}",
        lambda: running(2) and (now := answers()) and len(now) == 2 and not set(now) & set(seen) and now,
        timeout=120,
    )
    assert set(replaced.values()) == {"hey"}
