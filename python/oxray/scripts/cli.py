"""The `oxray` command: start, stop and inspect a cluster on this host."""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time

import psutil

from oxray._private import node_files
from oxray.scripts import job_cli, serve_cli, state_cli

DEFAULT_PORT = 6379


def _fail(message: str) -> "NoReturn":  # noqa: F821
    print(f"oxray: error: {message}", file=sys.stderr)
    sys.exit(1)


def _resources(text):
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except ValueError as e:
        _fail(f"--resources={text!r} is not valid JSON ({e}); expected e.g. '{{\"node_b\": 1}}'")
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
        for k, v in value.items()
    ):
        _fail(f"--resources={text!r} must be a JSON object of resource name -> number >= 0")
    if "CPU" in value or "GPU" in value:
        _fail("use --num-cpus / --num-gpus instead of CPU or GPU in --resources")
    return {k: float(v) for k, v in value.items()}


_NOT_A_PAIR = "Label string is not a key-value pair."  # Ray's words, which its tests and users look for


def _labels(text):
    """`--labels`: Ray's `key1=value1,key2=value2` (quotes around it are dropped), or a JSON
    object of strings. As in Ray, custom labels may not use the `ray.io/` prefix."""
    if not text:
        return {}
    expected = "Expected key=value pairs separated by commas (e.g. 'zone=us-west,tier=gpu') or a JSON object of strings"
    if text.lstrip().startswith("{"):
        try:
            value = json.loads(text)
        except ValueError as e:
            _fail(f"--labels={text!r}: {_NOT_A_PAIR} It is not valid JSON ({e}). {expected}")
    else:
        if len(text) > 1 and text.startswith('"') and text.endswith('"'):
            text = text[1:-1]
        pairs = [p.split("=") for p in text.split(",")] if text else []
        if any(len(pair) != 2 or not pair[0].strip() for pair in pairs):
            _fail(f"--labels={text!r}: {_NOT_A_PAIR} {expected}")
        value = {k.strip(): v.strip() for k, v in pairs}
    return _checked_labels(value, f"--labels={text!r}")


def _checked_labels(value, what: str) -> dict:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        _fail(f"{what}: {_NOT_A_PAIR} It must map label names to string values")
    reserved = sorted(k for k in value if k.startswith("ray.io/"))
    if reserved:
        _fail(f"{what}: {_NOT_A_PAIR} {', '.join(reserved)} use the prefix ray.io/, which only Ray's own labels use")
    return value


def _labels_file(path):
    """`--labels-file`: a YAML (or JSON) file mapping label names to string values, as in Ray."""
    if not path:
        return {}
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        _fail(f"--labels-file={path!r}: cannot read it ({e.strerror})")
    try:
        import yaml
    except ImportError:
        yaml = None
    try:
        value = yaml.safe_load(text) if yaml is not None else json.loads(text)
    except Exception as e:  # noqa: BLE001 - yaml's and json's parse errors alike
        hint = "" if yaml is not None else " (without pyyaml installed, the file must be JSON: pip install pyyaml)"
        _fail(f"--labels-file={path!r} is not a YAML mapping of labels{hint}: {e}")
    return _checked_labels(value, f"--labels-file={path!r}")


