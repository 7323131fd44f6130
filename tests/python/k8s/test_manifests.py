"""The manifests: the Helm chart lints, renders objects that Kubernetes'
schemas accept (`kubernetes-validate --strict`) in both RBAC modes, with the
least privilege the operator needs; the samples pass the CRDs' own schemas;
and what the operator renders for the sample is valid Kubernetes too."""

import base64
import json
import os
import subprocess
import sys

import jsonschema
import pytest
import yaml
from k8s_paths import CHART, EXAMPLES, TOOLS

HELM = os.path.join(TOOLS, "helm")
VALIDATE = [os.path.join(os.path.dirname(sys.executable), "kubernetes-validate"), "--strict", "--quiet"]


@pytest.fixture(scope="module")
def helm():
    assert os.access(HELM, os.X_OK), f"{HELM} is missing: run `make build/tools/helm`"
    return HELM


def run(args, **kwargs):
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, **kwargs)
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def validate_strict(tmp_path, text, name):
    path = tmp_path / name
    path.write_text(text)
    run(VALIDATE + [str(path)])


def docs(text):
    return [d for d in yaml.safe_load_all(text) if d]


def test_the_chart_lints_and_renders_valid_kubernetes(helm, tmp_path):
    lint = run([helm, "lint", "--strict", CHART])
    assert "0 chart(s) failed" in lint

    # By default: one namespace, the release's, with a Role there (no power over other namespaces).
    default = run([helm, "template", "oxray", CHART, "--namespace", "oxray-system", "--include-crds"])
    validate_strict(tmp_path, default, "default.yaml")
    kinds = sorted(d["kind"] for d in docs(default))
    assert kinds == [
        "CustomResourceDefinition",
        "CustomResourceDefinition",
        "CustomResourceDefinition",
        "Deployment",
        "Role",
        "RoleBinding",
        "ServiceAccount",
    ]
    objects = {d["kind"]: d for d in docs(default)}
    assert objects["Role"]["metadata"]["namespace"] == "oxray-system"
    assert "--namespace=oxray-system" in objects["Deployment"]["spec"]["template"]["spec"]["containers"][0]["args"]

    one_namespace = run([helm, "template", "oxray", CHART, "--namespace", "oxray-system", "--set", "watchNamespace=ml"])
    validate_strict(tmp_path, one_namespace, "one-namespace.yaml")
    objects = {d["kind"]: d for d in docs(one_namespace)}
    assert objects["Role"]["metadata"]["namespace"] == "ml"
    assert "--namespace=ml" in objects["Deployment"]["spec"]["template"]["spec"]["containers"][0]["args"]

    # Every namespace only when asked for.
    cluster_wide = run([helm, "template", "oxray", CHART, "--namespace", "oxray-system", "--set", "clusterWide=true"])
    validate_strict(tmp_path, cluster_wide, "cluster-wide.yaml")
    objects = {d["kind"]: d for d in docs(cluster_wide)}
    assert "ClusterRole" in objects and "ClusterRoleBinding" in objects and "Role" not in objects
    assert not any(
        a.startswith("--namespace") for a in objects["Deployment"]["spec"]["template"]["spec"]["containers"][0]["args"]
    )


def test_rbac_is_least_privilege(helm):
    rendered = {d["kind"]: d for d in docs(run([helm, "template", "oxray", CHART]))}
    rules = rendered["Role"]["rules"]
    granted = {
        (group, resource, verb)
        for r in rules
        for group in r["apiGroups"]
        for resource in r["resources"]
        for verb in r["verbs"]
    }
    assert not any("*" in entry for entry in granted), "no wildcards"
    core = {(res, verb) for group, res, verb in granted if group == ""}
    assert {res for res, _ in core} == {"pods", "services", "secrets"}
    assert {verb for res, verb in core if res == "pods"} == {"get", "list", "watch", "create", "delete"}
    # An OxrayService moves its serve Service to a new cluster.
    assert {verb for res, verb in core if res == "services"} == {"get", "list", "watch", "create", "delete", "patch"}
    assert {verb for res, verb in core if res == "secrets"} == {"get", "create", "delete"}, "Secrets never listed"
    assert {group for group, _, _ in granted} == {"", "oxray.io"}
    deployment = rendered["Deployment"]["spec"]["template"]["spec"]
    assert deployment["securityContext"]["runAsNonRoot"] is True
    container = deployment["containers"][0]["securityContext"]
    assert container["readOnlyRootFilesystem"] is True and container["allowPrivilegeEscalation"] is False


def crd_schemas():
    path = os.path.join(CHART, "crds", "oxray.io_crds.yaml")
    with open(path) as f:
        crds = docs(f.read())
    return {c["spec"]["names"]["kind"]: c["spec"]["versions"][0]["schema"]["openAPIV3Schema"] for c in crds}


@pytest.mark.parametrize(
    "sample", ["oxray-cluster.yaml", "oxray-cluster-autoscaler.yaml", "oxray-job.yaml", "oxray-service.yaml"]
)
def test_the_samples_pass_the_crds_schemas(sample):
    schemas = crd_schemas()
    with open(os.path.join(EXAMPLES, sample)) as f:
        [resource] = [d for d in docs(f.read()) if d["apiVersion"] == "oxray.io/v1"]
    assert resource["apiVersion"] == "oxray.io/v1"
    jsonschema.validate(resource, schemas[resource["kind"]])


def test_the_crd_schema_carries_the_constraints():
    schema = crd_schemas()["OxrayCluster"]
    with open(os.path.join(EXAMPLES, "oxray-cluster.yaml")) as f:
        [cluster] = docs(f.read())
    cluster["spec"]["workerGroupSpecs"][0]["minReplicas"] = -1
    with pytest.raises(jsonschema.ValidationError, match="-1 is less than the minimum of 0"):
        jsonschema.validate(cluster, schema)
    cluster["spec"]["workerGroupSpecs"][0]["minReplicas"] = 0
    cluster["spec"]["workerGroupSpecs"][0]["groupName"] = "GPU_group"
    with pytest.raises(jsonschema.ValidationError, match="does not match"):
        jsonschema.validate(cluster, schema)
    cluster["spec"]["workerGroupSpecs"][0]["groupName"] = "cpu"
    cluster["spec"]["headGroupSpec"]["serviceType"] = "Ingress"
    with pytest.raises(jsonschema.ValidationError, match="'Ingress' is not one of"):
        jsonschema.validate(cluster, schema)
    cluster["spec"]["headGroupSpec"]["serviceType"] = "NodePort"
    jsonschema.validate(cluster, schema)
    del cluster["spec"]["headGroupSpec"]["template"]
    with pytest.raises(jsonschema.ValidationError, match="'template' is a required property"):
        jsonschema.validate(cluster, schema)


def test_the_shared_storage_sample_is_valid_kubernetes(tmp_path):
    with open(os.path.join(EXAMPLES, "shared-storage.yaml")) as f:
        validate_strict(tmp_path, f.read(), "shared-storage.yaml")


def test_what_the_operator_renders_is_valid_kubernetes(operator_binary, tmp_path):
    rendered = run([operator_binary, "render", "-f", os.path.join(EXAMPLES, "oxray-cluster.yaml")])
    validate_strict(tmp_path, rendered, "rendered.yaml")
    objects = docs(rendered)
    assert [o["kind"] for o in objects] == ["Secret", "Pod", "Pod", "Pod"]
    token = base64.b64decode(objects[0]["data"]["token"]).decode()
    assert len(token) == 64 and int(token, 16) >= 0, "32 random bytes, hex"
    assert token not in json.dumps(objects[1:]), "the token only in the Secret"
