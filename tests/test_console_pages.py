"""The console's pages and actions through Django's test client, against the real broker and database.

Roles (console/roles.py): a viewer reads, an operator starts/stops, an admin
deploys, undeploys and changes the component. A forged request for an action
the role does not allow is refused with 403 and changes nothing.
"""

from __future__ import annotations

import pytest

from console import dashboard
from console.history import recorder
from console.models import AuditEntry, ComponentSettings, ServiceUnit
from tests.test_deployment import descriptor

pytestmark = pytest.mark.broker


def test_anonymous_visitor_is_sent_to_the_login_page(client, transactional_db):
    for path in ("/", "/units/", "/component/", "/search/?q=x"):
        response = client.get(path)
        assert response.status_code == 302
        assert response["Location"].startswith("/login/?next=")


def test_login_page_logs_a_user_in_and_out(client, console_user):
    from tests.fixtures.console import PASSWORD

    console_user("viewer")
    assert client.post("/login/", {"username": "viewer-user", "password": "wrong"}).status_code == 200
    response = client.post("/login/", {"username": "viewer-user", "password": PASSWORD})
    assert (response.status_code, response["Location"]) == (302, "/")
    assert client.get("/").status_code == 200
    client.post("/logout/")
    assert client.get("/").status_code == 302


def test_user_without_a_role_is_refused_every_page(client, transactional_db):
    from django.contrib.auth.models import User

    client.force_login(User.objects.create_user("nobody"))
    response = client.get("/")
    assert response.status_code == 403
    assert b"viewer" in response.content


def test_viewer_sees_the_dashboard_without_any_toggle(client_as, deploy, service_name):
    deploy(service_name, "http://127.0.0.1:9/x")
    page = client_as("viewer").get("/").content.decode()
    assert service_name in page  # in the first snapshot
    assert "Stop all posting" not in page
    assert 'data-can-operate=""' in page
    detail = client_as("viewer").get(f"/units/{service_name}/").content.decode()
    assert "Stop unit" not in detail and "Undeploy" not in detail


def test_operator_sees_the_toggles(client_as, deploy, service_name):
    deploy(service_name, "http://127.0.0.1:9/x")
    page = client_as("operator").get("/").content.decode()
    assert "Stop all posting" in page
    assert 'data-can-operate="1"' in page


def test_forged_process_stop_by_a_viewer_is_refused_and_changes_nothing(client_as, deploy, service_name):
    deploy(service_name, "http://127.0.0.1:9/x")
    client = client_as("viewer")
    for path in ("/processes/posting/stop", "/processes/sending/stop", f"/units/{service_name}/stop"):
        assert client.post(path, {"service": service_name}).status_code == 403
    unit = ServiceUnit.objects.get(service=service_name)
    assert (unit.posting_started, unit.sending_started) == (True, True)


def test_forged_deploy_undeploy_and_component_change_by_an_operator_are_refused(client_as, deploy, service_name):
    from django.core.files.uploadedfile import SimpleUploadedFile

    deploy(service_name, "http://127.0.0.1:9/x")
    client = client_as("operator")
    upload = SimpleUploadedFile("jbi.xml", descriptor(f"{service_name}B"), "application/xml")
    assert client.post("/units/deploy/", {"source": "descriptor", "descriptor": upload}).status_code == 403
    assert client.post(f"/units/{service_name}/undeploy/").status_code == 403
    assert client.post("/component/", {"time_to_live": "5"}).status_code == 403
    assert ServiceUnit.objects.filter(service=service_name).exists()
    assert not ServiceUnit.objects.filter(service=f"{service_name}B").exists()
    assert ComponentSettings.load().time_to_live is None


def test_operator_stops_and_starts_the_posting_of_one_unit_and_each_call_is_audited(client_as, deploy, service_name):
    deploy(service_name, "http://127.0.0.1:9/x")
    other = f"{service_name}O"
    deploy(other, "http://127.0.0.1:9/x")
    client = client_as("operator")
    response = client.post("/processes/posting/stop", {"service": service_name, "next": "/"}, follow=True)
    assert "Posting process stopped" in response.content.decode()
    assert not ServiceUnit.objects.get(service=service_name).posting_started
    assert ServiceUnit.objects.get(service=other).posting_started
    again = client.post("/processes/posting/stop", {"service": service_name}, follow=True).content.decode()
    assert "WARNING SE-ASE-W0019: The posting process is already stopped." in again
    client.post("/processes/posting/start", {"service": service_name})
    assert ServiceUnit.objects.get(service=service_name).posting_started
    trail = [
        (e.username, e.action, e.parameters, e.succeeded)
        for e in AuditEntry.objects.filter(parameters__service=service_name).order_by("at", "id")
    ]
    assert trail == [
        ("operator-user", "posting.stop", {"service": service_name}, True),
        ("operator-user", "posting.stop", {"service": service_name}, False),
        ("operator-user", "posting.start", {"service": service_name}, True),
    ]


