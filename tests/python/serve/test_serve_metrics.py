"""Serve's Prometheus series under Ray Serve's names, on each node's /metrics: the replicas'
requests, errors and latency by route, the handles' requests, the controller's statuses
(Ray's numeric enums), replica health and control loops, and a deployment's own
`ray.serve.metrics` counter with the replica's tags."""

import oxray as ray
from cli_cluster import free_port, running_cluster
from oxray import serve
from oxray_testutil import http_get_local, metric_samples, metric_sum, wait_until


@serve.deployment(ray_actor_options={"num_cpus": 0})
class Doubler:
    def __init__(self):
        from oxray.serve import metrics

        self.calls = metrics.Counter("doubler_calls", description="Numbers doubled.", tag_keys=("route",))

    def __call__(self, x):
        self.calls.inc()
        if x < 0:
            raise ValueError("negative")
        return x * 2


@serve.deployment(ray_actor_options={"num_cpus": 0})
class Calc:
    def __init__(self, doubler):
        self.doubler = doubler

    async def __call__(self, request):
        return await self.doubler.remote(int(request.query_params["x"]))


def test_replicas_handles_and_the_controller_report_rays_series(tmp_path, monkeypatch):
    with running_cluster(tmp_path / "oxray", monkeypatch) as cluster:
        cluster.start_head(num_cpus=2)
        ray.init()
        port = free_port()
        serve.start(http_options={"port": port})
        serve.run(Calc.bind(Doubler.bind()), name="calc", route_prefix="/calc")
        assert [http_get_local(port, f"/calc?x={x}")[0] for x in (1, 2, 3, -1)] == [200, 200, 200, 500]
        calc = {"application": "calc", "deployment": "Calc"}
        doubler = {"application": "calc", "deployment": "Doubler"}

        def reported():
            text = cluster.metrics_text()
            return (
                metric_sum(text, "ray_serve_deployment_request_counter_total", route="/calc", **calc) == 4
                and metric_sum(text, "ray_serve_deployment_request_counter_total", route="", **doubler) == 4
                and metric_sum(text, "ray_serve_application_status", application="calc") == 6
                and metric_sum(text, "ray_doubler_calls_total", **doubler) == 4
                and text
            )

        text = wait_until(lambda: f"Serve's series:\n{cluster.metrics_text()[-4000:]}", reported, timeout=60)
        # The replicas': errors by exception type, latency by route, starts, requests processing now.
        assert metric_sum(text, "ray_serve_deployment_error_counter_total", exception_type="ValueError", **doubler) == 1
        assert metric_sum(text, "ray_serve_deployment_processing_latency_ms_count", route="/calc", **calc) == 4
        assert metric_sum(text, "ray_serve_deployment_replica_starts_total", **calc) == 1
        assert metric_sum(text, "ray_serve_replica_processing_queries", **doubler) == 0
        [(labels, _)] = metric_samples(text, "ray_serve_deployment_request_counter_total", route="/calc", **calc)
        assert len(labels["replica"]) == 8, labels
        # The handle in Calc's replica calling Doubler.
        assert metric_sum(text, "ray_serve_handle_request_counter_total", **doubler) == 4
        assert metric_sum(text, "ray_serve_num_router_requests_total", **doubler) == 4
        # The controller's.
        assert metric_sum(text, "ray_serve_deployment_status", **doubler) == 6  # HEALTHY
        assert metric_sum(text, "ray_serve_deployment_replica_healthy", **doubler) == 1
        assert metric_sum(text, "ray_serve_controller_num_control_loops_total") > 0
        # The deployment's own counter, with the replica's tags and the (empty) route of a handle's call.
        [(labels, value)] = metric_samples(text, "ray_doubler_calls_total", **doubler)
        assert value == 4 and labels["route"] == "" and len(labels["replica"]) == 8, labels
        serve.shutdown()


def test_a_replicas_log_is_on_its_nodes_logs_with_access_lines_and_tracebacks(tmp_path, monkeypatch):
    from oxray.util.state import get_log, list_logs

    with running_cluster(tmp_path / "oxray", monkeypatch) as cluster:
        cluster.start_head(num_cpus=2)
        monkeypatch.setenv("OXRAY_TOKEN", cluster.token)
        monkeypatch.setenv("RAY_ADDRESS", cluster.dashboard_url)
        ray.init(address=cluster.address)
        port = free_port()
        serve.start(http_options={"port": port})
        serve.run(Calc.bind(Doubler.bind()), name="calc", route_prefix="/calc")
        headers = {"x-request-id": "req-123"}
        assert http_get_local(port, "/calc?x=4", headers=headers) == (200, b"8")
        assert http_get_local(port, "/calc?x=-1")[0] == 500

        details = {d["deployment"]: d for d in _replica_details(cluster)}
        calc_log, doubler_log = details["Calc"]["log_file_path"], details["Doubler"]["log_file_path"]
        replica = details["Calc"]["replica_id"]
        assert calc_log == f"/serve/replica_calc_Calc_{replica}.log"
        node = details["Calc"]["node_id"]
        name = "logs" + calc_log
        assert name in list_logs(node_id=node)["serve"]

        def logged(name, *texts):
            text = "".join(get_log(node_id=node, filename=name))
            return all(t in text for t in texts) and text

        text = wait_until(
            lambda: f"the access lines in {name}", lambda: logged(name, "GET /calc 200", "GET /calc 500"), timeout=30
        )
        [line] = [line for line in text.splitlines() if "GET /calc 200" in line]
        assert line.startswith("INFO ") and f" Calc {replica} req-123 -- GET /calc 200 " in line, line
        assert line.endswith("ms"), line
        doubler = "logs" + doubler_log
        text = wait_until(
            lambda: f"the failure in {doubler}",
            lambda: logged(doubler, "CALL __call__ OK", "CALL __call__ ERROR", "ValueError: negative"),
            timeout=30,
        )
        assert "Request failed:\nTraceback" in text
        serve.shutdown()


def _replica_details(cluster):
    """Each replica of the `calc` application as Ray's REST API details it, with its deployment."""
    import json

    from oxray_testutil import http_call

    _, body = http_call("GET", f"{cluster.dashboard_url}/api/serve/applications/", token=cluster.token)
    deployments = json.loads(body)["applications"]["calc"]["deployments"]
    return [{**r, "deployment": name} for name, d in deployments.items() for r in d["replicas"]]
