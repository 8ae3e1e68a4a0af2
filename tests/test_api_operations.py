"""Admin REST API: processes (ADM-020..035), service units and descriptors, component configuration (CFG-*)."""

from __future__ import annotations

import time

import pytest

from console.component import component_config
from console.models import AuditEntry, ComponentSettings, ServiceUnit, WorkerInstance
from tests.conftest import wait_until
from tests.test_deployment import descriptor

pytestmark = pytest.mark.broker


@pytest.mark.parametrize(
    ("process", "action", "code", "text"),
    [
        ("posting", "start", "SE-ASE-W0018", "The posting process is already started. Operation aborted."),
        ("sending", "start", "SE-ASE-W0021", "The sending process is already started. Operation aborted."),
    ],
)
def test_starting_a_started_process_is_409_with_its_warning(api, deploy, service_name, process, action, code, text):
    deploy(service_name, "http://127.0.0.1:9/x")

    response = api("operator").post(f"/api/processes/{process}/{action}?service={service_name}")

    assert response.status_code == 409
    assert response.json() == {"warning": f"WARNING {code}: {text}"}
    entry = AuditEntry.objects.get(action=f"{process}.{action}")
    assert not entry.succeeded and entry.result == f"WARNING {code}: {text}"


def test_stopping_twice_is_409_with_w0019_and_w0020(api, deploy, service_name):
    deploy(service_name, "http://127.0.0.1:9/x")
    operator = api("operator")

    first = operator.post(f"/api/processes/posting/stop?service={service_name}")
    again = operator.post(f"/api/processes/posting/stop?service={service_name}")
    operator.post(f"/api/processes/sending/stop?service={service_name}")
    sending_again = operator.post(f"/api/processes/sending/stop?service={service_name}")

    assert first.status_code == 200 and first.json()["services"] == [service_name]
    assert again.status_code == 409
    assert again.json()["warning"] == "WARNING SE-ASE-W0019: The posting process is already stopped. Operation aborted."
    assert sending_again.json()["warning"] == (
        "WARNING SE-ASE-W0020: The sending process is already stopped. Operation aborted."
    )
    assert not ServiceUnit.objects.get(service=service_name).posting_started


def test_process_of_an_unknown_service_is_404(api, broker):
    response = api("operator").post("/api/processes/posting/stop?service=NoSuchService")

    assert response.status_code == 404
    assert response.json() == {"error": "No service unit provides the ASE service 'NoSuchService'."}


@pytest.mark.slow
def test_stopping_sending_through_the_api_reaches_a_running_worker_and_survives_its_restart(
    api, deploy, workers, service_name, broker, ingress
):
    deploy(service_name, "http://127.0.0.1:9/x")
    worker = workers()
    wait_until(
        lambda: service_name in WorkerInstance.objects.get(name=worker.name).sending_services, 10, what="subscribed"
    )

    response = api("operator").post(f"/api/processes/sending/stop?service={service_name}")

    assert response.status_code == 200
    (reply,) = response.json()["workers"]
    assert reply[worker.name]["instance"] == worker.name
    assert service_name not in reply[worker.name]["sending"]
    assert service_name not in WorkerInstance.objects.get(name=worker.name).sending_services
    worker.terminate()
    restarted = workers()
    ingress.accept(service_name)
    time.sleep(1.0)
    assert broker.depth(service_name) == 1, "a restarted worker must honour the stopped sending process"
    assert service_name not in WorkerInstance.objects.get(name=restarted.name).sending_services


def test_admin_deploys_a_unit_from_parameters_and_reads_it(api, broker, service_name):
    admin = api("admin")

    response = admin.post(
        "/api/service-units/",
        {
            "provides": {"service-name": service_name, "stop-timeout": "abc"},
            "consumes": {"target-url": "http://127.0.0.1:9/t", "is-idempotent": "true"},
        },
        format="json",
    )

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["created"] is True and body["unit"]["service"] == service_name
    assert body["warnings"] == [
        "WARNING SE-ASE-W0015: Invalid integer number value 'abc' for parameter 'stop-timeout'. Default value used: 60."
    ]
    assert broker.depth(f"{service_name}_fault") == 0
    assert admin.get(f"/api/service-units/{service_name}/").json()["is_idempotent"] is True
    assert AuditEntry.objects.filter(action="service-unit.deploy", succeeded=True).exists()


def test_patching_a_unit_keeps_its_stopped_posting_process(api, deploy, service_name):
    deploy(service_name, "http://127.0.0.1:9/x")
    api("operator").post(f"/api/processes/posting/stop?service={service_name}")

    response = api("admin").patch(
        f"/api/service-units/{service_name}/", {"consumes": {"timeout": "1500"}}, format="json"
    )

    assert response.status_code == 200, response.content
    unit = ServiceUnit.objects.get(service=service_name)
    assert unit.timeout_ms == 1500
    assert not unit.posting_started and unit.sending_started


