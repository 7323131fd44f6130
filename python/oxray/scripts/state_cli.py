"""`oxray list <resource>`, `oxray summary tasks` and `oxray logs`, as Ray's
`ray list`, `ray summary` and `ray logs`: rows and logs from the head's State
API (`oxray.util.state`), printed as a table, as JSON, or as the log's text."""

from __future__ import annotations

import json
import sys

RESOURCES = ("actors", "nodes", "jobs", "placement-groups", "tasks")


def add_parser(sub) -> None:
    listing = sub.add_parser("list", help="list actors, nodes, jobs, placement-groups or tasks (Ray's `ray list`)")
    listing.add_argument("resource", choices=RESOURCES)
    listing.add_argument(
        "--filter",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help='keep rows where KEY=VALUE (or KEY!=VALUE); repeatable, e.g. --filter "state=ALIVE"',
    )
    listing.add_argument("--limit", type=int, default=100, help="at most this many rows (default 100)")
    listing.add_argument("--detail", action="store_true", help="every column, not just the main ones")
    listing.add_argument("--format", choices=("table", "json"), default="table")
    listing.add_argument("--address", help="the head's HTTP address (default: RAY_ADDRESS, else this host's cluster)")
    summary = sub.add_parser("summary", help="tasks counted by function and state (Ray's `ray summary tasks`)")
    summary.add_argument("resource", choices=("tasks",))
    summary.add_argument("--format", choices=("table", "json"), default="table")
    summary.add_argument("--address", help="the head's HTTP address (default: RAY_ADDRESS, else this host's cluster)")
    logs = sub.add_parser("logs", help="list a node's log files, or print one (Ray's `ray logs`)")
    logs.add_argument("glob", nargs="?", help="a file name (printed) or glob (listed); default: list every file")
    logs.add_argument("--node-id", help="the node (default: the head's, or the one --actor-id names)")
    logs.add_argument("--node-ip", help="the node, by address")
    logs.add_argument("--pid", type=int, help="print the log of the worker with this pid")
    logs.add_argument("--actor-id", help="print the log of this actor's worker")
    logs.add_argument("--submission-id", help="print this job's output")
    logs.add_argument("--tail", type=int, default=1000, help="the last N lines (-1: all; default 1000)")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing what the log gains (Ctrl-C ends)")
    logs.add_argument("--address", help="the head's HTTP address (default: RAY_ADDRESS, else this host's cluster)")


def _fail(message: str) -> "NoReturn":  # noqa: F821
    print(f"Error: {message}", file=sys.stderr)
    sys.exit(1)


def parse_filter(text: str):
    """`key=value` or `key!=value` as a (key, predicate, value) filter."""
    for predicate in ("!=", "="):
        key, sep, value = text.partition(predicate)
        if sep and key.strip():
            return key.strip(), predicate, value.strip()
    raise ValueError(f'--filter {text!r}: expected KEY=VALUE or KEY!=VALUE, e.g. --filter "state=ALIVE"')


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return str(value)


def print_table(rows: list) -> None:
    if not rows:
        print("No resource in the cluster matches.")
        return
    columns = [c for c in rows[0] if any(row.get(c) is not None for row in rows)]
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())


def _logs(state, args) -> None:
    wants_file = args.glob and not any(c in args.glob for c in "*?[")
    if args.actor_id or args.submission_id or args.pid is not None or wants_file:
        node_id = args.node_id
        if node_id is None and args.node_ip is None and not (args.actor_id or args.submission_id):
            node_id = next(n.node_id for n in state.list_nodes(address=args.address) if n.is_head_node)
        for text in state.get_log(
            address=args.address,
            node_id=node_id,
            node_ip=args.node_ip,
            filename=args.glob if wants_file else None,
            actor_id=args.actor_id,
            pid=args.pid,
            submission_id=args.submission_id,
            tail=args.tail,
            follow=args.follow,
        ):
            sys.stdout.write(text)
            sys.stdout.flush()
        return
    nodes = state.list_nodes(address=args.address, filters=[("state", "=", "ALIVE")])
    for node in nodes:
        if args.node_id and node.node_id != args.node_id or args.node_ip and node.node_ip != args.node_ip:
            continue
        print(f"node {node.node_id} ({node.node_ip}{', head' if node.is_head_node else ''}):")
        listed = state.list_logs(address=args.address, node_id=node.node_id, glob_filter=args.glob or "*")
        for category, names in sorted(listed.items()):
            print(f"  {category}:")
            for name in names:
                print(f"    {name}")


def run(args) -> None:
    from oxray.util import state

    try:
        if args.command == "logs":
            try:
                _logs(state, args)
            except KeyboardInterrupt:  # how a followed log ends
                pass
        elif args.command == "list":
            filters = [parse_filter(f) for f in args.filter]
            lister = getattr(state, f"list_{args.resource.replace('-', '_')}")
            found = lister(address=args.address, filters=filters, limit=args.limit, detail=args.detail)
            rows = [r.asdict() for r in found]
            if args.format == "json":
                print(json.dumps(rows, indent=2, default=str))
            else:
                print_table(rows)
        else:
            summary = state.summarize_tasks(address=args.address)["cluster"]
            if args.format == "json":
                print(json.dumps(summary, indent=2))
                return
            print(
                f"tasks: {summary['total_tasks']}, actor tasks: {summary['total_actor_tasks']}, "
                f"actors scheduled: {summary['total_actor_scheduled']}"
            )
            rows = [
                {"func_or_class_name": name, "type": s["type"], "state_counts": s["state_counts"]}
                for name, s in sorted(summary["summary"].items())
            ]
            print_table(rows)
    except (ValueError, ConnectionError, RuntimeError) as e:
        _fail(str(e))
    except Exception as e:  # noqa: BLE001 - AuthenticationError and the State API's own errors
        _fail(f"{type(e).__name__}: {e}")
