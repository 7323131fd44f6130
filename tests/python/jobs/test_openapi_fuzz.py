"""`/api/openapi.json` describes the Jobs API, and schemathesis fuzzes the API
against it: no 5xx but those the spec documents (a duplicate submission id, a
delete of a live job), responses as described, no hang. Submitted entrypoints
are replaced by `true`, so fuzzed strings never reach a shell (nor pip)."""

import json

import pytest

from oxray_testutil import http_call

schemathesis = pytest.importorskip("schemathesis")
hypothesis = pytest.importorskip("hypothesis")

pytestmark = pytest.mark.timeout(600)


def _documented(operation, status: int) -> bool:
    return str(status) in operation.definition.raw.get("responses", {})


SETTINGS = hypothesis.settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=list(hypothesis.HealthCheck),
    derandomize=True,
    database=None,
)


def test_the_jobs_api_holds_to_its_spec(head):
    status, text = http_call("GET", f"{head.dashboard_url}/api/openapi.json", token=head.token)
    assert status == 200
    spec = json.loads(text)
    assert spec["openapi"].startswith("3.") and "/api/jobs/" in spec["paths"]
    schema = schemathesis.openapi.from_dict(spec)
    auth = {"Authorization": f"Bearer {head.token}"}
    seen = []
    for result in schema.get_all_operations():
        operation = result.ok()
        seen.append(f"{operation.method.upper()} {operation.path}")
        _fuzz(head, operation, auth)
    assert "POST /api/jobs/" in seen and "PUT /api/packages/{protocol}/{package_name}" in seen, seen
    status, jobs = http_call("GET", f"{head.dashboard_url}/api/jobs/", token=head.token)
    assert status == 200 and json.loads(jobs), "the fuzzed submissions reached the head"


def _fuzz(head, operation, auth):
    @SETTINGS
    @hypothesis.given(case=operation.as_strategy())
    def holds(case):
        if case.method == "POST" and case.path == "/api/jobs/" and isinstance(case.body, dict):
            case.body["entrypoint"] = "true"  # fuzz the request, never the shell
            if isinstance(case.body.get("runtime_env"), dict):
                case.body["runtime_env"].pop("pip", None)  # nor pip (its forms are checked in test_jobs_runtime_env)
        response = case.call(base_url=head.dashboard_url, headers=auth, timeout=30)
        code = response.status_code
        assert code < 500 or _documented(operation, code), (case.method, case.path, code, response.text[:500])
        assert code not in (401, 403), "the token was sent"
        if 200 <= code < 300 and "json" in response.headers.get("content-type", ""):
            response.json()

    holds()
