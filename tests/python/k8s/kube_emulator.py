"""An emulated Kubernetes API server for the operator's tests: kmock's
`KubernetesEmulator` (an in-memory API on loopback: create, get, list, patch,
delete, finalizers, watch) on a thread of its own, stamping each object with
the `uid`, `creationTimestamp`, `resourceVersion` and `generation` a real API
server sets (kube-rs's watcher needs them). There is no garbage collector: the
tests check owner references and the operator's finalizer instead.

`Kube` is the client side the tests use: create, get, list, patch, delete, and
waits on conditions, over the emulator's HTTP API as kubectl would."""

import asyncio
import base64
import datetime
import itertools
import json
import threading
import urllib.error
import urllib.request
import uuid

import kmock

RESOURCES = {
    "pods": "v1/pods",
    "services": "v1/services",
    "secrets": "v1/secrets",
    "oxrayclusters": "oxray.io/v1/oxrayclusters",
    "oxrayjobs": "oxray.io/v1/oxrayjobs",
    "oxrayservices": "oxray.io/v1/oxrayservices",
}
# What `helm install` and `kubectl apply` also touch: kind, namespaced (for discovery).
OTHER_RESOURCES = {
    "v1/serviceaccounts": ("ServiceAccount", True),
    "v1/configmaps": ("ConfigMap", True),
    "v1/namespaces": ("Namespace", False),
    "apps/v1/deployments": ("Deployment", True),
    "rbac.authorization.k8s.io/v1/clusterroles": ("ClusterRole", False),
    "rbac.authorization.k8s.io/v1/clusterrolebindings": ("ClusterRoleBinding", False),
    "rbac.authorization.k8s.io/v1/roles": ("Role", True),
    "rbac.authorization.k8s.io/v1/rolebindings": ("RoleBinding", True),
    "apiextensions.k8s.io/v1/customresourcedefinitions": ("CustomResourceDefinition", False),
}
KINDS = {
    "v1/pods": ("Pod", True),
    "v1/services": ("Service", True),
    "v1/secrets": ("Secret", True),
    "oxray.io/v1/oxrayclusters": ("OxrayCluster", True),
    "oxray.io/v1/oxrayjobs": ("OxrayJob", True),
    "oxray.io/v1/oxrayservices": ("OxrayService", True),
    **OTHER_RESOURCES,
}


class StampingEmulator(kmock.KubernetesEmulator):
    """Sets the metadata a real API server sets on every write."""

    _versions = itertools.count(1)

    async def _handle(self, request):
        if request.resource is not None and isinstance(request.data, dict):
            meta = request.data.setdefault("metadata", {})
            if request.action == kmock.action.UPDATE and self._is_apply(request):
                await self._create_if_missing(request)
            if request.action == kmock.action.CREATE:
                if request.resource.plural == "secrets" and "stringData" in request.data:
                    # As the API server does: stringData is written into data, base64.
                    string_data = request.data.pop("stringData")
                    data = request.data.setdefault("data", {})
                    data.update({k: base64.b64encode(v.encode()).decode() for k, v in string_data.items()})
                self._stamp_new(meta, request.namespace)
            if request.action in (kmock.action.CREATE, kmock.action.UPDATE):
                meta["resourceVersion"] = str(next(self._versions))
        return await super()._handle(request)

    async def _serve_list(self, request):
        """A list with its `kind` and `apiVersion`, which kubectl needs to decode it."""
        listing = await super()._serve_list(request)
        resource = request.resource
        path = f"{resource.group}/{resource.version}/{resource.plural}".lstrip("/")
        kind = KINDS.get(path, (resource.plural.capitalize(), True))[0]
        listing["kind"] = f"{kind}List"
        listing["apiVersion"] = f"{resource.group}/{resource.version}".lstrip("/")
        return listing

    async def _serve_version(self, request):
        """Discovery of a group version; the core group's is `v1`, not kmock's `/v1`."""
        listing = await super()._serve_version(request)
        listing["groupVersion"] = listing["groupVersion"].lstrip("/")
        return listing

    @staticmethod
    def _stamp_new(meta, namespace):
        """What the API server sets on an object it creates."""
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
        meta.setdefault("generation", 1)
        if meta.get("namespace") is None and namespace:
            meta["namespace"] = namespace

    @staticmethod
    def _is_apply(request):
        """A server-side apply (what helm 4 and `kubectl apply --server-side` send)."""
        return any(k.lower() == "content-type" and "apply-patch" in v for k, v in request.headers.items())

    async def _create_if_missing(self, request):
        """Server-side apply creates what does not exist yet (kmock's PATCH only patches)."""
        key = (request.resource, request.namespace, request.name)
        async with self._lock:
            if key in self.objects and not self.objects[key].deleted:
                return
            meta = request.data["metadata"]
            self._stamp_new(meta, request.namespace)
            meta["resourceVersion"] = str(next(self._versions))
            if key in self.objects:
                self.objects[key].create(request.data)
            else:
                self.objects[key] = request.data
            await self._buses[request.resource].put({"type": "ADDED", "object": self.objects[key].last.raw})