def test_patch_cannot_rename_the_service(api, deploy, service_name):
    deploy(service_name, "http://127.0.0.1:9/x")

    response = api("admin").patch(
        f"/api/service-units/{service_name}/", {"provides": {"service-name": "Other"}}, format="json"
    )

    assert response.status_code == 400
    assert "cannot change" in response.json()["error"]


def test_undeploy_through_the_api_keeps_the_queues(api, deploy, service_name, broker, ingress):
    deploy(service_name, "http://127.0.0.1:9/x")
    api("operator").post(f"/api/processes/sending/stop?service={service_name}")
    ingress.accept(service_name)

    response = api("admin").delete(f"/api/service-units/{service_name}/")

    assert response.status_code == 204
    assert not ServiceUnit.objects.filter(service=service_name).exists()
    assert broker.depth(service_name) == 1
    assert api("admin").delete(f"/api/service-units/{service_name}/").status_code == 404


def test_descriptor_deploy_returns_the_warnings(api, broker, service_name):
    xml = descriptor(service_name, provides_itf="OtherInterface")

    response = api("admin").post("/api/service-units/descriptor/", xml, content_type="application/xml")

    assert response.status_code == 201, response.content
    (warning,) = response.json()["warnings"]
    assert warning.startswith("WARNING SE-ASE-W0003: ")


def test_descriptor_upload_as_multipart_file(api, broker, service_name):
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile("jbi.xml", descriptor(service_name), content_type="application/xml")

    response = api("admin").post("/api/service-units/descriptor/", {"file": upload}, format="multipart")

    assert response.status_code == 201, response.content
    assert ServiceUnit.objects.filter(service=service_name).exists()


def test_conflicting_queue_names_in_a_descriptor_are_400_with_e0022(api, broker, service_name):
    xml = descriptor(
        service_name,
        provides_extra="<ase:persistence-area-name>a</ase:persistence-area-name>",
        consumes_extra="<ase:persistence-area-name>b</ase:persistence-area-name>",
    )

    response = api("admin").post("/api/service-units/descriptor/", xml, content_type="application/xml")

    assert response.status_code == 400
    assert response.json()["error"].startswith("ERROR SE-ASE-E0022: ")
    assert not ServiceUnit.objects.filter(service=service_name).exists()
    assert not AuditEntry.objects.get(action="service-unit.deploy-descriptor").succeeded


def test_malformed_descriptor_is_400_without_a_stack_trace(api, broker):
    response = api("admin").post("/api/service-units/descriptor/", b"<not-xml", content_type="application/xml")

    assert response.status_code == 400
    assert "Traceback" not in response.content.decode()


def test_time_to_live_and_stop_timeout_are_hot_updated(api, transactional_db):
    admin = api("admin")

    response = admin.patch("/api/component/", {"time_to_live": 300, "stop_timeout": 9}, format="json")

    assert response.status_code == 200, response.content
    assert response.json()["time_to_live"] == 300 and response.json()["stop_timeout"] == 9
    assert (component_config().time_to_live, component_config().stop_timeout) == (300, 9)
    assert ComponentSettings.load().time_to_live == 300
    assert admin.get("/api/component/").json()["stop_timeout"] == 9


def test_connection_parameters_are_refused_while_running(api, transactional_db):
    response = api("admin").patch("/api/component/", {"broker_url": "10.0.0.1:61613"}, format="json")

    assert response.status_code == 409
    assert "cannot be changed while the component is running" in response.json()["error"]
    assert component_config().broker_url != "10.0.0.1:61613"


def test_negative_time_to_live_is_400(api, transactional_db):
    response = api("admin").patch("/api/component/", {"time_to_live": -1}, format="json")

    assert response.status_code == 400
    assert response.json()["error"].startswith("time_to_live: ")


def test_a_unit_can_require_a_token_on_its_ingress(api, deploy, service_name, ingress, broker):
    deploy(service_name, "http://127.0.0.1:9/x", mustBeAutomaticallyStarted="false")
    admin = api("admin")

    created = admin.post(f"/api/service-units/{service_name}/ingress-token/")
    token = created.json()["token"]

    assert created.status_code == 201
    assert admin.get(f"/api/service-units/{service_name}/").json()["ingress_token_required"] is True
    assert token not in ServiceUnit.objects.get(service=service_name).ingress_token_hash
    refused = ingress.post(service_name)
    assert refused.status_code == 401
    assert refused.json() == {"error": "This ASE service requires its ingress token: Authorization: Bearer <token>."}
    assert ingress.post(service_name, Authorization="Bearer wrong").status_code == 401
    assert ingress.post(service_name, Authorization=f"Bearer {token}").status_code == 202
    assert broker.depth(service_name) == 1

    assert admin.delete(f"/api/service-units/{service_name}/ingress-token/").status_code == 204
    assert ingress.post(service_name).status_code == 202


def test_ingress_takes_requests_without_a_token_by_default(deploy, service_name, ingress):
    deploy(service_name, "http://127.0.0.1:9/x", mustBeAutomaticallyStarted="false")

    assert ingress.post(service_name).status_code == 202
