"""Serve's own Prometheus series, under Ray Serve's names and tags, recorded through
`oxray.util.metrics` in the process they describe (each node's `/metrics` serves them):

- a replica: requests, errors by exception type and processing latency by route, the requests it
  processes now, and its starts;
- a handle (in the caller's process): its requests, and the calls queued in it and in flight;
- the controller: each replica's health, each deployment's and application's status (Ray's
  numeric enums), health-check failures, autoscaling targets, and its control loop.

The proxy's HTTP series are the Rust proxy's own (`oxray-http`'s `serve_proxy/metrics.rs`)."""

from __future__ import annotations

import os
import threading

from oxray.util import metrics

# Ray's default latency buckets (ms), overridden by RAY_SERVE_REQUEST_LATENCY_BUCKETS_MS.
DEFAULT_LATENCY_BUCKETS_MS = [
    1,
    2,
    5,
    10,
    20,
    50,
    100,
    200,
    300,
    400,
    500,
    1000,
    2000,
    5000,
    10000,
    60000,
    120000,
    300000,
    600000,
]
# Ray's numeric statuses (`to_numeric`): 0 is UNKNOWN.
DEPLOYMENT_STATUS_NUMERIC = {
    "DEPLOY_FAILED": 1,
    "UNHEALTHY": 2,
    "UPDATING": 3,
    "UPSCALING": 4,
    "DOWNSCALING": 5,
    "HEALTHY": 6,
}
APPLICATION_STATUS_NUMERIC = {
    "DEPLOY_FAILED": 1,
    "UNHEALTHY": 2,
    "NOT_STARTED": 3,
    "DELETING": 4,
    "DEPLOYING": 5,
    "RUNNING": 6,
}
REPLICA_TAGS = ("deployment", "replica", "application")


def latency_buckets_ms() -> list:
    raw = os.environ.get("RAY_SERVE_REQUEST_LATENCY_BUCKETS_MS")
    if not raw:
        return DEFAULT_LATENCY_BUCKETS_MS
    try:
        buckets = [float(b) for b in raw.split(",") if b.strip()]
    except ValueError:
        raise ValueError(
            f"RAY_SERVE_REQUEST_LATENCY_BUCKETS_MS={raw!r}: expected comma-separated positive numbers"
        ) from None
    if not buckets or any(b <= 0 for b in buckets) or buckets != sorted(buckets):
        raise ValueError(f"RAY_SERVE_REQUEST_LATENCY_BUCKETS_MS={raw!r}: expected increasing positive numbers")
    return buckets


class ReplicaMetrics:
    """One replica's series, tagged with its deployment, replica id and application."""

    def __init__(self, app: str, deployment: str, replica_id: str, ongoing):
        tags = {"deployment": deployment, "replica": replica_id, "application": app}
        self.requests = metrics.Counter(
            "serve_deployment_request_counter",
            description="The number of queries that have been processed in this replica.",
            tag_keys=(*REPLICA_TAGS, "route"),
        ).set_default_tags(tags)
        self.errors = metrics.Counter(
            "serve_deployment_error_counter",
            description="The number of exceptions that have occurred in this replica.",
            tag_keys=(*REPLICA_TAGS, "route", "exception_type"),
        ).set_default_tags(tags)
        self.latency = metrics.Histogram(
            "serve_deployment_processing_latency_ms",
            description="The latency for queries to be processed.",
            boundaries=latency_buckets_ms(),
            tag_keys=(*REPLICA_TAGS, "route"),
        ).set_default_tags(tags)
        processing = metrics.Gauge(
            "serve_replica_processing_queries",
            description="The current number of queries being processed.",
            tag_keys=REPLICA_TAGS,
        ).set_default_tags(tags)
        self.starts = metrics.Counter(
            "serve_deployment_replica_starts",
            description="The number of times this replica has been restarted due to failure.",
            tag_keys=REPLICA_TAGS,
        ).set_default_tags(tags)
        metrics._REPORTER.add_collector(lambda: processing.set(ongoing()))

    def record(self, route: str, latency_ms: float, error: BaseException | None) -> None:
        tags = {"route": route}
        self.requests.inc(tags=tags)
        self.latency.observe(latency_ms, tags=tags)
        if error is not None:
            self.errors.inc(tags={"route": route, "exception_type": type(error).__name__})


