"""Access control of the admin REST API: every endpoint refuses anonymous callers; roles decide the rest."""

from __future__ import annotations

import json
import re

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from console.models import AuditEntry

pytestmark = pytest.mark.django_db(transaction=True)

SAMPLE = {
    "service": "NoSuchService",
    "subtype": "ERROR",
    "process": "posting",
    "action": "start",
    "message_id": "00000000-0000-0000-0000-000000000000",
    "pk": "1",
    "username": "nobody",
    "name": "outcomes",
}


def api_paths() -> list[str]:
    """A concrete URL for every pattern under /api/, found by walking the URL configuration."""
    (api,) = [p for p in get_resolver().url_patterns if isinstance(p, URLResolver) and str(p.pattern) == "api/"]
    paths = []
    for pattern in api.url_patterns:
        assert isinstance(pattern, URLPattern)
        text = str(pattern.pattern).lstrip("^").rstrip("$").replace("/?", "/")
        text = re.sub(r"\(\?P<(\w+)>[^)]*\)", lambda m: SAMPLE[m.group(1)], text)
        text = re.sub(r"<(?:\w+:)?(\w+)>", lambda m: SAMPLE[m.group(1)], text)
        paths.append(f"/api/{text}")
    return paths


def test_every_api_url_pattern_is_enumerated():
    paths = api_paths()
    assert "/api/areas/NoSuchService/ERROR/purge/" in paths
    assert "/api/schema/" in paths
    assert {"/api/reports/", "/api/reports/1/", "/api/reports/1/outcomes.csv"} <= set(paths)
    assert len(paths) >= 20


@pytest.mark.parametrize("method", ["get", "post", "patch", "put", "delete"])
def test_anonymous_access_to_any_api_endpoint_is_refused(api, method):
    client = api(None)
    for path in api_paths():
        response = getattr(client, method)(path, {}, format="json")
        assert response.status_code in (401, 403), (method, path, response.status_code)
        assert "error" in json.loads(response.content), (method, path)
    assert not AuditEntry.objects.exists()


def test_viewer_cannot_purge_recycle_or_start_processes(api):
    viewer = api("viewer")
    for path in (
        "/api/areas/AnyService/ERROR/purge",
        "/api/areas/AnyService/ERROR/recycle",
        "/api/processes/posting/stop",
        "/api/processes/sending/start",
    ):
        response = viewer.post(path, {"ids": []}, format="json")
        assert response.status_code == 403, (path, response.content)
        assert response.json()["error"] == "You do not have permission to perform this action."


def test_viewer_reads_but_operator_cannot_deploy_configure_or_manage_users(api):
    assert api("viewer").get("/api/jobs/").status_code == 200
    operator = api("operator")
    assert operator.post("/api/service-units/", {}, format="json").status_code == 403
    assert operator.patch("/api/component/", {"time_to_live": 5}, format="json").status_code == 403
    assert operator.get("/api/users/").status_code == 403
    assert api("admin").get("/api/users/").status_code == 200


def test_a_user_without_role_is_refused_even_when_authenticated(api):
    from django.contrib.auth.models import User
    from rest_framework.test import APIClient

    from console.accounts import token_for

    User.objects.create_user("norole")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_for('norole')}")
    assert client.get("/api/areas/").status_code == 403


def test_session_login_works_for_the_console(api):
    from django.contrib.auth.models import User
    from rest_framework.test import APIClient

    from console.roles import Role, grant

    user = User.objects.create_user("sess", password="pw-123456")
    grant(user, Role.VIEWER)
    client = APIClient()
    assert client.login(username="sess", password="pw-123456")
    assert client.get("/api/jobs/").status_code == 200


def test_admin_creates_a_user_with_a_role_and_it_is_audited(api):
    admin = api("admin")

    response = admin.post("/api/users/", {"username": "ops1", "password": "s3cret-pass", "role": "operator"})

    assert response.status_code == 201, response.content
    assert response.json() == {"username": "ops1", "is_active": True, "role": "operator"}
    entry = AuditEntry.objects.get(action="user.create")
    assert entry.username == "admin-user" and entry.parameters == {"username": "ops1", "role": "operator"}
    assert "s3cret" not in str(entry.parameters)
    assert (
        admin.post("/api/users/", {"username": "ops1", "password": "s3cret-pass", "role": "viewer"}).status_code == 409
    )
    demoted = admin.patch("/api/users/ops1/", {"role": "viewer"}, format="json")
    assert demoted.json()["role"] == "viewer"
