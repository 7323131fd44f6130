"""The operator against an emulated API server (kmock), with the pods it makes
run as real `oxray start` processes by a fake kubelet: a cluster becomes ready
with its workers joined through the Service's name and the Secret's token; a
dead worker is replaced; deleting the cluster removes everything it owned;
demand on the head scales a group up and idle workers are removed; an
OxrayJob is submitted through the Jobs API, its status mirrored, and its own
cluster deleted when it ends; a bad spec is refused with a condition."""

import base64
import json
import os
import signal
import ssl
import urllib.request

import pytest

from oxray_testutil import wait_until
from pki_testutil import write_test_pki

MiB = 1024**2
IMAGE = "localhost/oxray:test"


def template():
    return {"spec": {"containers": [{"name": "oxray", "image": IMAGE}]}}


def cluster_manifest(name, workers=2, min_workers=0, max_workers=4, autoscaling=None):
    spec = {
        "headGroupSpec": {
            "rayStartParams": {"num-cpus": "0", "object-store-memory": str(256 * MiB)},
            "template": template(),
        },
        "workerGroupSpecs": [
            {
                "groupName": "cpu",
                "replicas": workers,
                "minReplicas": min_workers,
                "maxReplicas": max_workers,
                "rayStartParams": {"num-cpus": "1", "object-store-memory": str(256 * MiB)},
                "template": template(),
            }
        ],
    }
    if autoscaling is not None:
        spec["enableInTreeAutoscaling"] = True
        spec["autoscalerOptions"] = {"idleTimeoutSeconds": autoscaling}
    return {"apiVersion": "oxray.io/v1", "kind": "OxrayCluster", "metadata": {"name": name}, "spec": spec}


def status(kube, kind, name):
    return (kube.get(kind, name) or {}).get("status") or {}