def _port(text: str) -> int:
    """An argparse type: a TCP port number, 0 meaning "pick a free one"."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number: expected an integer in 0-65535")
    return port


def _token_from_args(args) -> "str | None":
    """The token from --token-file (a path, or - for stdin), --token, or OXRAY_TOKEN."""
    if args.token_file == "-":
        token = sys.stdin.readline().strip()
        if not token:
            _fail("--token-file -: no token on stdin")
        return token
    if args.token_file:
        try:
            token = node_files.read_token_file(args.token_file)
        except OSError as e:
            _fail(f"--token-file {args.token_file}: {e}")
        if token is None:
            _fail(f"--token-file {args.token_file}: no such file, or it is empty")
        return token
    if args.token:
        print(
            "oxray: warning: --token leaves the token in this command's argv, where any local user sees it "
            "(`ps`); use --token-file PATH, --token-file - (stdin) or OXRAY_TOKEN instead",
            file=sys.stderr,
        )
        return args.token
    return os.environ.get("OXRAY_TOKEN") or None


def _port_in_use(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


_TLS_FLAGS = {
    "tls_cert": "OXRAY_TLS_CERT",
    "tls_key": "OXRAY_TLS_KEY",
    "tls_ca": "OXRAY_TLS_CA",
}


def _apply_tls(args) -> None:
    """Puts the --tls-* options into this process's environment, where the node
    (in this process or the one it spawns) and every worker it starts read them."""
    for name, var in _TLS_FLAGS.items():
        path = getattr(args, name)
        if path is None:
            continue
        if not os.path.isfile(path):
            _fail(f"--{name.replace('_', '-')}={path!r} is not a readable file; expected a PEM file")
        os.environ[var] = os.path.abspath(path)
    if args.tls_client_auth is not None:
        os.environ["OXRAY_TLS_CLIENT_AUTH"] = args.tls_client_auth


def _start(args) -> None:
    _apply_tls(args)
    node_files.ensure_temp_root()
    host = args.node_ip_address or "127.0.0.1"
    config = {
        "host": host,
        "metrics_export_port": args.metrics_export_port,
        "num_cpus": args.num_cpus,
        "num_gpus": args.num_gpus,
        "resources": _resources(args.resources),
        "labels": {**_labels_file(args.labels_file), **_labels(args.labels)},
        "object_store_memory": args.object_store_memory,
    }
    if args.head:
        port = DEFAULT_PORT if args.port is None else args.port
        if _port_in_use(host, port):
            _fail(
                f"port {port} on {host} is already in use, so the head cannot listen there. "
                f"Stop what uses it (`oxray stop` if it is an earlier oxray), or pick another with --port."
            )
        if args.dashboard_port and _port_in_use(args.dashboard_host, args.dashboard_port):
            _fail(
                f"port {args.dashboard_port} on {args.dashboard_host} is already in use, so the head's HTTP server "
                f"(Jobs API, dashboard) cannot listen there: pick another with --dashboard-port (0 picks a free one)"
            )
        config.update(dashboard_host=args.dashboard_host, dashboard_port=args.dashboard_port)
        state_dir = os.path.abspath(args.state_dir or node_files.default_state_dir())
        given = _token_from_args(args)
        token = given or node_files.read_or_create_token(state_dir)
        config.update(port=port, state_dir=state_dir, token=token, token_file=os.path.join(state_dir, "token"))
        if given:
            node_files.write_private(config["token_file"], token)
    else:
        current = node_files.read_current_cluster()
        token = _token_from_args(args)
        if not token and current and current.get("address") == args.address:
            token = node_files.read_token_file(current.get("token_file"))
        if not token:
            _fail(
                f"joining {args.address} needs the cluster token: pass --token-file PATH (or - for stdin) "
                "or set OXRAY_TOKEN (the head keeps it in <state dir>/token on its host)"
            )
        config.update(join=args.address, port=args.port or 0, token=token)
    if args.block:
        from oxray._private import node_main

        sys.exit(node_main.run(config, on_ready=lambda record: _print_started(args, record, config)))
    log_path = os.path.join(node_files.ensure_temp_root(), f"node-start-{os.getpid()}.log")
    with open(os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600), "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "oxray._private.node_main"],
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            text=True,
        )
        proc.stdin.write(json.dumps(config) + "\n")
        proc.stdin.close()
    deadline = time.time() + 60
    record_path = os.path.join(node_files.nodes_dir(), f"{proc.pid}.json")
    while time.time() < deadline:
        if os.path.exists(record_path):
            with open(record_path) as f:
                _print_started(args, json.load(f), config)
            return
        if proc.poll() is not None:
            with open(log_path) as f:
                output = f.read().strip()
            _fail(output.splitlines()[-1] if output else f"the node process exited with code {proc.returncode}")
        time.sleep(0.05)
    proc.kill()
    _fail(f"the node did not start within 60 s; see {log_path}")


def _print_started(args, record, config) -> None:
    print(f"Local node IP: {config['host']}")
    print("--------------------")
    print("oxray runtime started.")
    print("--------------------")
    if record["head"]:
        address = record["head_address"]
        print("Next steps")
        print("  To add another node to this cluster, copy the token file " + config["token_file"])
        print("  to that host (keep it private: chmod 600) and run there:")
        print(f"    oxray start --address='{address}' --token-file=<the copied token file>")
        print("  To connect to this cluster from Python on this host:")
        print("    import oxray as ray")
        print("    ray.init()")
        if record.get("dashboard_url"):
            print(f"  Jobs API (and dashboard) at {record['dashboard_url']}; the token it asks for:")
            print("    oxray get-auth-token")
            # The login link carries the token: printed only when asked for, never into a log by default.
            print("  A link that logs a browser in (it carries the token: keep it private):")
            print("    oxray dashboard-url")
        print("  To see the cluster's nodes and resources:")
        print("    oxray status")
        print("  To stop oxray on this host:")
        print("    oxray stop")
    else:
        print(
            f"This node ({record['node_id'][:8]}, at {record['address']}) "
            f"joined the cluster at {record['head_address']}."
        )
        print("  To stop oxray on this host: oxray stop")
    sys.stdout.flush()


def _stop(args) -> None:
    # A recorded pid counts only while it is the process that wrote the record
    # (same start time): a pid reused by another process is never signalled.
    records = node_files.node_records()
    procs = [p for p in (node_files.same_process(r["pid"], r.get("create_time")) for r in records) if p]
    sig = signal.SIGKILL if args.force else signal.SIGTERM
    for proc in procs:
        try:
            proc.send_signal(sig)
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=args.grace_period)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)
    for r in records:
        if node_files.same_process(r["pid"], r.get("create_time")) is None:
            try:
                os.unlink(os.path.join(node_files.nodes_dir(), f"{r['pid']}.json"))
            except FileNotFoundError:
                pass
    if node_files.read_current_cluster() is None:
        try:
            os.unlink(node_files.current_cluster_file())
        except FileNotFoundError:
            pass
    print(f"Stopped {len(procs)} oxray node process(es).")


def _dashboard_url() -> None:
    """The local cluster's dashboard login link, which carries the token (asked for, so printed)."""
    current = node_files.find_local_cluster(None)
    url = (current or {}).get("dashboard_url")
    if not url:
        _fail(
            "no cluster with a dashboard on this host: start one with `oxray start --head` "
            "(or init(include_dashboard=True))"
        )
    token = node_files.read_token_file(current.get("token_file"))
    if not token:
        _fail(f"cannot read the token of the cluster at {url}: `oxray get-auth-token` says why")
    url = url if "://" in url else f"http://{url}"
    print(f"{url}/?token={token}")


