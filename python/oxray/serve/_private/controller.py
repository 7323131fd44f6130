"""The Serve controller actor: one per cluster (`SERVE_CONTROLLER_ACTOR` in the
`serve` namespace, detached), as in Ray. Its decisions are the engine's
(`_native.ServeController`, `oxray-serve`); this actor runs the control loop
(every 0.1 s, or when a replica's call completes), carries out the actions
(replica actors started, reconfigured, health-checked, stopped, killed), reports
their outcomes back, and answers drivers and handles. It never imports user
code: definitions and arguments stay cloudpickled bytes until a replica loads
them.

Its checkpoint (each application's deployments with their code and settings,
the HTTP options) is kept in the head, in redb when the head has a state
directory, rewritten on every deploy, delete and config. A controller that
starts with a checkpoint there (the head restarted, and the old controller
went down with it) takes the applications back: the replicas still running are
adopted, the rest started."""

from __future__ import annotations

import json
import re
import threading
import time
import traceback
from typing import Optional

import oxray as ray
from oxray import cloudpickle
from oxray._native import ServeController
from oxray.serve._private.metrics import ControllerMetrics
from oxray.serve._private.replica import ServeReplica
from oxray.serve.handle import SERVE_NAMESPACE, replica_actor_name

# Ray's control loop period (RAY_SERVE_CONTROL_LOOP_INTERVAL_S).
CONTROL_LOOP_S = 0.1
# The controller's calls to a replica (a health check, a reconfigure, a stop) run in a group of
# their own, so that requests alone fill `max_ongoing_requests`.
CONTROL_GROUP = "serve_control"
CONTROL_CALLS = 3
# The proxies' waits for a streamed body's or a WebSocket's next batch: a thread each while it is
# open, in a group of their own so they never wait behind new requests (several proxies may each
# have `max_ongoing_requests` open: the group has room for more).
STREAM_GROUP = "serve_http_stream"
STREAM_CALLS = 64
# The proxies' quick calls (a cancel, a WebSocket message), never behind the waits above.
HTTP_CONTROL_GROUP = "serve_http_control"
HTTP_CONTROL_CALLS = 4
# The route table goes out again this often even when unchanged: a node that joined since gets it.
ROUTES_RESEND_S = 5.0
# How long a recovering controller waits for the replicas it finds to say which versions they run;
# one that does not answer (its node went down with the head) is replaced.
RECOVERY_WAIT_S = 10.0
CHECKPOINT_FORMAT = 1
_REPLICA_NAME = re.compile(r"SERVE_REPLICA::(?P<app>.*)#(?P<deployment>[^#]*)#(?P<replica>[^#]*)")


def _now_ms() -> int:
    return int(time.time() * 1000)


def _traceback(error: BaseException) -> str:
    return "".join(traceback.format_exception(type(error), error, error.__traceback__))


def _kill_actor(actor) -> None:
    if actor is not None:
        try:
            ray.kill(actor)
        except Exception:  # noqa: BLE001 - already gone
            pass