def test_dashboard_depths_come_from_the_broker_and_rates_from_the_history(deploy, service_name, ingress):
    deploy(service_name, "http://127.0.0.1:9/x", mustBeAutomaticallyStarted="false")
    for _ in range(3):
        ingress.accept(service_name)
    recorder().flush()

    snap = dashboard.snapshot()

    unit = next(u for u in snap["units"] if u["service"] == service_name)
    assert unit["areas"] == {"PENDING": 3, "RETRY": 0, "EXPIRED": 0, "TIMEDOUT": 0, "ERROR": 0, "FAULT": 0}
    assert (unit["posting_started"], unit["sending_started"]) == (True, False)
    assert snap["broker"]["status"] == "connected"
    assert snap["rates"]["totals"]["accepted"] >= 3
    assert snap["rates"]["accepted"][-1] >= 3 or snap["rates"]["accepted"][-2] >= 3  # this minute or the last


def test_deploy_from_an_uploaded_jbi_xml_shows_the_descriptor_warnings(client_as, broker, service_name):
    from django.core.files.uploadedfile import SimpleUploadedFile

    xml = descriptor(
        service_name,
        provides_itf="OtherInterface",
        provides_extra=f"<ase:persistence-area-name>{service_name}_q</ase:persistence-area-name>",
        consumes_extra=f"<ase:persistence-area-name>{service_name}_q</ase:persistence-area-name>",
    )
    client = client_as("admin")
    response = client.post(
        "/units/deploy/", {"source": "descriptor", "descriptor": SimpleUploadedFile("jbi.xml", xml, "application/xml")}
    )
    page = response.content.decode()
    assert response.status_code == 200
    assert 'data-code="SE-ASE-W0003"' in page and 'data-code="SE-ASE-W0012"' in page
    assert "WARNING SE-ASE-W0012: The parameter &#x27;persistence-area-name&#x27; is defined twice" in page
    assert ServiceUnit.objects.get(service=service_name).queue_pending == f"{service_name}_q"


def test_deploy_with_conflicting_queue_names_shows_e0022_and_deploys_nothing(client_as, broker, service_name):
    from django.core.files.uploadedfile import SimpleUploadedFile

    xml = descriptor(
        service_name,
        provides_extra="<ase:persistence-area-name>one</ase:persistence-area-name>",
        consumes_extra="<ase:persistence-area-name>two</ase:persistence-area-name>",
    )
    response = client_as("admin").post(
        "/units/deploy/", {"source": "descriptor", "descriptor": SimpleUploadedFile("jbi.xml", xml, "application/xml")}
    )
    assert response.status_code == 400
    assert "ERROR SE-ASE-E0022: The parameter &#x27;persistence-area-name&#x27; is defined twice" in (
        response.content.decode()
    )
    assert not ServiceUnit.objects.filter(service=service_name).exists()


def test_deploy_from_the_form_applies_the_parameter_rules(client_as, broker, service_name):
    response = client_as("admin").post(
        "/units/deploy/",
        {
            "source": "form",
            "service_name": service_name,
            "target_url": "http://127.0.0.1:9/x",
            "is_idempotent": "maybe",
            "consumes_auto_start": "false",
        },
    )
    page = response.content.decode()
    assert response.status_code == 200
    warning = "WARNING SE-ASE-W0013: Invalid boolean value &#x27;maybe&#x27; for parameter &#x27;is-idempotent&#x27;"
    assert warning in page
    unit = ServiceUnit.objects.get(service=service_name)
    assert (unit.is_idempotent, unit.sending_started) == (False, False)