class EmulatedApiServer:
    """The emulator served on 127.0.0.1 from a background thread."""

    def __init__(self):
        self._ready = threading.Event()
        self._stop = None
        self._loop = None
        self.url = None
        self.error = None
        self._thread = threading.Thread(target=self._run, name="kube-emulator", daemon=True)

    def __enter__(self):
        self._thread.start()
        if not self._ready.wait(30) or self.url is None:
            raise RuntimeError(f"the Kubernetes emulator did not start: {self.error}")
        return self

    def __exit__(self, *exc):
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def _run(self):
        try:
            asyncio.run(self._serve())
        except Exception as e:  # surfaced by __enter__
            self.error = repr(e)
            self._ready.set()

    async def _serve(self):
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with StampingEmulator() as emulator, kmock.Server(emulator) as server:
            for path, (kind, namespaced) in KINDS.items():
                verbs = ["get", "list", "watch", "create", "update", "patch", "delete"]
                singular = kind.lower()
                emulator.resources[path] = {
                    "kind": kind,
                    "singular": singular,
                    "namespaced": namespaced,
                    "verbs": verbs,
                    "subresources": ["status"],
                }
            self.url = str(server.url).rstrip("/")
            self._ready.set()
            await self._stop.wait()

    def kubeconfig(self, path):
        """A kubeconfig (plain http, no credentials) for the operator."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "emulated", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {}}],
            "contexts": [
                {"name": "emulated", "context": {"cluster": "emulated", "user": "tester", "namespace": "default"}}
            ],
            "current-context": "emulated",
        }
        with open(path, "w") as f:
            json.dump(config, f)
        return str(path)


class Kube:
    """A small client for the emulated API (what the tests do with kubectl)."""

    def __init__(self, url, namespace="default"):
        self.url = url
        self.namespace = namespace

    def _path(self, kind, name=None, subresource=None):
        group_version, plural = RESOURCES[kind].rsplit("/", 1)
        prefix = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
        path = f"{prefix}/namespaces/{self.namespace}/{plural}"
        if name:
            path += f"/{name}"
        if subresource:
            path += f"/{subresource}"
        return self.url + path

    def _call(self, method, url, body=None, content_type="application/json"):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": content_type})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise AssertionError(f"{method} {url} answered {e.code}: {e.read().decode(errors='replace')}") from e

    def create(self, kind, manifest):
        return self._call("POST", self._path(kind), manifest)

    def get(self, kind, name):
        return self._call("GET", self._path(kind, name))

    def list(self, kind, labels=None):
        items = (self._call("GET", self._path(kind)) or {}).get("items", [])
        if labels:
            items = [i for i in items if all(i["metadata"].get("labels", {}).get(k) == v for k, v in labels.items())]
        return items

    def names(self, kind, labels=None):
        return sorted(i["metadata"]["name"] for i in self.list(kind, labels))

    def patch(self, kind, name, body, subresource=None):
        return self._call("PATCH", self._path(kind, name, subresource), body, "application/merge-patch+json")

    def delete(self, kind, name):
        return self._call("DELETE", self._path(kind, name))
