"""The OpenAPI schema at /api/schema/ (drf-spectacular) and property-based fuzzing of every operation in it.

schemathesis generates requests from the schema (a few examples per
operation, bounded) and sends them to the real application in this process,
authenticated as an admin so that every operation runs its code, with the
test ActiveMQ behind it. No answer may be a server error (5xx other than a
503 naming the broker), and each answer must match the schema.
"""

from __future__ import annotations

import time

import pytest
import schemathesis
from django.core.wsgi import get_wsgi_application
from hypothesis import HealthCheck, given, settings
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

pytestmark = pytest.mark.broker

EXAMPLES_PER_OPERATION = 8
TIME_LIMIT_S = 150


def test_schema_lists_every_endpoint_with_request_and_response_schemas(api):
    response = api("viewer").get("/api/schema/")

    assert response.status_code == 200
    schema = response.json()
    paths = schema["paths"]
    for path in (
        "/api/service-units/",
        "/api/service-units/descriptor/",
        "/api/processes/{process}/{action}",
        "/api/areas/",
        "/api/areas/{service}/{subtype}/messages/",
        "/api/areas/{service}/{subtype}/purge",
        "/api/areas/{service}/{subtype}/recycle",
        "/api/messages/{message_id}/",
        "/api/jobs/{id}/",
        "/api/component/",
        "/api/component/status/",
        "/api/reports/",
        "/api/reports/{id}/",
        "/api/reports/{id}/{name}.csv",
    ):
        assert any(p.rstrip("/") == path.rstrip("/") for p in paths), path
    for path, operations in paths.items():
        for method, operation in operations.items():
            ok = [code for code in operation["responses"] if code.startswith("2")]
            assert ok, (method, path)
            for code in ok:
                if code != "204":
                    assert "content" in operation["responses"][code], (method, path, code)
            bodyless = "/processes/" in path or path.endswith("ingress-token/")  # actions without parameters
            if method in ("post", "patch", "put") and not bodyless:
                assert "requestBody" in operation, (method, path)


def test_fuzzing_every_operation_gives_no_server_error(api, broker, deploy, service_name):
    deploy(service_name, "http://127.0.0.1:9/x", **{"mustBeAutomaticallyStarted": "false"})
    admin = api("admin")
    token = admin._credentials["HTTP_AUTHORIZATION"]
    headers = {"Authorization": token}
    schema = schemathesis.openapi.from_wsgi("/api/schema/", get_wsgi_application(), headers=headers)
    started = time.monotonic()
    checked = 0
    failures: list[str] = []

    for result in schema.get_all_operations():
        operation = result.ok()
        if time.monotonic() - started > TIME_LIMIT_S:
            pytest.fail(f"fuzzing exceeded its {TIME_LIMIT_S} s budget after {checked} operations")

        @given(case=operation.as_strategy())
        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )
        def run(case: schemathesis.Case) -> None:
            response = case.call(headers=headers)
            body = response.content.decode(errors="replace")
            if response.status_code >= 500 and not (response.status_code == 503 and "SE-ASE-E" in body):
                failures.append(f"{case.method} {case.formatted_path} -> {response.status_code}: {body[:200]}")
                return
            assert "Traceback" not in body
            for check in (status_code_conformance, content_type_conformance, response_schema_conformance):
                try:
                    case.validate_response(response, checks=[check])
                except BaseException as exc:  # noqa: BLE001 - a FailureGroup: collected and reported below
                    failures.append(f"{case.method} {case.formatted_path}: {check.__name__}: {str(exc)[:300]}")

        run()
        checked += 1

    assert checked >= 17
    assert failures == [], "\n".join(failures)
