"""A stand-in for the kubelet, kube-proxy and cluster DNS over the emulated API
server: each pod the operator creates runs as real processes on this host,
exactly as its spec says (init containers, then the first container's command
with its env: the token from the Secret, the pod's IP from the downward API),
in a private directory and on an address of its own (127.0.0.N, so that pods
can use the same ports, as in their own network namespaces). The Service's DNS
name resolves to the pod its selector picks. The pod's status (phase, IP, the
Ready condition once its ports answer) is written back to the API; a pod
deleted in the API has its processes stopped, and one whose process exits is
marked Failed."""

import base64
import os
import signal
import socket
import subprocess
import sys
import threading

VENV_BIN = os.path.dirname(sys.executable)


def port_open(ip, port):
    try:
        socket.create_connection((ip, port), timeout=0.5).close()
        return True
    except OSError:
        return False


class RunningPod:
    def __init__(self, name, uid, ip, log_path):
        self.name = name
        self.uid = uid
        self.ip = ip
        self.log_path = log_path
        self.process = None
        self.init_process = None
        self.lock = threading.Lock()
        self.ready = False
        self.failed = False


class FakeKubelet:
    def __init__(self, kube, root):
        self.kube = kube
        self.root = str(root)
        self.pods = {}
        self._addresses = iter(f"127.0.0.{n}" for n in range(2, 250))
        # A pod made again under the same name gets the same address: it stands in for the Service's
        # stable ClusterIP, which workers keep using when the head pod is replaced.
        self._address_of = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="fake-kubelet", daemon=True)
        self.errors = []

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(30)
        for pod in list(self.pods.values()):
            self._kill(pod)

    def log_of(self, name):
        pod = self.pods.get(name)
        if pod is None:
            return ""
        with open(pod.log_path, errors="replace") as f:
            return f.read()

    def _loop(self):
        while not self._stop.is_set():
            try:
                self._sync()
            except Exception as e:  # shown by the tests that wait on pods
                self.errors.append(repr(e))
            self._stop.wait(0.2)

    def _sync(self):
        listed = {p["metadata"]["name"]: p for p in self.kube.list("pods")}
        for name, running in list(self.pods.items()):
            pod = listed.get(name)
            replaced = pod is not None and pod["metadata"]["uid"] != running.uid
            if pod is None or replaced or pod["metadata"].get("deletionTimestamp"):
                self._kill(running)
                del self.pods[name]
        for name, pod in listed.items():
            if name not in self.pods and not pod["metadata"].get("deletionTimestamp"):
                started = self._start(pod)
                if started is not None:
                    self.pods[name] = started
        for name, running in self.pods.items():
            if running.failed:
                continue
            if running.process is not None and running.process.poll() is not None:
                running.failed = True
                self._set_status(name, "Failed", running.ip, ready=False)
                continue
            if not running.ready and self._answers(listed.get(name), running.ip):
                running.ready = True
                self._set_status(name, "Running", running.ip, ready=True)

    def _answers(self, pod, ip):
        ports = [p["containerPort"] for p in pod["spec"]["containers"][0].get("ports", [])]
        return bool(ports) and all(port_open(ip, port) for port in ports)

    def _set_status(self, name, phase, ip, ready):
        condition = {"type": "Ready", "status": "True" if ready else "False"}
        self.kube.patch("pods", name, {"status": {"phase": phase, "podIP": ip, "conditions": [condition]}}, "status")

    def _resolve(self, value):
        """Cluster DNS: a Service's name (`svc.ns.svc[.cluster.local]`) becomes the IP of the pod it selects."""
        for service in self.kube.list("services"):
            meta = service["metadata"]
            short = f"{meta['name']}.{meta['namespace']}.svc"
            for host in (f"{short}.cluster.local", short):
                if host in value:
                    selector = service["spec"]["selector"]
                    picked = [
                        p
                        for p in list(self.pods.values())
                        if not p.failed and self._labels_of(p.name).items() >= selector.items()
                    ]
                    if not picked:
                        return None
                    return value.replace(host, picked[0].ip)
        return value

    def _labels_of(self, name):
        pod = self.kube.get("pods", name)
        return (pod or {}).get("metadata", {}).get("labels", {})

    def _env(self, pod, container, ip):
        env = {
            **os.environ,
            "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}",
            "OXRAY_TEMP_DIR": self._pod_dir(pod),
        }
        env.pop("OXRAY_TOKEN", None)
        for var in container.get("env", []):
            if "value" in var:
                value = self._resolve(var["value"])
                if value is None:
                    return None  # the Service has no pod behind it yet
                env[var["name"]] = value
                continue
            source = var.get("valueFrom", {})
            if "secretKeyRef" in source:
                ref = source["secretKeyRef"]
                secret = self.kube.get("secrets", ref["name"])
                if secret is None:
                    return None
                env[var["name"]] = base64.b64decode(secret["data"][ref["key"]]).decode()
            elif "fieldRef" in source:
                path = source["fieldRef"]["fieldPath"]
                env[var["name"]] = {"status.podIP": ip, "metadata.name": pod["metadata"]["name"]}[path]
        return env

    def _start(self, pod):
        """Gives the pod an address and starts it on a thread of its own (its init containers may wait)."""
        name = pod["metadata"]["name"]
        if name not in self._address_of:
            self._address_of[name] = next(self._addresses)
        log_path = os.path.join(self.root, f"{name}-{pod['metadata']['uid'][:8]}.log")
        running = RunningPod(name, pod["metadata"]["uid"], self._address_of[name], log_path)
        os.makedirs(self._pod_dir(pod), mode=0o700, exist_ok=True)
        self._set_status(name, "Pending", running.ip, ready=False)
        threading.Thread(target=self._run_pod_reporting, args=(pod, running), name=f"pod-{name}", daemon=True).start()
        return running

    def _env_when_ready(self, pod, container, ip):
        while not self._stop.is_set() and name_listed(self.kube, pod["metadata"]["name"]):
            env = self._env(pod, container, ip)
            if env is not None:
                return env
            self._stop.wait(0.2)
        return None

    def _run_pod_reporting(self, pod, running):
        try:
            self._run_pod(pod, running)
        except Exception as e:  # shown by the tests that wait on pods
            self.errors.append(f"{running.name}: {e!r}")

    def _run_pod(self, pod, running):
        spec = pod["spec"]
        with open(running.log_path, "ab") as log:
            for init in spec.get("initContainers", []):
                env = self._env_when_ready(pod, init, running.ip)
                if env is None:
                    return
                running.init_process = subprocess.Popen(
                    init["command"] + init.get("args", []), env=env, stdout=log, stderr=log, start_new_session=True
                )
                if running.init_process.wait() != 0:
                    running.failed = True
                    self._set_status(running.name, "Failed", running.ip, ready=False)
                    return
            container = spec["containers"][0]
            env = self._env_when_ready(pod, container, running.ip)
            if env is None or running.failed:
                return
            # Each pod has its own network namespace: what it binds on 0.0.0.0 is its own address.
            command = [part.replace("0.0.0.0", running.ip) for part in container["command"] + container.get("args", [])]
            for mount_path, host_path in self._mounts(pod, container).items():
                command = [part.replace(mount_path, host_path) for part in command]
            with running.lock:
                if not running.failed:
                    running.process = subprocess.Popen(command, env=env, stdout=log, stderr=log, start_new_session=True)

    def _pod_dir(self, pod):
        """The pod's own files (its container's filesystem): a new pod under an old name starts empty."""
        return os.path.join(self.root, f"{pod['metadata']['name']}-{pod['metadata']['uid'][:8]}")

    def _mounts(self, pod, container):
        """Volume mounts as host directories: a claim's outlives its pods, an emptyDir's is the pod's
        (/dev/shm stays the host's)."""
        volumes = {v["name"]: v for v in pod["spec"].get("volumes", [])}
        mounts = {}
        for mount in container.get("volumeMounts", []):
            if mount["mountPath"] == "/dev/shm":
                continue
            volume = volumes.get(mount["name"], {})
            if "persistentVolumeClaim" in volume:
                host = os.path.join(self.root, "claims", volume["persistentVolumeClaim"]["claimName"])
            else:
                host = os.path.join(self._pod_dir(pod), "volumes", mount["name"])
            os.makedirs(host, mode=0o700, exist_ok=True)
            os.chmod(host, 0o700)
            mounts[mount["mountPath"]] = host
        return mounts

    def _kill(self, running):
        with running.lock:
            running.failed = True  # nothing more starts for it
        for process in (running.init_process, running.process):
            if process is None or process.poll() is not None:
                continue
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(5)


def name_listed(kube, name):
    pod = kube.get("pods", name)
    return pod is not None and not pod["metadata"].get("deletionTimestamp")
