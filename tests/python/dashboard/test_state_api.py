"""Ray's State API on the head (`/api/v0/...`): Ray's own `ray.util.state`
client, `oxray.util.state` and `oxray list` / `oxray summary` read nodes,
actors, placement groups, jobs and tasks (from every node) with Ray's row
shapes, filters and limits; bad queries get a 400 naming the value; the token
guards every route; each node keeps a bounded history of ended tasks."""

import json
import os
import subprocess
import sys

import pytest

import oxray as ray
from oxray_testutil import http_call, wait_until

pytestmark = pytest.mark.timeout(240)


@ray.remote
def square(x):
    return x * x


@ray.remote
def fails():
    raise ValueError("this task fails on purpose")


@ray.remote(resources={"second": 1})
def on_second_node():
    return ray.get_runtime_context().get_node_id()


@ray.remote
def outer():
    return ray.get_runtime_context().get_task_id(), ray.get(inner.remote())


@ray.remote
def inner():
    return ray.get_runtime_context().get_task_id()


@ray.remote
class Counter:
    def __init__(self):
        self.n = 0

    def add(self):
        self.n += 1
        return self.n


# Ray's client reads RAY_AUTH_MODE once per process, so it runs in its own,
# as a user's script would: every listing, as plain dicts, on stdout.
RAY_STATE_SCRIPT = """
import dataclasses, json, sys
from ray.util import state

url = sys.argv[1]
rows = lambda found: [dataclasses.asdict(r) for r in found]
out = {
    "nodes": rows(state.list_nodes(address=url)),
    "alive": rows(state.list_actors(address=url, filters=[("state", "=", "ALIVE")])),
    "dead": rows(state.list_actors(address=url, filters=[("state", "=", "DEAD")], detail=True)),
    "groups": rows(state.list_placement_groups(address=url, detail=True)),
    "failed": rows(state.list_tasks(address=url, filters=[("state", "=", "FAILED")], detail=True)),
    "squares": rows(state.list_tasks(address=url, filters=[("func_or_class_name", "=", "square")])),
    "remote": rows(state.list_tasks(address=url, filters=[("name", "=", "on_second_node")])),
    "calls": rows(state.list_tasks(address=url, filters=[("type", "=", "ACTOR_TASK")])),
    "summary": state.summarize_tasks(address=url)["cluster"],
    "jobs": [{"type": str(j.type.value), "status": str(j.status.value)} for j in state.list_jobs(address=url)],
}
alive = out["alive"][0]["actor_id"] if out["alive"] else None
out["found"] = dataclasses.asdict(state.get_actor(alive, address=url)) if alive else None
print(json.dumps(out, default=str))
"""


