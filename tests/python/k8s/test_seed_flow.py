"""KubeRay's quickstart with oxray's names, on the emulated API server with
kubectl (and the pods run as real processes by the fake kubelet):

1. install the chart: what `helm install` applies (`helm template --include-crds`,
   then `kubectl apply --server-side`; helm's own release storage needs an API
   server that speaks protobuf), and start the operator as its Deployment says;
2. `kubectl apply` the sample OxrayCluster and see it ready with 2 workers;
3. take the token from the cluster's Secret and submit a TorchTrainer job to
   the head's Jobs API; it SUCCEEDS, training on both workers, and its logs
   come back;
4. `kubectl delete` the cluster: everything it owned is gone.

The commands and what they print are logged (`-s` shows them), as the closing
note of the Kubernetes issue records them."""

import base64
import os
import re
import subprocess
import sys
import time

import pytest
from fake_kubelet import FakeKubelet
from k8s_paths import CHART, EXAMPLES, TOOLS
from kube_emulator import EmulatedApiServer, Kube

from oxray_testutil import wait_until

torch = pytest.importorskip("torch")


class Shell:
    """Runs commands as a user would, printing each and its output."""

    def __init__(self, env):
        self.env = env

    def __call__(self, *args, input=None, check=True, timeout=120):
        print(f"$ {' '.join(args)}")
        done = subprocess.run(args, env=self.env, input=input, capture_output=True, text=True, timeout=timeout)
        lines = (done.stdout + done.stderr).rstrip().splitlines()
        print("\n".join(lines if len(lines) <= 40 else lines[:3] + [f"... ({len(lines)} lines)"]))
        if check and done.returncode != 0:
            raise AssertionError(f"{args[0]} failed ({done.returncode})")
        return done.stdout


def test_the_seed_flow_with_oxray_names(operator_binary, tmp_path):
    pods_root = tmp_path / "pods"
    pods_root.mkdir(mode=0o700)
    with EmulatedApiServer() as api, FakeKubelet(Kube(api.url), pods_root) as kubelet:
        env = {
            **os.environ,
            "KUBECONFIG": api.kubeconfig(tmp_path / "kubeconfig"),
            "HOME": str(tmp_path),
            "PATH": f"{TOOLS}:{os.path.dirname(sys.executable)}:{os.environ['PATH']}",
        }
        env.pop("OXRAY_TOKEN", None)
        sh = Shell(env)
        kube = Kube(api.url)

        # 1. Install the chart (the operator reaches heads by pod IP: this host has no cluster DNS).
        chart = sh(
            "helm", "template", "oxray", CHART, "--namespace", "default", "--include-crds", "--set", "headVia=pod-ip"
        )
        sh("kubectl", "apply", "--server-side", "--validate=false", "-f", "-", input=chart)
        deployment = kube._call("GET", f"{api.url}/apis/apps/v1/namespaces/default/deployments/oxray-oxray-operator")
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        operator_env = {**env, **{e["name"]: e["value"] for e in container["env"]}}
        operator_log = open(tmp_path / "operator.log", "w")
        operator = subprocess.Popen(
            [operator_binary, *container["args"]], env=operator_env, stdout=operator_log, stderr=subprocess.STDOUT
        )
        try:
            # 2. The sample cluster, ready with 2 workers.
            started = time.monotonic()
            # --validate=false: the emulator serves no OpenAPI (test_manifests checks the sample against the CRD).
            sh("kubectl", "apply", "--validate=false", "-f", os.path.join(EXAMPLES, "oxray-cluster.yaml"))

            def state():
                return sh(
                    "kubectl",
                    "get",
                    "oxraycluster",
                    "oxray-sample",
                    "-o",
                    "jsonpath={.status.state} {.status.readyWorkerReplicas}",
                    check=False,
                )

            try:
                wait_until(
                    "the sample cluster ready with 2 workers", lambda: state() == "ready 2", timeout=120, interval=0.5
                )
            except AssertionError as e:
                raise AssertionError(f"{e}\n{open(tmp_path / 'operator.log').read()[-3000:]}") from None
            print(f"apply to ready: {time.monotonic() - started:.1f} s")
            sh("kubectl", "get", "pods,services,secrets")

            # 3. A job through the head's Jobs API, with the cluster's token.
            encoded = sh("kubectl", "get", "secret", "oxray-sample-token", "-o", "jsonpath={.data.token}")
            token = base64.b64decode(encoded).decode()
            head_ip = sh("kubectl", "get", "oxraycluster", "oxray-sample", "-o", "jsonpath={.status.head.podIp}")
            job_env = {**env, "OXRAY_TOKEN": token}
            job_sh = Shell(job_env)
            address = f"http://{head_ip}:8265"
            out = job_sh(
                sys.executable, "-m", "oxray.scripts.cli", "job", "submit", "--address", address,
                "--working-dir", os.path.join(EXAMPLES, "jobs"), "--", "python", "train_torch.py",
                timeout=600,
            )  # fmt: skip
            job_id = re.search(r"raysubmit_\w+", out).group(0)
            status = job_sh(sys.executable, "-m", "oxray.scripts.cli", "job", "status", "--address", address, job_id)
            assert "SUCCEEDED" in status, status
            logs = job_sh(sys.executable, "-m", "oxray.scripts.cli", "job", "logs", "--address", address, job_id)
            assert "training nodes: 2" in logs, logs
            assert "final loss:" in logs and "training finished: no error" in logs

            # 4. Delete the cluster: its pods, Service and Secret go with it.
            sh("kubectl", "delete", "oxraycluster", "oxray-sample", "--wait=false")
            wait_until("the cluster to go", lambda: kube.get("oxrayclusters", "oxray-sample") is None)
            assert kube.names("pods") == [] and kube.names("services") == [] and kube.names("secrets") == []
            wait_until("every pod process stopped", lambda: not kubelet.pods)
            sh("kubectl", "get", "pods,services,secrets")
        finally:
            operator.terminate()
            operator.wait(10)
            operator_log.close()