def head_call(ip, path, token, method="GET", body=None):
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(f"http://{ip}:8265{path}", data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def token_of(kube, cluster):
    secret = kube.get("secrets", f"{cluster}-token")
    return base64.b64decode(secret["data"]["token"]).decode()


def wait_ready(emulated, name, workers, timeout=90):
    def ready():
        s = status(emulated.kube, "oxrayclusters", name)
        return s if s.get("state") == "ready" and s.get("readyWorkerReplicas") == workers else None

    try:
        return wait_until(f"cluster {name} ready with {workers} workers", ready, timeout=timeout)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{emulated.diagnostics()}") from None


def alive_nodes(ip, token):
    code, body = head_call(ip, "/api/v0/nodes?limit=100", token)
    assert code == 200, body
    return [n for n in body["data"]["result"]["result"] if n["state"] == "ALIVE"]


def test_a_cluster_becomes_ready_replaces_dead_workers_and_is_deleted_whole(emulated):
    kube = emulated.kube
    kube.create("oxrayclusters", cluster_manifest("demo", workers=2))
    ready = wait_ready(emulated, "demo", 2)
    assert ready["desiredWorkerReplicas"] == 2
    assert ready["head"]["address"] == "demo-head-svc.default.svc:6379"
    assert [c["status"] for c in ready["conditions"] if c["type"] == "Ready"] == ["True"]

    cluster = kube.get("oxrayclusters", "demo")
    assert cluster["metadata"]["finalizers"] == ["oxray.io/finalizer"]
    uid = cluster["metadata"]["uid"]
    parts = {
        "pods": ["demo-head", "demo-worker-cpu-0", "demo-worker-cpu-1"],
        "services": ["demo-head-svc"],
        "secrets": ["demo-token"],
    }
    for kind, names in parts.items():
        assert kube.names(kind, {"oxray.io/cluster": "demo"}) == names
        for item in kube.list(kind, {"oxray.io/cluster": "demo"}):
            [owner] = item["metadata"]["ownerReferences"]
            owner_fields = (owner["kind"], owner["name"], owner["uid"], owner["controller"])
            assert owner_fields == ("OxrayCluster", "demo", uid, True)

    # The workers joined the head through the Service's name, with the Secret's token,
    # and the head refuses anyone without it.
    head_ip = ready["head"]["podIp"]
    token = token_of(kube, "demo")
    assert len(token) == 64
    assert len(alive_nodes(head_ip, token)) == 3
    code, _ = head_call(head_ip, "/api/v0/nodes", token=None)
    assert code == 401
    worker_pod = kube.get("pods", "demo-worker-cpu-0")
    env = {e["name"]: e for e in worker_pod["spec"]["containers"][0]["env"]}
    assert env["OXRAY_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "demo-token", "key": "token"}
    assert "value" not in env["OXRAY_TOKEN"], "the token never appears in a pod spec"

    # A worker whose process dies is replaced by a new pod.
    dead = emulated.kubelet.pods["demo-worker-cpu-1"]
    os.killpg(dead.process.pid, signal.SIGKILL)
    wait_until("the dead worker's pod to be deleted", lambda: "demo-worker-cpu-1" not in kube.names("pods"))
    wait_until("a replacement worker", lambda: "demo-worker-cpu-2" in kube.names("pods"))
    wait_ready(emulated, "demo", 2)
    wait_until("3 live nodes again", lambda: len(alive_nodes(head_ip, token)) == 3, timeout=60)

    # Deleting the cluster deletes what it owned (the finalizer; the emulator has no garbage collector).
    kube.delete("oxrayclusters", "demo")
    wait_until("the cluster to go", lambda: kube.get("oxrayclusters", "demo") is None)
    for kind in parts:
        assert kube.names(kind, {"oxray.io/cluster": "demo"}) == [], kind
    wait_until("every pod process stopped", lambda: not emulated.kubelet.pods)
    assert emulated.operator.poll() is None, "the operator keeps running"


JOB_SCRIPT = """
import socket
import oxray as ray

ray.init()

@ray.remote(num_cpus=1)
def where(i):
    return ray.get_runtime_context().get_node_id()

nodes = set(ray.get([where.remote(i) for i in range(3)]))
print(f"tasks ran on {len(nodes)} worker node(s)")
"""


def test_demand_scales_a_group_up_a_job_runs_and_idle_workers_go(emulated, tmp_path):
    kube = emulated.kube
    kube.create("oxrayclusters", cluster_manifest("auto", workers=0, min_workers=0, max_workers=3, autoscaling=2))
    ready = wait_ready(emulated, "auto", 0)
    assert kube.names("pods", {"oxray.io/node-type": "worker"}) == []

    script = tmp_path / "job.py"
    script.write_text(JOB_SCRIPT)
    kube.create(
        "oxrayjobs",
        {
            "apiVersion": "oxray.io/v1",
            "kind": "OxrayJob",
            "metadata": {"name": "spread"},
            "spec": {
                "entrypoint": f"python {script}",
                "clusterSelector": {"ray.io/cluster": "auto"},
                "runtimeEnvYAML": "env_vars:\n  FROM_YAML: '1'\n",
            },
        },
    )
    # Three 1-CPU tasks wait on a head with no CPUs: the group grows to its maxReplicas.
    try:
        wait_until(
            "the autoscaler to add 3 workers",
            lambda: status(kube, "oxrayclusters", "auto").get("desiredWorkerReplicas") == 3,
            timeout=60,
        )
        done = wait_until(
            "the job to end",
            lambda: (
                (s := status(kube, "oxrayjobs", "spread")).get("jobDeploymentStatus") in ("Complete", "Failed") and s
            ),
            timeout=120,
        )
    except AssertionError as e:
        raise AssertionError(f"{e}\n{emulated.diagnostics()}") from None
    assert done["jobStatus"] == "SUCCEEDED", done
    assert done["jobDeploymentStatus"] == "Complete"
    assert done["rayClusterName"] == "auto"

    # Its logs come back through the Jobs API.
    head_ip = ready["head"]["podIp"]
    code, logs = head_call(head_ip, f"/api/jobs/{done['jobId']}/logs", token_of(kube, "auto"))
    assert code == 200, logs
    assert "tasks ran on" in logs["logs"], logs

    # Idle for the timeout, the workers are removed, down to minReplicas (0); the shared cluster stays.
    wait_until(
        "idle workers to be removed",
        lambda: (
            status(kube, "oxrayclusters", "auto").get("desiredWorkerReplicas") == 0
            and kube.names("pods", {"oxray.io/node-type": "worker"}) == []
        ),
        timeout=60,
    )
    assert kube.get("oxrayclusters", "auto") is not None
    assert "adding" in emulated.operator_log() and "removing" in emulated.operator_log()


def test_a_job_with_its_own_cluster_deletes_it_when_done(emulated, tmp_path):
    kube = emulated.kube
    cluster_spec = cluster_manifest("unused", workers=1)["spec"]
    kube.create(
        "oxrayjobs",
        {
            "apiVersion": "oxray.io/v1",
            "kind": "OxrayJob",
            "metadata": {"name": "once"},
            "spec": {
                "entrypoint": "python -c \"import os; print('job env', os.environ['GREETING'])\"",
                "runtimeEnvYAML": "env_vars:\n  GREETING: hello\n",
                "rayClusterSpec": cluster_spec,
                "shutdownAfterJobFinishes": True,
                "ttlSecondsAfterFinished": 0,
            },
        },
    )
    try:
        wait_until("the job's cluster", lambda: kube.get("oxrayclusters", "once-cluster"))
        owner = kube.get("oxrayclusters", "once-cluster")["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"]) == ("OxrayJob", "once")
        done = wait_until(
            "the job to end and its cluster to go",
            lambda: (s := status(kube, "oxrayjobs", "once")).get("clusterDeleted") and s,
            timeout=120,
        )
    except AssertionError as e:
        raise AssertionError(f"{e}\n{emulated.diagnostics()}") from None
    assert done["jobStatus"] == "SUCCEEDED", done
    wait_until("the cluster to go", lambda: kube.get("oxrayclusters", "once-cluster") is None)
    assert kube.names("pods", {"oxray.io/cluster": "once-cluster"}) == []
    assert kube.names("secrets") == []


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            lambda s: s["workerGroupSpecs"][0].update(minReplicas=5, maxReplicas=2),
            "minReplicas 5 is above maxReplicas 2",
        ),
        (
            lambda s: s["headGroupSpec"]["rayStartParams"].update(token="abc"),
            "the operator generates the cluster token",
        ),
        (
            lambda s: s["workerGroupSpecs"][0]["rayStartParams"].update({"redis-password": "x"}),
            '"redis-password", which `oxray start` for a worker does not take',
        ),
        (lambda s: s.update(suspend=True), "spec.suspend is not a field oxray's operator supports"),
        (
            lambda s: s["headGroupSpec"]["rayStartParams"].update({"tls-cert": "/certs/tls.crt"}),
            "sets tls-cert, so the head's Jobs API speaks HTTPS only; set spec.tls.caSecretName",
        ),
    ],
)
def test_a_bad_spec_fails_with_a_condition_not_a_crash(emulated, edit, expected):
    kube = emulated.kube
    manifest = cluster_manifest("bad", workers=1)
    edit(manifest["spec"])
    kube.create("oxrayclusters", manifest)
    failed = wait_until(
        "the cluster to fail", lambda: (s := status(kube, "oxrayclusters", "bad")).get("state") == "failed" and s
    )
    assert expected in failed["reason"], failed["reason"]
    [valid] = [c for c in failed["conditions"] if c["type"] == "SpecValid"]
    assert valid["status"] == "False" and expected in valid["message"]
    assert kube.names("pods") == [] and kube.names("secrets") == []
    assert emulated.operator.poll() is None, "the operator keeps running"