class ServeControllerActor:
    def __init__(self):
        self.engine = ServeController()
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        # (app, deployment, code_version) -> what a replica of that version is started with.
        self.definitions: dict = {}
        # (app, deployment) -> its current code version (a config change reconfigures with its user_config).
        self.current: dict = {}
        self.replicas: dict = {}
        self.pending: dict = {}
        self.ingress: dict = {}
        self.running = True
        self.wake = threading.Event()
        # Ray's `http_options` and `proxy_location` once Serve's HTTP was started (None: no proxy).
        self.http = None
        # Ray's `grpc_options` as the proxies take them (None: no gRPC proxy).
        self.grpc = None
        self.proxy_location = "EveryNode"
        # The route table last given to the agent (JSON), so an unchanged one is not sent again.
        self.routes_sent = None
        self.routes_sent_at = 0.0
        # Application -> "imperative" (serve.run) or "declarative" (a config), and a config's app entry.
        self.sources: dict = {}
        self.app_configs: dict = {}
        # A config's applications being built (the build task's ref -> (name, app config, version)),
        # and each application's latest config version (a build of an older one is stale).
        self.building: dict = {}
        self.latest_builds: dict = {}
        # (app, deployment, replica) -> when its actor was started (the details' start_time_s).
        self.started_at: dict = {}
        # (app, deployment, replica) -> where it runs (node, pid, worker, log file), once it started.
        self.identities: dict = {}
        # (app, deployment, replica) -> the multiplexed models it holds, as it last reported.
        self.models: dict = {}
        # (app, deployment, replica) -> the placement group it runs in (placement_group_bundles).
        self.groups: dict = {}
        # (app, deployment, replica) -> the node it was sent to (max_replicas_per_node); and the
        # replicas waiting for a node under that limit, with their code version.
        self.nodes_of: dict = {}
        self.deferred: dict = {}
        # The details last given to the head (JSON), so unchanged ones are not sent again.
        self.details_sent = None
        # The checkpoint last given to the head, so an unchanged one is not written again.
        self.checkpoint_sent = None
        # Serve's own `LoggingConfig` (serve.start's, or a config's top level) as a dict: for
        # deployments whose application and themselves set none.
        self.logging_config = None
        self.metrics = ControllerMetrics(self._metrics_snapshot)
        with self.lock:
            self._recover()
        threading.Thread(target=self._loop, name="serve-control-loop", daemon=True).start()

    # The checkpoint in the head.

    def _checkpoint(self) -> None:
        """Gives the head the applications as deployed (their current versions' definitions), the
        configs still building and the HTTP options: what a controller started after a head
        restart needs to take them back."""
        apps = {}
        for status in self.engine.status():
            name, ingress = status["name"], self.ingress.get(status["name"])
            if status["status"] == "DELETING" or ingress is None:
                continue
            deployments = [self._current(name, d) for d in status["deployments"]]
            deployments = [d for d in deployments if d is not None]
            if deployments:
                apps[name] = {
                    "route_prefix": status["route_prefix"],
                    "ingress": ingress,
                    "deployments": deployments,
                    "source": self.sources.get(name, "imperative"),
                    "app_config": self.app_configs.get(name),
                }
        builds = {name: app for name, app, version in self.building.values() if self.latest_builds.get(name) == version}
        state = {
            "format": CHECKPOINT_FORMAT,
            "http": self.http,
            "grpc": self.grpc,
            "proxy_location": self.proxy_location,
            "logging_config": self.logging_config,
            "apps": apps,
            "builds": builds,
        }
        self._save_checkpoint(cloudpickle.dumps(state))

    def _save_checkpoint(self, checkpoint: bytes) -> None:
        if checkpoint == self.checkpoint_sent:
            return
        from oxray._private.api import _client

        _client().save_serve_checkpoint(checkpoint)
        self.checkpoint_sent = checkpoint

    def _recover(self) -> None:
        """Takes back the applications of the head's checkpoint, if it keeps one."""
        from oxray._private.api import _client

        checkpoint = bytes(_client().serve_checkpoint())
        if not checkpoint:
            return
        state = cloudpickle.loads(checkpoint)
        if state.get("format") != CHECKPOINT_FORMAT:
            print(f"(oxray.serve) the head's Serve checkpoint has format {state.get('format')!r}: ignored", flush=True)
            return
        self.checkpoint_sent = checkpoint
        self.http, self.proxy_location = state["http"], state["proxy_location"]
        self.grpc = state.get("grpc")
        self.logging_config = state.get("logging_config")
        found = self._running_replicas()
        for name, app in state["apps"].items():
            self._restore_app(name, app, found)
        for key, (actor, _info) in found.items():
            if key not in self.replicas:  # its application or deployment is gone, or it never started
                _kill_actor(actor)
        for app in state["builds"].values():
            self._start_build(app)
        self._act()
        names = sorted(state["apps"]) + sorted(state["builds"])
        print(f"(oxray.serve) took back {len(names)} application(s) from the head's checkpoint: {names}", flush=True)

    def _restore_app(self, name: str, app: dict, found: dict) -> None:
        deployments = {d["name"]: d for d in app["deployments"]}
        adopted = [
            (deployment, replica, info["code_version"], info["config_version"])
            for (a, deployment, replica), (_actor, info) in found.items()
            if a == name and deployment in deployments
        ]
        specs = [(d["name"], d["engine"]) for d in deployments.values()]
        try:
            self.engine.restore_app(name, app["route_prefix"], app["ingress"], specs, adopted, _now_ms())
        except ValueError:
            traceback.print_exc()
            return
        self.sources[name], self.app_configs[name] = app["source"], app["app_config"]
        self.ingress[name] = app["ingress"]
        for d in deployments.values():
            self.current[(name, d["name"])] = d["engine"]["code_version"]
            self.definitions[(name, d["name"], d["engine"]["code_version"])] = d
        for deployment, replica, _code, _config in adopted:
            key = (name, deployment, replica)
            actor, info = found[key]
            self.replicas[key], self.started_at[key] = actor, info["started_at"]
            self.identities[key] = identity = info.get("identity") or {}
            if identity.get("node_id"):
                self.nodes_of[key] = identity["node_id"]  # counted for max_replicas_per_node

    def _running_replicas(self) -> dict:
        """The replica actors still alive, each with what it says it runs (`recovery_info`):
        `(app, deployment, replica) -> (actor, info)`. One that does not answer within
        `RECOVERY_WAIT_S`, or has not finished starting, is left out (and then stopped)."""
        asked = {}
        from oxray.util import list_named_actors

        for entry in list_named_actors(all_namespaces=True):
            match = _REPLICA_NAME.fullmatch(entry["name"])
            if entry["namespace"] != SERVE_NAMESPACE or match is None:
                continue
            try:
                actor = ray.get_actor(entry["name"], namespace=SERVE_NAMESPACE)
            except ValueError:
                continue  # died meanwhile
            call = actor.recovery_info.options(concurrency_group=CONTROL_GROUP).remote()
            asked[call] = ((match["app"], match["deployment"], match["replica"]), actor)
        found = {}
        if asked:
            ready, _ = ray.wait(list(asked), num_returns=len(asked), timeout=RECOVERY_WAIT_S)
            for ref in asked:
                key, actor = asked[ref]
                info = None
                if ref in ready:
                    try:
                        info = ray.get(ref)
                    except Exception:  # noqa: BLE001 - its actor died: replaced
                        info = None
                if info is None:
                    _kill_actor(actor)
                else:
                    found[key] = (actor, info)
        return found

    def recover(self) -> list:
        """What the head's `recover` job calls after a head restart. A controller that was
        started by it has recovered in its constructor; one that outlived the head (on another
        node) gives the new head its details and routes again. The applications' names."""
        with self.lock:
            self.details_sent = None
            self.routes_sent = None
            self.checkpoint_sent = None
            self._checkpoint()
            return sorted(s["name"] for s in self.engine.status())

    # Called by drivers and handles.

    def start_http(self, http_options: dict, proxy_location: str, grpc_options: Optional[dict] = None) -> str:
        """Starts (or moves) the HTTP proxies with Ray's `http_options`, and gRPC proxies beside them
        with `grpc_options` (the wire form; None: none); where this node's HTTP proxy listens.
        The first options win, as in Ray: a later call with other ones only warns."""
        with self.lock:
            wanted = (http_options, proxy_location, grpc_options)
            if self.http is not None and (self.http, self.proxy_location, self.grpc) != wanted:
                print(
                    "(oxray.serve) Serve's proxies are already running with "
                    f"{self.http} ({self.proxy_location}; gRPC {self.grpc}); the new options are ignored",
                    flush=True,
                )
                return self._push_routes(force=True)
            self.http, self.proxy_location, self.grpc = wanted
            try:
                address = self._push_routes(force=True)
            except Exception:
                self.http = self.grpc = None
                raise
            self._checkpoint()
            return address

    def ensure_http(self, http_options: dict) -> str:
        """Starts the HTTP proxies with these options unless they run already."""
        with self.lock:
            if self.http is not None:
                return ""
        return self.start_http(http_options, self.proxy_location)

    def _route_table(self) -> dict:
        routes = []
        for prefix, app, ingress, serving in self.engine.routes():
            definition = self._current(app, ingress)
            if definition is None or (prefix is None and self.grpc is None):
                continue
            replicas = [
                {
                    "replica_id": rid,
                    "actor_id": self.replicas[(app, ingress, rid)]._actor_id.hex(),
                    "model_ids": self.models.get((app, ingress, rid), []),
                }
                for rid in serving
                if (app, ingress, rid) in self.replicas
            ]
            status = next((s for s in self.engine.status() if s["name"] == app), None)
            state = status and status["deployments"].get(ingress)
            unavailable = None
            if not replicas and state is not None and state["status"] == "DEPLOY_FAILED":
                unavailable = f"Deployment '{ingress}' in application '{app}' failed to deploy: {state['message']}"
            backpressure = definition.get("backpressure_config") or {}
            routes.append(
                {
                    # An application without a route prefix is reached over gRPC (and by handle) only.
                    "route_prefix": prefix or "",
                    "http": prefix is not None,
                    "app": app,
                    "deployment": ingress,
                    "max_ongoing_requests": definition["max_ongoing_requests"],
                    "max_queued_requests": definition.get("max_queued_requests", -1),
                    "backpressure_status": backpressure.get("status_code", 503),
                    "retry_after_s": backpressure.get("retry_after_s"),
                    "replicas": replicas,
                    "unavailable": unavailable,
                    "metrics_interval_s": self._metrics_interval(app, ingress),
                }
            )
        return {
            "proxy_location": self.proxy_location,
            "http": self.http,
            "grpc": self.grpc,
            "routes": routes,
            "controller_actor_id": ray.get_runtime_context().get_actor_id(),
        }

    def details(self) -> dict:
        """Ray's `ServeInstanceDetails` (what `GET /api/serve/applications/` answers)."""
        with self.lock:
            return self._details()

    def _details(self) -> dict:
        context = ray.get_runtime_context()
        applications = {}
        for status in self.engine.status():
            applications[status["name"]] = self._app_details(status)
        for name, app, _version in self.building.values():
            if name not in applications:
                applications[name] = {
                    "name": name,
                    "route_prefix": app.get("route_prefix", "/"),
                    "docs_path": None,
                    "status": "DEPLOYING",
                    "message": "Building the application from its import path.",
                    "last_deployed_time_s": time.time(),
                    "deployed_app_config": app,
                    "source": "declarative",
                    "deployments": {},
                    "external_scaler_enabled": False,
                }
        http = None
        if self.http is not None:
            http = {k: self.http[k] for k in ("host", "port", "root_path", "request_timeout_s", "keep_alive_timeout_s")}
        return {
            "controller_info": {
                "node_id": context.get_node_id(),
                "actor_id": context.get_actor_id(),
                "actor_name": "SERVE_CONTROLLER_ACTOR",
                "worker_id": context.get_worker_id(),
            },
            "proxy_location": self.proxy_location,
            "http_options": http,
            "grpc_options": self._grpc_details(),
            "proxies": {},
            "applications": applications,
            "target_capacity": None,
        }

    def _grpc_details(self) -> dict:
        """Ray's `grpc_options` in the details: the fields set (`{}` when gRPC never started)."""
        if self.grpc is None:
            return {}
        details = {"port": self.grpc["port"], "grpc_servicer_functions": list(self.grpc["grpc_servicer_functions"])}
        if self.grpc.get("request_timeout_s") is not None:
            details["request_timeout_s"] = self.grpc["request_timeout_s"]
        return details

    def _app_details(self, status: dict) -> dict:
        app = status["name"]
        ingress = self.ingress.get(app)
        deployments = {}
        for name, d in status["deployments"].items():
            definition = self._current(app, name) or {}
            serving = set(self.engine.serving(app, name))
            replicas = []
            for (a, dep, rid), actor in self.replicas.items():
                if (a, dep) == (app, name):
                    replicas.append(
                        {
                            **(self.identities.get((a, dep, rid)) or {}),
                            "replica_id": rid,
                            "state": "RUNNING" if rid in serving else "STARTING",
                            "start_time_s": self.started_at.get((a, dep, rid), 0.0),
                            "actor_id": actor._actor_id.hex(),
                            "actor_name": replica_actor_name(a, dep, rid),
                        }
                    )
            deployments[name] = {
                "name": name,
                "status": d["status"],
                "status_trigger": d["status_trigger"],
                "message": d["message"],
                "deployment_config": _deployment_config(name, definition),
                "target_num_replicas": d["target_num_replicas"],
                "required_resources": {"CPU": (definition.get("ray_actor_options") or {}).get("num_cpus", 1)},
                "replicas": replicas,
            }
        return {
            "name": app,
            "route_prefix": status["route_prefix"],
            "docs_path": None,
            "status": status["status"],
            "message": status["message"],
            "last_deployed_time_s": status["last_deployed_time_s"],
            "deployed_app_config": self.app_configs.get(app),
            "source": self.sources.get(app, "imperative"),
            "deployments": deployments,
            "external_scaler_enabled": False,
            "deployment_topology": {
                "app_name": app,
                "ingress_deployment": ingress,
                "nodes": {
                    name: {"name": name, "app_name": app, "outbound_deployments": [], "is_ingress": name == ingress}
                    for name in status["deployments"]
                },
            },
        }

    def _publish_details(self, gone: bool = False) -> None:
        """Gives the head the details when they changed (`gone`: Serve is shutting down)."""
        details = "" if gone else json.dumps(self._details(), sort_keys=True, default=str)
        if details == self.details_sent:
            return
        from oxray._private.api import _client

        _client().update_serve(details)
        self.details_sent = details

    def _push_routes(self, force: bool = False) -> str:
        """Gives the agent the current route table when it changed; where its proxy listens."""
        if self.http is None and not force:
            return ""
        table = json.dumps(self._route_table(), sort_keys=True).encode()
        resend = time.monotonic() - self.routes_sent_at > ROUTES_RESEND_S
        if table == self.routes_sent and not force and not resend:
            return ""
        from oxray._private.api import _client

        address = _client().update_serve_routes(table)
        self.routes_sent, self.routes_sent_at = table, time.monotonic()
        return address

    def set_logging_config(self, logging_config) -> None:
        """Serve's own `LoggingConfig` (a dict): for deployments deployed after it whose
        application and themselves set none."""
        with self.lock:
            self.logging_config = logging_config
            self._checkpoint()

    def deploy(
        self, app: str, route_prefix, ingress: str, deployments: list, app_config=None, logging_config=None
    ) -> None:
        """`deployments`: dicts of a deployment's name, its cloudpickled definition and arguments,
        its actor options and user_config, and the engine's settings. `ValueError` names a bad one.
        `app_config`: the config's entry of an application deployed by config (None: `serve.run`);
        `logging_config`: the application's `LoggingConfig` (a dict; a deployment's own wins, then
        this, then Serve's). A deployment whose resolved logging changes gets new replicas."""
        import hashlib

        deployments = [dict(d, engine=dict(d["engine"])) for d in deployments]
        for d in deployments:
            d["resolved_logging"] = d.get("logging_config") or logging_config or self.logging_config
            if d["resolved_logging"] is not None:
                digest = hashlib.sha256(json.dumps(d["resolved_logging"], sort_keys=True).encode()).hexdigest()[:8]
                d["engine"]["code_version"] = f"{d['engine']['code_version']}-log{digest}"
        with self.lock:
            self.sources[app] = "imperative" if app_config is None else "declarative"
            self.app_configs[app] = app_config
            specs = [(d["name"], d["engine"]) for d in deployments]
            self.engine.deploy_app(app, route_prefix, ingress, specs, _now_ms())
            self.ingress[app] = ingress
            for d in deployments:
                key = (app, d["name"])
                self.current[key] = d["engine"]["code_version"]
                self.definitions[(app, d["name"], d["engine"]["code_version"])] = d
            self._act()
            self._forget_definitions(app, {d["name"] for d in deployments})
            self._checkpoint()
        self.wake.set()

    def _forget_definitions(self, app: str, keep: set) -> None:
        """Drops what no replica will be started with again: the engine starts only the current
        version, and its `start` actions were carried out by `_act` (each serve.run would
        otherwise keep its cloudpickled code and arguments for the controller's life)."""
        for key in [k for k in self.definitions if k[0] == app]:
            if key[1] not in keep or self.current.get(key[:2]) != key[2]:
                del self.definitions[key]
        for key in [k for k in self.current if k[0] == app and k[1] not in keep]:
            del self.current[key]

    def fail_app(self, app: str, message: str) -> None:
        with self.lock:
            self.engine.fail_app(app, message, _now_ms())
            self.changed.notify_all()

    def apply_config(self, config: dict) -> None:
        """Ray's `apply_config`: the config's applications are built (a task each, under their
        `runtime_env`) and deployed; applications an earlier config deployed that this one lacks
        are deleted, those `serve.run` deployed are left alone. HTTP starts with the config's
        `http_options` (host 127.0.0.1 unless it names one) if it is not running."""
        from oxray._native import check_serve_config

        check_serve_config(json.dumps(config))  # as the REST API checks it: `oxray serve run` comes here directly
        from oxray.serve.config import HTTPOptions, gRPCOptions, proxy_location_of

        if self.http is None:
            options = HTTPOptions.of({k: v for k, v in (config.get("http_options") or {}).items() if v is not None})
            grpc = gRPCOptions.of({k: v for k, v in (config.get("grpc_options") or {}).items() if v is not None})
            self.start_http(options.to_wire(), proxy_location_of(config.get("proxy_location")), grpc.to_wire())
        apps = config.get("applications") or []
        names = {a.get("name", "default") for a in apps}
        if config.get("logging_config") is not None:
            from oxray.serve.schema import LoggingConfig

            self.set_logging_config(LoggingConfig.of(config["logging_config"]).dict())
        with self.lock:
            for name, source in list(self.sources.items()):
                if source == "declarative" and name not in names:
                    self.engine.delete_app(name, _now_ms())
                    self.sources.pop(name, None)
            for name in set(self.latest_builds) - names:
                del self.latest_builds[name]  # a build still running for it is stale
            self._act()
            for app in apps:
                self._start_build(app)
            self._checkpoint()
        self.wake.set()

    def _start_build(self, app: dict) -> None:
        """Builds a config's application in a task under its `runtime_env`; `_built` deploys it."""
        import hashlib

        from oxray.serve._private.build import build_application

        name = app.get("name", "default")
        version = hashlib.sha256(json.dumps(app, sort_keys=True).encode()).hexdigest()[:16]
        options = {"num_cpus": 0}
        if app.get("runtime_env"):
            options["runtime_env"] = app["runtime_env"]
        self.latest_builds[name] = version
        self.building[ray.remote(build_application).options(**options).remote(app, version)] = (name, app, version)

    def delete(self, app: str) -> None:
        with self.lock:
            self.engine.delete_app(app, _now_ms())
            self._act()
            self._forget_definitions(app, set())
            self._checkpoint()
        self.wake.set()

    def status(self) -> list:
        with self.lock:
            return self.engine.status()

    def _metrics_snapshot(self) -> tuple:
        """The applications' statuses and `(app, deployment, replica)` of every replica requests
        go to (healthy ones), read together for the controller's metrics."""
        with self.lock:
            statuses = self.engine.status()
            serving = [
                (app["name"], deployment, replica)
                for app in statuses
                for deployment in app["deployments"]
                for replica in self.engine.serving(app["name"], deployment)
            ]
        return statuses, serving

    def ingress_of(self, app: str):
        with self.lock:
            known = any(s["name"] == app for s in self.engine.status())
            return self.ingress.get(app) if known else None

    def wait_serving(self, app: str, deployment: str, timeout_s: float, source: str = "", queued: int = 0):
        """The replicas of the deployment that serve (id -> actor), once there is one (or after
        `timeout_s`, or at once when none will come: the deployment failed, is deleted or unknown),
        how often the handle reports its load (None: not autoscaled), its `max_ongoing_requests`
        and `max_queued_requests`, with no replica why, and the multiplexed models each holds. A
        handle with `queued` calls and no replica reports them first: an autoscaled deployment at
        zero starts one at once."""
        deadline = time.monotonic() + timeout_s
        with self.changed:
            interval = self._metrics_interval(app, deployment)
            if interval is not None and queued and not self.engine.serving(app, deployment):
                self.engine.record_requests(app, deployment, source, float(queued), _now_ms())
                self._act()
                self.wake.set()
            while True:
                serving = {
                    rid: self.replicas[(app, deployment, rid)]
                    for rid in self.engine.serving(app, deployment)
                    if (app, deployment, rid) in self.replicas
                }
                left = deadline - time.monotonic()
                status = next((s for s in self.engine.status() if s["name"] == app), None)
                state = status and status["deployments"].get(deployment)
                limits = self._max_ongoing(app, deployment), self._max_queued(app, deployment)
                if serving:
                    models = {rid: self.models.get((app, deployment, rid), []) for rid in serving}
                    return serving, interval, *limits, "", models
                if state is None or status["status"] == "DELETING" or state["status"] == "DEPLOY_FAILED":
                    why = "it is not deployed" if state is None or status["status"] == "DELETING" else "DEPLOY_FAILED"
                    return {}, interval, *limits, why, {}
                if left <= 0:
                    return {}, interval, *limits, f"waited {timeout_s:g} s", {}
                self.changed.wait(left)

    def replica_unreachable(self, app: str, deployment: str, replica: str, actor) -> None:
        """A handle's call found this replica's actor dead: it is replaced now, not at its next
        health check. A report about an actor the replica no longer has (a replica id repeats
        after a delete) is stale: ignored."""
        with self.lock:
            key = (app, deployment, replica)
            if actor is None or self.replicas.get(key) != actor:
                return
            self._forget_replica(key)
            self._drop_pending(key)
            self.engine.replica_died(*key, "the replica's actor died (found by a handle's call)", _now_ms())
            self._act()
        self.wake.set()

    def record_multiplexed_models(self, app: str, deployment: str, replica: str, model_ids: list) -> None:
        """A replica's multiplexed models now (routers send a model's requests to replicas that
        hold it); a report from a replica the controller no longer has is dropped."""
        with self.lock:
            key = (app, deployment, replica)
            if key in self.replicas:
                self.models[key] = list(model_ids)

    def record_requests(self, app: str, deployment: str, source: str, requests: float) -> None:
        """A handle's calls in flight and queued to the deployment, for its autoscaler."""
        with self.lock:
            self.engine.record_requests(app, deployment, source, float(requests), _now_ms())

    def record_proxy_load(self, report) -> None:
        """An HTTP proxy's requests to an autoscaled deployment (JSON, from the Rust proxy); a
        first request to one at zero replicas starts one at once, as a handle's does."""
        report = json.loads(bytes(report))
        with self.lock:
            app, deployment = report["app"], report["deployment"]
            self.engine.record_requests(app, deployment, report["source"], float(report["requests"]), _now_ms())
            if report["requests"] and not self.engine.serving(app, deployment):
                self._act()
                self.wake.set()

    def _current(self, app: str, deployment: str):
        """What the deployment's current version's replicas are started with (None once it is gone)."""
        return self.definitions.get((app, deployment, self.current.get((app, deployment))))

    def _max_ongoing(self, app: str, deployment: str):
        definition = self._current(app, deployment)
        return definition["max_ongoing_requests"] if definition else None

    def _max_queued(self, app: str, deployment: str) -> int:
        definition = self._current(app, deployment)
        return definition.get("max_queued_requests", -1) if definition else -1

    def _metrics_interval(self, app: str, deployment: str):
        definition = self._current(app, deployment)
        autoscaling = definition and definition["engine"].get("autoscaling_config")
        return autoscaling["metrics_interval_s"] if autoscaling else None

    def wait_app(self, app: str, timeout_s: float, gone: bool = False):
        """The application's status once it is RUNNING or failed (or gone, with `gone`); None when
        it is not there (or after `timeout_s`, the last status seen)."""
        deadline = time.monotonic() + timeout_s
        with self.changed:
            while True:
                status = next((s for s in self.engine.status() if s["name"] == app), None)
                if gone and status is None:
                    return None
                if not gone and (status is None or status["status"] in ("RUNNING", "DEPLOY_FAILED", "UNHEALTHY")):
                    # The proxies route to it before serve.run returns.
                    self._push_routes()
                    return status
                left = deadline - time.monotonic()
                if left <= 0:
                    return status
                self.changed.wait(left)

    def shutdown(self, timeout_s: float) -> bool:
        """Deletes every application and waits for their replicas to stop; whether all did."""
        with self.lock:
            for status in self.engine.status():
                self.engine.delete_app(status["name"], _now_ms())
            self._act()
        self.wake.set()
        deadline = time.monotonic() + timeout_s
        with self.changed:
            while self.engine.status() and time.monotonic() < deadline:
                self.changed.wait(deadline - time.monotonic())
            done = not self.engine.status()
            # Replicas are detached: one still stopping (a graceful timeout above the wait) would
            # outlive the controller.
            for key in list(self.replicas):
                self._kill(key)
            if self.http is not None:
                self.http = self.grpc = None
                try:
                    self._push_routes(force=True)  # no http: the proxies stop
                except Exception:  # noqa: BLE001 - the node is going away
                    traceback.print_exc()
            try:
                self._publish_details(gone=True)
                self._save_checkpoint(b"")  # nothing to take back after a restart
            except Exception:  # noqa: BLE001 - the head is going away
                traceback.print_exc()
        self.running = False
        return done

    # The control loop.

    def _loop(self) -> None:
        while self.running:
            try:
                self._pass()
            except Exception:  # noqa: BLE001 - the loop must outlive one bad pass, or every deploy hangs
                traceback.print_exc()
                time.sleep(CONTROL_LOOP_S)

    def _pass(self) -> None:
        """One pass: the engine's tick and actions, then the replicas' calls that completed (the
        wait between, for calls or a wake-up, is not counted in the loop's duration)."""
        started = time.perf_counter()
        with self.lock:
            self.engine.tick(_now_ms())
            self._act()
            for key, code_version in list(self.deferred.items()):
                del self.deferred[key]
                self._start_or_fail(key, code_version)
            refs = list(self.pending) + list(self.building)
        busy = time.perf_counter() - started
        if refs:
            ready, _ = ray.wait(refs, num_returns=1, timeout=CONTROL_LOOP_S)
            if ready:
                ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        else:
            self.wake.wait(CONTROL_LOOP_S)
            self.wake.clear()
            ready = []
        started = time.perf_counter()
        try:
            with self.lock:
                for ref in ready:
                    if ref in self.building:
                        self._built(ref)
                    else:
                        self._completed(ref)
                self._act()
                self.changed.notify_all()
                self._push_routes()
                self._publish_details()
        finally:
            self.metrics.control_loop(busy + time.perf_counter() - started)

    def _act(self) -> None:
        for kind, app, deployment, replica, versions, _graceful_s in self.engine.take_actions():
            key = (app, deployment, replica)
            if kind == "start":
                self._start_or_fail(key, versions[0])
            elif kind == "reconfigure":
                self._call(key, "reconfigure", self._current(app, deployment)["user_config"], versions[1])
            elif kind == "check_health":
                self._call(key, "check_health")
            elif kind == "stop":
                definition = self._current(app, deployment)
                wait_loop_s = definition["graceful_shutdown_wait_loop_s"] if definition else 2.0
                self._call(key, "stop", wait_loop_s)
            elif kind == "kill":
                self._kill(key)
        self.changed.notify_all()

    def _start_or_fail(self, key: tuple, code_version: str) -> None:
        try:
            self._start(key, code_version)
        except Exception as e:  # noqa: BLE001 - e.g. ray_actor_options Ray refuses: a failed start
            self._forget_replica(key)
            self.engine.replica_start_failed(*key, _traceback(e), _now_ms())

    def _start(self, key: tuple, code_version: str) -> None:
        app, deployment, replica = key
        definition = self.definitions[(app, deployment, code_version)]
        options = dict(definition["ray_actor_options"])
        options.setdefault("num_cpus", 1)
        per_node = definition.get("max_replicas_per_node")
        if per_node is not None:
            node = self._node_with_room(app, deployment, options, per_node)
            if node is None:
                self.deferred[key] = code_version  # started once a node has room (a new one, say)
                return
            from oxray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            self.nodes_of[key] = node
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=False)
        group = definition.get("placement_group")
        if group is not None:
            from oxray.util.placement_group import placement_group
            from oxray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            # Its own group, as in Ray: the replica in bundle 0, the tasks and actors it starts
            # in the group too; removed with the replica.
            self.groups[key] = pg = placement_group(
                group["bundles"],
                strategy=group["strategy"],
                name=replica_actor_name(app, deployment, replica),
                lifetime="detached",
                bundle_label_selector=group["bundle_label_selector"],
            )
            options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                pg, placement_group_bundle_index=0, placement_group_capture_child_tasks=True
            )
        actor = (
            ray.remote(ServeReplica)
            .options(
                name=replica_actor_name(app, deployment, replica),
                namespace=SERVE_NAMESPACE,
                lifetime="detached",
                max_concurrency=definition["max_ongoing_requests"],
                concurrency_groups={
                    CONTROL_GROUP: CONTROL_CALLS,
                    STREAM_GROUP: max(STREAM_CALLS, 4 * definition["max_ongoing_requests"]),
                    HTTP_CONTROL_GROUP: HTTP_CONTROL_CALLS,
                },
                **options,
            )
            .remote(app, deployment, replica)
        )
        self.replicas[key] = actor
        self.started_at[key] = time.time()
        ref = actor.initialize.remote(
            definition["definition"],
            definition["arguments"],
            definition["user_config"],
            definition["has_user_config"],
            (code_version, definition["engine"].get("config_version", "")),
            definition.get("resolved_logging"),
        )
        self.pending[ref] = ("start", key)

    def _node_with_room(self, app: str, deployment: str, options: dict, per_node: int):
        """`max_replicas_per_node`: the live node with the fewest of the deployment's replicas,
        below the limit, whose resources can hold one; None when no node has room."""
        needs = {
            "CPU": options.get("num_cpus", 1),
            "GPU": options.get("num_gpus", 0),
            **(options.get("resources") or {}),
        }
        counts: dict = {}
        for (a, d, _), node in self.nodes_of.items():
            if (a, d) == (app, deployment):
                counts[node] = counts.get(node, 0) + 1
        fitting = [
            n["NodeID"]
            for n in ray.nodes()
            if n["Alive"] and all(n["Resources"].get(k, 0) >= v for k, v in needs.items() if v)
        ]
        room = [node for node in fitting if counts.get(node, 0) < per_node]
        return min(room, key=lambda node: counts.get(node, 0)) if room else None

    def _call(self, key: tuple, kind: str, *args) -> None:
        actor = self.replicas.get(key)
        if actor is None:
            if kind == "stop":  # no actor to stop: stopped now, not at the kill timeout
                self.deferred.pop(key, None)
                self.engine.replica_stopped(*key, _now_ms())
            return
        method = {"reconfigure": "reconfigure", "check_health": "check_health", "stop": "graceful_shutdown"}[kind]
        call = getattr(actor, method).options(concurrency_group=CONTROL_GROUP)
        self.pending[call.remote(*args)] = (kind, key)

    def _forget_replica(self, key: tuple):
        """Drops what the controller keeps of a replica (its placement group is removed); its
        actor (None if it had none)."""
        self.started_at.pop(key, None)
        self.identities.pop(key, None)
        self.models.pop(key, None)
        self.nodes_of.pop(key, None)
        self.deferred.pop(key, None)
        group = self.groups.pop(key, None)
        if group is not None:
            from oxray.util.placement_group import remove_placement_group

            try:
                remove_placement_group(group)
            except Exception:  # noqa: BLE001 - gone already
                pass
        return self.replicas.pop(key, None)

    def _kill(self, key: tuple) -> None:
        _kill_actor(self._forget_replica(key))
        self._drop_pending(key)
        self.engine.replica_stopped(*key, _now_ms())

    def _drop_pending(self, key: tuple) -> None:
        """Forgets the calls in flight to a replica that is gone."""
        for ref in [ref for ref, (_, pending_key) in self.pending.items() if pending_key == key]:
            del self.pending[ref]

    def _built(self, ref) -> None:
        """A config's application was built: deployed, or failed with the build's traceback (the
        other applications keep serving)."""
        name, app, version = self.building.pop(ref)
        if self.latest_builds.get(name) != version:
            return  # a later config replaced (or dropped) this application while it built
        try:
            ingress, deployments = ray.get(ref)
        except Exception as e:  # noqa: BLE001 - an import error, a bad builder: the app's status says it
            self.sources[name], self.app_configs[name] = "declarative", app
            self.engine.fail_app(name, f"Failed to build application {name!r}:\n{_traceback(e)}", _now_ms())
            self._checkpoint()  # no longer building
            return
        try:
            from oxray.serve.schema import LoggingConfig

            app_logging = LoggingConfig.of(app.get("logging_config"))
            self.deploy(
                name,
                app.get("route_prefix", "/"),
                ingress,
                deployments,
                app_config=app,
                logging_config=app_logging.dict() if app_logging else None,
            )
        except Exception as e:  # noqa: BLE001 - e.g. a route prefix another application has
            self.engine.fail_app(name, f"Failed to deploy application {name!r}: {e}", _now_ms())

    def _completed(self, ref) -> None:
        entry = self.pending.pop(ref, None)
        if entry is None:
            return
        kind, key = entry
        now = _now_ms()
        try:
            started = ray.get(ref)
            error = None
        except ray.exceptions.RayActorError as e:
            if kind == "stop":
                self._kill(key)
            elif kind == "start":
                # Its process died while the constructor ran (os._exit, a crash in native code): a
                # failed start, counted toward max_constructor_retry_count, not retried for ever.
                self._forget_replica(key)
                self.engine.replica_start_failed(*key, f"The replica's actor died while starting: {e}", now)
            else:
                self._forget_replica(key)
                self.engine.replica_died(*key, f"{type(e).__name__}: {e}", now)
            return
        except Exception as e:  # noqa: BLE001 - the user's code raised: reported with its traceback
            error = _traceback(e)
        if kind == "start":
            if error is None:
                self.identities[key] = started
                self.engine.replica_started(*key, now)
            else:
                _kill_actor(self._forget_replica(key))
                self.engine.replica_start_failed(*key, error, now)
        elif kind == "reconfigure":
            if error is None:
                self.engine.replica_reconfigured(*key, now)
            else:
                self._kill(key)
        elif kind == "check_health":
            if error is not None:
                self.metrics.health_check_failed(*key)
            self.engine.health_checked(*key, error is None, error or "", now)
        elif kind == "stop":
            self._kill(key)


def _deployment_config(name: str, definition: dict) -> dict:
    """Ray's `DeploymentSchema` of a deployment's effective options."""
    engine = definition.get("engine") or {}
    config = {
        "name": name,
        "max_ongoing_requests": definition.get("max_ongoing_requests", 5),
        "max_queued_requests": definition.get("max_queued_requests", -1),
        "user_config": definition.get("user_config"),
        "graceful_shutdown_wait_loop_s": definition.get("graceful_shutdown_wait_loop_s", 2.0),
        "graceful_shutdown_timeout_s": engine.get("graceful_shutdown_timeout_s", 20.0),
        "health_check_period_s": engine.get("health_check_period_s", 10.0),
        "health_check_timeout_s": engine.get("health_check_timeout_s", 30.0),
        "ray_actor_options": definition.get("ray_actor_options") or {},
        "rolling_update_percentage": engine.get("rolling_update_percentage", 0.2),
        "max_surge_percent": engine.get("max_surge_percent", 0.0),
    }
    if engine.get("autoscaling_config"):
        config["autoscaling_config"] = engine["autoscaling_config"]
    else:
        config["num_replicas"] = engine.get("num_replicas", 1)
    return config