def test_deploy_form_refuses_a_bad_target_url_without_a_stack_trace(client_as, broker, service_name):
    response = client_as("admin").post(
        "/units/deploy/", {"source": "form", "service_name": service_name, "target_url": "ftp://nowhere"}
    )
    assert response.status_code == 400
    assert "Invalid or missing parameter &#x27;target-url&#x27;" in response.content.decode()
    assert "Traceback" not in response.content.decode()
    assert not ServiceUnit.objects.filter(service=service_name).exists()


def test_undeploy_reminds_that_the_queues_are_kept_and_keeps_them(client_as, deploy, service_name, ingress, broker):
    deploy(service_name, "http://127.0.0.1:9/x", mustBeAutomaticallyStarted="false")
    ingress.accept(service_name)
    client = client_as("admin")
    confirm = client.get(f"/units/{service_name}/undeploy/").content.decode()
    assert "The queues are kept" in confirm and f"{service_name}_fault" in confirm
    done = client.post(f"/units/{service_name}/undeploy/", follow=True).content.decode()
    assert "Its queues are kept in the broker" in done
    assert not ServiceUnit.objects.filter(service=service_name).exists()
    assert broker.depth(service_name) == 1


def test_search_finds_a_message_by_id_and_by_idempotency_key(client_as, deploy, service_name, ingress):
    deploy(service_name, "http://127.0.0.1:9/x", mustBeAutomaticallyStarted="false")
    response = ingress.post(service_name, b"{}", **{"Idempotency-Key": f"key-{service_name}"})
    message_id = response.json()["id"]
    recorder().flush()
    client = client_as("viewer")

    by_id = client.get("/search/", {"q": message_id})
    by_key = client.get("/search/", {"q": f"key-{service_name}"})
    nothing = client.get("/search/", {"q": "no-such-thing"})

    assert by_id["Location"] == by_key["Location"] == f"/messages/{message_id}/"
    history = client.get(by_id["Location"]).content.decode()
    assert "posted" in history and service_name in history
    assert "No message has this id or idempotency key." in nothing.content.decode()


def test_admin_changes_the_runtime_ttl_from_the_component_page(client_as, broker):
    client = client_as("admin")
    page = client.get("/component/").content.decode()
    assert "Broker URL" in page and "ASE_BROKER_PASSCODE" not in page
    client.post("/component/", {"time_to_live": "120", "stop_timeout": ""})
    row = ComponentSettings.load()
    assert (row.time_to_live, row.stop_timeout) == (120, None)
    assert client.post("/component/", {"time_to_live": "-1"}).status_code == 400
    assert ComponentSettings.load().time_to_live == 120


def test_unit_detail_shows_parameters_areas_and_recent_history(client_as, deploy, service_name, ingress):
    deploy(service_name, "http://127.0.0.1:9/x", mustBeAutomaticallyStarted="false")
    message_id = ingress.accept(service_name)
    recorder().flush()
    page = client_as("viewer").get(f"/units/{service_name}/").content.decode()
    assert "retry-policy-number" in page and "http://127.0.0.1:9/x" in page
    assert f"{service_name}_timedout" in page
    assert message_id in page


def test_dashboard_says_the_broker_is_unreachable_instead_of_showing_depths(deploy, service_name, settings, broker):
    from console.component import installed_component
    from tests.conftest import free_port

    deploy(service_name, "http://127.0.0.1:9/x")
    dashboard._stats._close()
    settings.ASE_COMPONENT = {
        **settings.ASE_COMPONENT,
        "broker-url": f"127.0.0.1:{free_port()}",
        "receipt-timeout": "1",
    }
    installed_component.cache_clear()
    try:
        snap = dashboard.snapshot()
    finally:
        dashboard._stats._close()
        installed_component.cache_clear()
    unit = next(u for u in snap["units"] if u["service"] == service_name)
    assert snap["broker"]["status"] == "unreachable"
    assert set(unit["areas"].values()) == {None}  # unknown, never a made-up 0


def test_an_unknown_page_is_a_404_in_the_console_layout_and_api_keeps_json(client_as, transactional_db):
    client = client_as("viewer")
    page = client.get("/units/NoSuchUnit/")
    assert page.status_code == 404
    assert "Not found" in page.content.decode() and "Skip to content" in page.content.decode()
    api = client.get("/api/no-such-endpoint/")
    assert api.status_code == 404 and api["Content-Type"] == "application/json"