def _rays_state_client(url, token):
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    done = subprocess.run(
        [sys.executable, "-c", RAY_STATE_SCRIPT, url], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_rays_own_state_client_lists_a_two_node_cluster(head):
    head.add_node(num_cpus=1, resources={"second": 1})
    ray.init(address=head.address)
    wait_until("2 live nodes", lambda: len([n for n in ray.nodes() if n["Alive"]]) == 2, timeout=60)
    counter = Counter.options(name="counter").remote()
    assert ray.get(counter.add.remote()) == 1
    doomed = Counter.remote()
    ray.get(doomed.add.remote())
    ray.kill(doomed)
    assert ray.get([square.remote(i) for i in range(4)]) == [0, 1, 4, 9]
    with pytest.raises(ValueError):
        ray.get(fails.remote())
    second_node = ray.get(on_second_node.remote())
    pg = ray.util.placement_group([{"CPU": 1}], strategy="PACK", name="held")
    ray.get(pg.ready())

    seen = _rays_state_client(head.dashboard_url, head.token)

    nodes = seen["nodes"]
    assert sorted(n["is_head_node"] for n in nodes) == [False, True]
    assert all(n["state"] == "ALIVE" and n["node_ip"] == "127.0.0.1" for n in nodes)
    assert {n["node_id"] for n in nodes if not n["is_head_node"]} == {second_node}
    assert [n["resources_total"].get("second") for n in nodes if not n["is_head_node"]] == [1.0]

    assert [(a["class_name"], a["name"]) for a in seen["alive"]] == [("Counter", "counter")]
    assert seen["alive"][0]["job_id"] == ray.get_runtime_context().get_job_id()
    assert seen["alive"][0]["pid"] > 0
    assert len(seen["dead"]) == 1 and seen["dead"][0]["death_cause"] is not None
    assert seen["found"]["name"] == "counter" and seen["found"]["num_restarts"] == 0

    assert [(g["name"], g["state"]) for g in seen["groups"]] == [("held", "CREATED")]
    assert seen["groups"][0]["bundles"][0]["unit_resources"] == {"CPU": 1.0}

    failed = seen["failed"]
    assert [(t["name"], t["error_type"], t["type"]) for t in failed] == [
        ("fails", "TASK_EXECUTION_EXCEPTION", "NORMAL_TASK")
    ]
    assert failed[0]["end_time_ms"] >= failed[0]["start_time_ms"] >= failed[0]["creation_time_ms"] > 0
    assert len(seen["squares"]) == 4 and {t["state"] for t in seen["squares"]} == {"FINISHED"}
    assert [t["node_id"] for t in seen["remote"]] == [second_node], "a task is reported by the node that ran it"
    assert {t["func_or_class_name"] for t in seen["calls"]} == {"Counter.add"}

    summary = seen["summary"]
    assert summary["summary"]["square"]["state_counts"] == {"FINISHED": 4}
    assert summary["summary"]["fails"]["state_counts"] == {"FAILED": 1}
    assert summary["total_actor_scheduled"] == 2

    assert seen["jobs"] == [{"type": "DRIVER", "status": "RUNNING"}]


def test_oxray_util_state_and_the_list_and_summary_commands(fresh_cluster):
    from oxray.util.state import list_actors, list_nodes, list_tasks, summarize_tasks

    fresh_cluster(num_cpus=2, include_dashboard=True, dashboard_port=0)
    counter = Counter.options(name="listed").remote()
    ray.get(counter.add.remote())
    ray.get([square.remote(i) for i in range(3)])

    [node] = list_nodes()
    assert node.state == "ALIVE" and node.is_head_node
    [actor] = list_actors(filters=[("name", "=", "LISTED")])  # strings compare without case, as in Ray
    assert actor.state == "ALIVE" and actor["class_name"] == "Counter"
    with pytest.warns(UserWarning, match="2 of 5 tasks are returned"):
        assert len(list_tasks(limit=2)) == 2
    assert summarize_tasks()["cluster"]["summary"]["square"]["state_counts"] == {"FINISHED": 3}
    outer_id, inner_id = ray.get(outer.remote())
    [nested] = list_tasks(filters=[("task_id", "=", inner_id)])
    assert nested.parent_task_id == outer_id, "a nested task names the task that submitted it"
    [top] = list_tasks(filters=[("task_id", "=", outer_id)])
    assert top.parent_task_id and top.parent_task_id != outer_id, "the driver's own task id"

    cli = [sys.executable, "-m", "oxray.scripts.cli"]
    listed = subprocess.run(
        cli + ["list", "actors", "--filter", "state=ALIVE", "--format", "json"], capture_output=True, text=True
    )
    assert listed.returncode == 0, listed.stderr
    assert [a["name"] for a in json.loads(listed.stdout)] == ["listed"]
    table = subprocess.run(cli + ["list", "tasks", "--limit", "50"], capture_output=True, text=True)
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[0].split()[:4] == ["TASK_ID", "ATTEMPT_NUMBER", "NAME", "STATE"]
    assert sum(" square " in line for line in table.stdout.splitlines()) == 3
    summary = subprocess.run(cli + ["summary", "tasks"], capture_output=True, text=True)
    assert summary.returncode == 0 and "square" in summary.stdout and '"FINISHED": 3' in summary.stdout
    bad = subprocess.run(cli + ["list", "actors", "--filter", "nocolumn=1"], capture_output=True, text=True)
    assert bad.returncode == 1 and "nocolumn" in bad.stderr and "Supported filter columns" in bad.stderr
    bad = subprocess.run(cli + ["list", "actors", "--filter", "state"], capture_output=True, text=True)
    assert bad.returncode == 1 and "expected KEY=VALUE" in bad.stderr


def test_bad_queries_get_a_400_that_names_the_value_and_every_route_needs_the_token(head):
    url = head.dashboard_url
    for resource in ("nodes", "actors", "placement_groups", "jobs", "tasks", "tasks/summarize"):
        assert http_call("GET", f"{url}/api/v0/{resource}")[0] == 401
        assert http_call("GET", f"{url}/api/v0/{resource}", token="wrong")[0] == 403
        status, body = http_call("GET", f"{url}/api/v0/{resource}", token=head.token)
        assert status == 200 and json.loads(body)["result"] is True
    for query, named in [
        ("limit=10001", "exceeds the supported limit 10000"),
        ("limit=many", 'limit="many"'),
        ("filter_keys=labels&filter_predicates=%3D&filter_values=x", "filter column labels is not supported"),
        ("filter_keys=state&filter_predicates=%3E&filter_values=x", "Unsupported filter predicate >"),
        ("filter_keys=state", "must come in threes"),
        ("colour=red", '"colour"'),
    ]:
        status, body = http_call("GET", f"{url}/api/v0/nodes?{query}", token=head.token)
        reply = json.loads(body)
        assert status == 400 and reply["result"] is False and named in reply["msg"], (query, body)
    status, body = http_call("GET", f"{url}/api/v0/tasks/summarize?summary_by=lineage", token=head.token)
    assert status == 400 and "lineage" in json.loads(body)["msg"]


def test_each_node_keeps_a_bounded_history_of_ended_tasks(fresh_cluster, monkeypatch):
    from oxray.util.state import list_tasks

    monkeypatch.setenv("OXRAY_TASK_HISTORY", "5")
    fresh_cluster(num_cpus=2, include_dashboard=True, dashboard_port=0)
    ray.get([square.remote(i) for i in range(20)])
    listed = list_tasks(limit=100)
    assert len(listed) == 5 and {t.state for t in listed} == {"FINISHED"}


def test_the_state_api_works_after_a_plain_init(fresh_cluster):
    # As with Ray: no dashboard option needed. The embedded head starts serving HTTP (loopback
    # only, token required) when the State API is first used.
    from oxray.util.state import get_actor, list_actors

    fresh_cluster(num_cpus=2)
    assert "dashboard_url" not in ray._private.api.STATE.address_info
    counter = Counter.options(name="plain-init").remote()
    ray.get(counter.add.remote())
    [row] = [a for a in list_actors() if a.name == "plain-init"]
    assert row.state == "ALIVE" and get_actor(row.actor_id).class_name == "Counter"
    assert ray.get_runtime_context().get_dashboard_url() == ray._private.api.STATE.address_info["dashboard_url"]


def test_cluster_status_reports_the_demand_waiting_for_a_node(head):
    """Ray's `/api/cluster_status`: what the autoscaler (the Kubernetes operator) reads."""
    url = head.dashboard_url
    assert http_call("GET", f"{url}/api/cluster_status")[0] == 401
    ray.init()

    @ray.remote(num_cpus=8)
    def big():
        return 1

    waiting = [big.remote() for _ in range(3)]  # a 2-CPU head: they wait for a node that fits

    def report():
        status, body = http_call("GET", f"{url}/api/cluster_status", token=head.token)
        assert status == 200, body
        return json.loads(body)["data"]["clusterStatus"]["loadMetricsReport"]

    wait_until(
        lambda: f"the 3 pending 8-CPU tasks in the resource demand ({report()})",
        lambda: report()["resourceDemand"] == [[{"CPU": 8.0}, 3]],
        timeout=60,
    )
    metrics = report()
    assert metrics["usage"]["CPU"] == [0.0, 2.0]
    [node] = metrics["nodes"]
    assert node["isHead"] is True and node["resourcesTotal"]["CPU"] == 2.0
    status, body = http_call("GET", f"{url}/api/cluster_status?format=1", token=head.token)
    text = json.loads(body)["data"]["autoscalingStatus"]
    assert "Node status" in text and "0.0/2.0 CPU" in text and '{"CPU":8.0}: 3+ pending tasks/actors' in text, text
    for ref in waiting:
        ray.cancel(ref)