class HandleMetrics:
    """A handle's series in the caller's process (one per deployment it calls)."""

    def __init__(self, app: str, deployment: str, handle: str, queued, ongoing):
        from oxray import get_runtime_context

        actor_id = get_runtime_context().get_actor_id() or ""
        self.requests = metrics.Counter(
            "serve_handle_request_counter",
            description="The number of handle.remote() calls that have been made on this handle.",
            tag_keys=("handle", "deployment", "route", "application"),
        ).set_default_tags({"handle": handle, "deployment": deployment, "route": "", "application": app})
        self.routed = metrics.Counter(
            "serve_num_router_requests",
            description="The number of requests processed by the router.",
            tag_keys=("deployment", "route", "application", "handle", "actor_id"),
        ).set_default_tags(
            {"deployment": deployment, "route": "", "application": app, "handle": handle, "actor_id": actor_id}
        )
        tags = {"deployment": deployment, "application": app, "handle": handle, "actor_id": actor_id}
        queued_gauge = metrics.Gauge(
            "serve_deployment_queued_queries",
            description="The current number of queries to this deployment waiting to be assigned to a replica.",
            tag_keys=("deployment", "application", "handle", "actor_id"),
        ).set_default_tags(tags)
        ongoing_gauge = metrics.Gauge(
            "serve_num_ongoing_requests_at_replicas",
            description="The current number of requests to this deployment that have been submitted to a replica.",
            tag_keys=("deployment", "application", "handle", "actor_id"),
        ).set_default_tags(tags)

        def collect():
            queued_gauge.set(queued())
            ongoing_gauge.set(ongoing())

        metrics._REPORTER.add_collector(collect)

    def request(self) -> None:
        self.requests.inc()
        self.routed.inc()


class ControllerMetrics:
    """The controller's series; `collect` reads its engine's statuses and serving replicas
    (`snapshot()`) before each report."""

    def __init__(self, snapshot):
        self.loops = metrics.Counter(
            "serve_controller_num_control_loops",
            description="The number of control loops performed by the controller.",
        )
        self.loop_duration = metrics.Gauge(
            "serve_controller_control_loop_duration_s",
            description="The duration of the last control loop.",
        )
        self.health_check_failures = metrics.Counter(
            "serve_health_check_failures",
            description="The number of health checks that failed.",
            tag_keys=REPLICA_TAGS,
        )
        deployment_status = metrics.Gauge(
            "serve_deployment_status",
            description=(
                "Numeric status of deployment. 0=UNKNOWN, 1=DEPLOY_FAILED, 2=UNHEALTHY, 3=UPDATING, "
                "4=UPSCALING, 5=DOWNSCALING, 6=HEALTHY."
            ),
            tag_keys=("deployment", "application"),
        )
        application_status = metrics.Gauge(
            "serve_application_status",
            description=(
                "Numeric status of application. 0=UNKNOWN, 1=DEPLOY_FAILED, 2=UNHEALTHY, 3=NOT_STARTED, "
                "4=DELETING, 5=DEPLOYING, 6=RUNNING."
            ),
            tag_keys=("application",),
        )
        target_replicas = metrics.Gauge(
            "serve_autoscaling_target_replicas",
            description="The target number of replicas of the deployment.",
            tag_keys=("deployment", "application"),
        )
        replica_healthy = metrics.Gauge(
            "serve_deployment_replica_healthy",
            description="Tracks healthy replicas: 1 for healthy and 0 for unhealthy.",
            tag_keys=REPLICA_TAGS,
        )
        # Series of applications, deployments and replicas that went: set to 0 once, then left.
        self.lock = threading.Lock()
        self.seen_replicas: set = set()

        def collect():
            statuses, serving = snapshot()
            for app in statuses:
                name = app["name"]
                application_status.set(APPLICATION_STATUS_NUMERIC.get(app["status"], 0), tags={"application": name})
                for deployment, d in app["deployments"].items():
                    tags = {"deployment": deployment, "application": name}
                    deployment_status.set(DEPLOYMENT_STATUS_NUMERIC.get(d["status"], 0), tags=tags)
                    target_replicas.set(d["target_num_replicas"], tags=tags)
            healthy = set(serving)
            with self.lock:
                for key in healthy | self.seen_replicas:
                    app, deployment, replica = key
                    replica_tags = {"deployment": deployment, "replica": replica, "application": app}
                    replica_healthy.set(1 if key in healthy else 0, tags=replica_tags)
                self.seen_replicas = healthy

        metrics._REPORTER.add_collector(collect)

    def health_check_failed(self, app: str, deployment: str, replica: str) -> None:
        self.health_check_failures.inc(tags={"deployment": deployment, "replica": replica, "application": app})

    def control_loop(self, duration_s: float) -> None:
        self.loops.inc()
        self.loop_duration.set(duration_s)
