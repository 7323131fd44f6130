"""`oxray serve run|deploy|status|config|build|shutdown`: Ray's `serve` commands, over the head's
Serve REST API (deploy, status, config, shutdown) or this process as a driver (run, build).
Ray's own `serve` CLI works against an oxray head as well."""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request


def add_parser(sub) -> None:
    serve = sub.add_parser("serve", help="deploy and inspect Serve applications (Ray's `serve` commands)")
    commands = serve.add_subparsers(dest="serve_command", required=True)

    def with_address(p):
        p.add_argument("-a", "--address", help="the head's HTTP address (default: RAY_ADDRESS, else this host's)")
        return p

    deploy = with_address(commands.add_parser("deploy", help="deploy a config file (Ray's ServeDeploySchema)"))
    deploy.add_argument("config_file")
    with_address(commands.add_parser("status", help="the applications' statuses, as YAML"))
    config = with_address(commands.add_parser("config", help="the configs the applications were deployed with"))
    config.add_argument("-n", "--name", help="only this application")
    shutdown = with_address(commands.add_parser("shutdown", help="delete every application and stop Serve"))
    shutdown.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    run = commands.add_parser("run", help="run `module:app` or a config file until Ctrl-C")
    run.add_argument("target", help="an import path (module:app) or a config file")
    run.add_argument("--address", help="a cluster to join (default: start one in this process)")
    run.add_argument("--route-prefix", default="/")
    run.add_argument("--name", default="default")
    run.add_argument("--non-blocking", action="store_true", help="return once the application runs")
    build = commands.add_parser("build", help="print (or write) a config file for applications")
    build.add_argument("import_paths", nargs="+")
    build.add_argument("-o", "--output-path")


def _fail(message: str) -> "NoReturn":  # noqa: F821
    print(f"oxray: error: {message}", file=sys.stderr)
    sys.exit(1)


def _yaml():
    try:
        import yaml
    except ImportError:
        _fail("the serve commands read and write YAML: pip install pyyaml")
    return yaml


def _request(address, method: str, body=None):
    from oxray._private.head_http import auth_error, endpoint, get_json, tls_context

    url, headers = endpoint(address, "Serve's REST API")
    path = "/api/serve/applications/"
    if method == "GET":
        return get_json(url, headers, path)
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"{url}{path}", data=data, method=method, headers={**headers, "Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60, context=tls_context()) as reply:
            return reply.read()
    except urllib.error.HTTPError as e:
        text = e.read().decode(errors="replace")
        if e.code in (401, 403):
            raise auth_error(text) from None
        _fail(f"{method} {path} failed with status {e.code}: {text}")
    except urllib.error.URLError as e:
        _fail(f"cannot reach the cluster's HTTP server at {url}: {e.reason}")


def status_of(details: dict) -> dict:
    """Ray's `serve status` output: proxies, and each application's status and deployments."""
    apps = {}
    for name, app in details.get("applications", {}).items():
        apps[name] = {
            "status": app["status"],
            "message": app["message"],
            "last_deployed_time_s": app["last_deployed_time_s"],
            "deployments": {
                d_name: {
                    "status": d["status"],
                    "status_trigger": d["status_trigger"],
                    "replica_states": _replica_states(d["replicas"]),
                    "message": d["message"],
                }
                for d_name, d in app["deployments"].items()
            },
        }
    return {"proxies": details.get("proxies", {}), "applications": apps, "target_capacity": None}


def _replica_states(replicas: list) -> dict:
    states: dict = {}
    for replica in replicas:
        states[replica["state"]] = states.get(replica["state"], 0) + 1
    return states


def run(args) -> None:
    yaml = _yaml()
    command = args.serve_command
    if command == "deploy":
        try:
            with open(args.config_file) as f:
                config = yaml.safe_load(f)
        except OSError as e:
            _fail(f"cannot read {args.config_file}: {e}")
        _request(args.address, "PUT", config)
        print("Sent deploy request successfully.")
        print(" * Use `oxray serve status` to check applications' statuses.")
        print(" * Use `oxray serve config` to see the current application config(s).")
    elif command == "status":
        print(yaml.safe_dump(status_of(_request(args.address, "GET")), sort_keys=False), end="")
    elif command == "config":
        details = _request(args.address, "GET")
        configs = [
            app["deployed_app_config"]
            for name, app in details.get("applications", {}).items()
            if app.get("deployed_app_config") and (args.name is None or name == args.name)
        ]
        print("\n---\n\n".join(yaml.safe_dump(c, sort_keys=False) for c in configs) or "No configuration was found.")
    elif command == "shutdown":
        if not args.yes:
            answer = input("This will shut down Serve on the cluster: are you sure? [y/N] ")
            if answer.strip().lower() not in ("y", "yes"):
                return
        _request(args.address, "DELETE")
        print("Sent shutdown request; applications will be deleted asynchronously.")
    elif command == "run":
        _run_here(args, yaml)
    elif command == "build":
        _build(args, yaml)


def _run_here(args, yaml) -> None:
    import oxray as ray
    from oxray import serve
    from oxray.serve._private.build import import_attr

    ray.init(address=args.address)
    if args.target.endswith((".yaml", ".yml", ".json")):
        with open(args.target) as f:
            config = yaml.safe_load(f)
        from oxray.serve import api

        ray.get(api._start_controller().apply_config.remote(config))
        names = [a.get("name", "default") for a in config.get("applications") or []]
        _wait_running(serve, names)
    else:
        serve.run(import_attr(args.target), name=args.name, route_prefix=args.route_prefix)
    print("Deployed the application(s); Ctrl-C stops them.", flush=True)
    if args.non_blocking:
        return
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        serve.shutdown()


def _wait_running(serve, names, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        apps = serve.status().applications
        states = {n: apps[n].status if n in apps else "DEPLOYING" for n in names}
        failed = {n: apps[n].message for n, s in states.items() if s == "DEPLOY_FAILED"}
        if failed:
            _fail("\n".join(f"application {n} failed to deploy: {m}" for n, m in failed.items()))
        if all(s == "RUNNING" for s in states.values()):
            return
        if time.monotonic() > deadline:
            _fail(f"the applications are not RUNNING after {timeout_s:g} s: {states}")
        time.sleep(0.1)


def _build(args, yaml) -> None:
    from oxray.serve._private.build import import_attr
    from oxray.serve.deployment import Application

    applications = []
    for i, path in enumerate(args.import_paths):
        app = import_attr(path)
        if not isinstance(app, Application):
            _fail(f"{path} is not an application (serve build takes Model.bind(), not a builder function)")
        name = "app1" if len(args.import_paths) == 1 else f"app{i + 1}"
        applications.append(
            {
                "name": name,
                "route_prefix": "/" if len(args.import_paths) == 1 else f"/{name}",
                "import_path": path,
                "runtime_env": {},
                "deployments": [{"name": app._deployment.name}],
            }
        )
    config = {
        "proxy_location": "EveryNode",
        "http_options": {"host": "0.0.0.0", "port": 8000},
        "applications": applications,
    }
    text = "# This file was generated using the `oxray serve build` command.\n\n" + yaml.safe_dump(
        config, sort_keys=False
    )
    if args.output_path:
        with open(args.output_path, "w") as f:
            f.write(text)
    else:
        print(text, end="")