def test_a_secret_it_did_not_make_is_never_adopted(emulated):
    # Someone else's Secret under the name the cluster's token would have: using it would hand the
    # cluster's pods (and the operator's calls) a token that is not the cluster's own.
    kube = emulated.kube
    planted = base64.b64encode(b"someone-elses-token").decode()
    kube.create(
        "secrets",
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "taken-token"}, "data": {"token": planted}},
    )
    kube.create("oxrayclusters", cluster_manifest("taken", workers=1))
    failed = wait_until(
        "the cluster to stop on the conflict",
        lambda: (s := status(kube, "oxrayclusters", "taken")).get("state") == "failed" and s,
    )
    [ready] = [c for c in failed["conditions"] if c["type"] == "Ready"]
    assert ready["status"] == "False" and ready["reason"] == "Conflict" and "Secret taken-token" in ready["message"]
    assert kube.names("pods") == [], "no pod was given the planted token"
    assert kube.get("secrets", "taken-token")["data"]["token"] == planted, "the Secret is left as it was"
    assert emulated.operator.poll() is None


def test_a_dead_head_is_replaced_and_keeps_its_state_on_the_state_volume(emulated):
    kube = emulated.kube
    manifest = cluster_manifest("keep", workers=1)
    claim = {"name": "oxray-state", "persistentVolumeClaim": {"claimName": "keep-state"}}
    manifest["spec"]["headGroupSpec"]["template"]["spec"]["volumes"] = [claim]
    kube.create("oxrayclusters", manifest)
    ready = wait_ready(emulated, "keep", 1)
    head_ip, token = ready["head"]["podIp"], token_of(kube, "keep")
    code, submitted = head_call(head_ip, "/api/jobs/", token, "POST", {"entrypoint": "echo kept"})
    assert code == 200, submitted
    job_id = submitted["submission_id"]
    wait_until(
        "the job to succeed", lambda: head_call(head_ip, f"/api/jobs/{job_id}", token)[1]["status"] == "SUCCEEDED"
    )

    # The head's process dies: its pod fails, is deleted, and a new head pod starts on the same volume.
    old_uid = kube.get("pods", "keep-head")["metadata"]["uid"]
    os.killpg(emulated.kubelet.pods["keep-head"].process.pid, signal.SIGKILL)
    wait_until(
        "a new head pod",
        lambda: (pod := kube.get("pods", "keep-head")) is not None and pod["metadata"]["uid"] != old_uid,
        timeout=60,
    )
    wait_ready(emulated, "keep", 1)
    code, job = head_call(head_ip, f"/api/jobs/{job_id}", token)
    assert code == 200 and job["status"] == "SUCCEEDED", (code, job)
    wait_until("the worker back with the new head", lambda: len(alive_nodes(head_ip, token)) == 2, timeout=60)