def _get_auth_token() -> None:
    token = os.environ.get("OXRAY_TOKEN")
    if not token:
        current = node_files.find_local_cluster(None)
        token = node_files.read_token_file((current or {}).get("token_file"))
    if not token:
        _fail("no cluster on this host to print the token of: start one with `oxray start --head` (or set OXRAY_TOKEN)")
    print(token)


def _fmt_amount(name: str, value: float) -> str:
    if name in ("memory", "object_store_memory"):
        return f"{value / 2**30:.2f}GiB"
    return f"{value:g}"


def _own_resource(name: str) -> bool:
    """A node's own resource, as `oxray status` lists them: not its `node:` marker, nor the
    names of the placement-group bundles it holds."""
    from oxray import _native

    return not name.startswith("node:") and not _native.is_placement_group_resource(name)


def _status(args) -> None:
    from oxray import _native

    # The cluster `oxray start` runs here, else one a driver's init() started.
    current = node_files.find_local_cluster(args.address or os.environ.get("OXRAY_ADDRESS"))
    address = args.address or os.environ.get("OXRAY_ADDRESS") or (current or {}).get("address")
    if not address:
        _fail("no cluster found on this host: start one with `oxray start --head`, or pass --address")
    token = os.environ.get("OXRAY_TOKEN") or node_files.read_token_file((current or {}).get("token_file"))
    if not token:
        _fail(f"reading the status of {address} needs the cluster token: set OXRAY_TOKEN")
    try:
        nodes = _native.Client(address, token).cluster_info()
    except Exception as e:
        _fail(f"cannot reach the cluster at {address}: {e}")
    print(f"======== Cluster status: {time.strftime('%Y-%m-%d %H:%M:%S')} ========")
    print("Node status")
    print("-" * 60)
    for title, alive in (("Active", True), ("Dead", False)):
        group = [n for n in nodes if n.alive == alive]
        print(f"{title}:")
        if not group:
            print(" (no nodes)")
        for n in group:
            role = ", head" if n.is_head else ""
            print(f" 1 node_{n.node_id} ({n.address}{role})")
    print()
    print("Resources")
    print("-" * 60)
    live = [n for n in nodes if n.alive]
    names = sorted({k for n in live for k in n.total if _own_resource(k)})
    print("Total Usage:")
    for name in names:
        total = sum(n.total.get(name, 0.0) for n in live)
        used = total - sum(n.available.get(name, 0.0) for n in live)
        print(f" {_fmt_amount(name, used)}/{_fmt_amount(name, total)} {name}")
    print()
    print("Per node:")
    for n in live:
        print(f" node_{n.node_id} ({n.address}):")
        for name in sorted(k for k in n.total if _own_resource(k)):
            total = n.total[name]
            used = total - n.available.get(name, 0.0)
            print(f"  {_fmt_amount(name, used)}/{_fmt_amount(name, total)} {name}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="oxray", description="Start, stop and inspect an oxray cluster.")
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="start a head (--head) or join a node to a cluster (--address)")
    role = start.add_mutually_exclusive_group(required=True)
    role.add_argument("--head", action="store_true", help="start the head and a node agent on this host")
    role.add_argument("--address", help="the head's HOST:PORT, to join this host to its cluster")
    start.add_argument(
        "--port", type=_port, help=f"head port (default {DEFAULT_PORT}); with --address, this node's port"
    )
    start.add_argument(
        "--dashboard-port", type=_port, default=8265, help="the head's HTTP port: Jobs API, dashboard (default 8265)"
    )
    start.add_argument(
        "--dashboard-host",
        default="127.0.0.1",
        help="address the head's HTTP server listens on (default 127.0.0.1; anything else exposes it)",
    )
    start.add_argument(
        "--metrics-export-port",
        type=_port,
        default=0,
        help="this node's Prometheus /metrics port, behind the cluster token (default: a free one)",
    )
    start.add_argument("--num-cpus", type=float, help="CPUs this node offers (default: all)")
    start.add_argument("--num-gpus", type=int, help="GPUs this node offers (default: detected)")
    start.add_argument("--resources", help="custom resources as JSON, e.g. '{\"node_b\": 1}'")
    start.add_argument("--labels", help="node labels, e.g. 'zone=us-west,tier=gpu' (or a JSON object)")
    start.add_argument("--labels-file", help="a YAML file mapping node label names to values (--labels wins)")
    start.add_argument("--object-store-memory", type=int, help="bytes of shared memory for objects")
    start.add_argument(
        "--node-ip-address", help="address to listen on (default 127.0.0.1; anything else exposes the node)"
    )
    token = start.add_mutually_exclusive_group()
    token.add_argument(
        "--token-file",
        metavar="PATH",
        help="a file (mode 0600) holding the cluster token, or - to read it from stdin "
        "(default: OXRAY_TOKEN, else the head's state dir)",
    )
    token.add_argument("--token", help="the cluster token (deprecated: visible in `ps`; use --token-file)")
    start.add_argument("--state-dir", help="the head's state directory (kept across restarts)")
    start.add_argument("--block", action="store_true", help="stay in the foreground until interrupted")
    tls = start.add_argument_group("TLS", "encrypt every connection (or set OXRAY_TLS_CERT/KEY/CA on every host)")
    tls.add_argument("--tls-cert", help="this node's certificate (PEM)")
    tls.add_argument("--tls-key", help="the certificate's private key (PEM)")
    tls.add_argument("--tls-ca", help="the CA (PEM) that signed the cluster's certificates")
    tls.add_argument(
        "--tls-client-auth",
        choices=("none", "require"),
        help="require: mutual TLS, refuse clients without a certificate the CA signed (default none)",
    )
    stop = sub.add_parser("stop", help="stop every oxray node this host started")
    stop.add_argument("-f", "--force", action="store_true", help="SIGKILL at once")
    stop.add_argument("-g", "--grace-period", type=float, default=10.0, help="seconds to wait before SIGKILL")
    sub.add_parser(
        "get-auth-token", help="print the token of the cluster on this host (for RAY_AUTH_TOKEN or the dashboard)"
    )
    sub.add_parser(
        "dashboard-url",
        help="print a link that logs a browser into this host's cluster's dashboard (it carries the token)",
    )
    job_cli.add_parser(sub)
    serve_cli.add_parser(sub)
    state_cli.add_parser(sub)
    status = sub.add_parser("status", help="nodes and resources of the cluster")
    status.add_argument("--address", help="the head's HOST:PORT (default: the cluster started on this host)")
    args = parser.parse_args(argv)
    try:
        _run(args)
    except node_files.InsecurePathError as e:
        _fail(str(e))


def _run(args) -> None:
    if args.command == "start":
        for name in ("num_cpus", "num_gpus", "object_store_memory"):
            value = getattr(args, name)
            if value is not None and value < 0:
                _fail(f"--{name.replace('_', '-')}={value} must be >= 0")
        _start(args)
    elif args.command == "stop":
        _stop(args)
    elif args.command == "get-auth-token":
        _get_auth_token()
    elif args.command == "dashboard-url":
        _dashboard_url()
    elif args.command == "job":
        job_cli.run(args)
    elif args.command == "serve":
        serve_cli.run(args)
    elif args.command in ("list", "summary", "logs"):
        state_cli.run(args)
    else:
        _status(args)


if __name__ == "__main__":
    main()