def condition(kube, name, type_):
    return next((c for c in status(kube, "oxrayclusters", name).get("conditions", []) if c["type"] == type_), None)


def test_a_tls_clusters_head_is_called_over_https_and_only_with_the_ca_spec_tls_names(emulated, tmp_path):
    # Pods run on 127.0.0.N (the fake kubelet's addresses): the certificate names them all.
    certs = write_test_pki(tmp_path, ips=[f"127.0.0.{n}" for n in range(1, 31)])
    kube = emulated.kube
    manifest = cluster_manifest("secure", workers=1)
    tls_params = {"tls-cert": certs["cert"], "tls-key": certs["key"], "tls-ca": certs["ca"]}
    manifest["spec"]["headGroupSpec"]["rayStartParams"].update(tls_params)
    manifest["spec"]["workerGroupSpecs"][0]["rayStartParams"].update(tls_params)
    manifest["spec"]["tls"] = {"caSecretName": "secure-ca"}
    kube.create("oxrayclusters", manifest)

    # No CA Secret yet: the head is never called, and the cluster says why.
    missing = wait_until(
        "the cluster to say its CA is missing",
        lambda: (c := condition(kube, "secure", "HeadCertificateTrusted")) and c["status"] == "False" and c,
    )
    assert "Secret secure-ca, which does not exist" in missing["message"], missing

    def ca_secret(path):
        with open(path, "rb") as f:
            return {"ca.crt": base64.b64encode(f.read()).decode()}

    # A CA that did not sign the head's certificate: the submission is refused on the certificate.
    kube.create(
        "secrets",
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "secure-ca"}, "data": ca_secret(certs["other_ca"])},
    )
    kube.create(
        "oxrayjobs",
        {
            "apiVersion": "oxray.io/v1",
            "kind": "OxrayJob",
            "metadata": {"name": "over-https"},
            "spec": {"entrypoint": "echo hello over https", "clusterSelector": {"ray.io/cluster": "secure"}},
        },
    )
    try:
        refused = wait_until(
            "the submission to be refused on the certificate",
            lambda: "certificate" in (m := status(kube, "oxrayjobs", "over-https").get("message") or "") and m,
            timeout=120,
        )
    except AssertionError as e:
        raise AssertionError(f"{e}\n{emulated.diagnostics()}") from None
    assert refused.startswith("could not submit: POST https://127.0.0."), refused
    head_ip = status(kube, "oxrayclusters", "secure")["head"]["podIp"]
    code, jobs = https_call(head_ip, "/api/jobs/", token_of(kube, "secure"), certs["ca"])
    assert code == 200 and jobs == [], "nothing reached the head"

    # The right CA: submitted, followed to the end, all over HTTPS.
    kube.patch("secrets", "secure-ca", {"data": ca_secret(certs["ca"])})
    try:
        done = wait_until(
            "the job to end",
            lambda: (
                (s := status(kube, "oxrayjobs", "over-https")).get("jobDeploymentStatus") in ("Complete", "Failed")
                and s
            ),
            timeout=120,
        )
    except AssertionError as e:
        raise AssertionError(f"{e}\n{emulated.diagnostics()}") from None
    assert done["jobStatus"] == "SUCCEEDED", done
    assert done["dashboardUrl"].startswith("https://secure-head-svc.default.svc:8265"), done
    assert condition(kube, "secure", "HeadCertificateTrusted")["status"] == "True"
    code, logs = https_call(head_ip, f"/api/jobs/{done['jobId']}/logs", token_of(kube, "secure"), certs["ca"])
    assert code == 200 and "hello over https" in logs["logs"], logs


def https_call(ip, path, token, ca):
    context = ssl.create_default_context(cafile=ca)
    request = urllib.request.Request(f"https://{ip}:8265{path}", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10, context=context) as response:
        return response.status, json.loads(response.read())
