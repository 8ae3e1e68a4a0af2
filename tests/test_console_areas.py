"""Areas in the console (test client, real broker): browse with filters, message detail, purge and recycle
through a confirmation naming the area and the exact count, run as jobs; roles enforced on the server."""

from __future__ import annotations

import json
import re

import pytest

from ase_engine.history import Event, EventKind
from ase_engine.message import Message, new_id
from console import jobs
from console.history import recorder
from console.models import AuditEntry, Job
from tests.test_api_areas import fill

pytestmark = pytest.mark.broker


@pytest.fixture
def unit(deploy, service_name):  # type: ignore[no-untyped-def]
    """A non-idempotent unit whose sending process is stopped, so nothing moves by itself."""
    return deploy(service_name, "http://127.0.0.1:9/x", mustBeAutomaticallyStarted="false").unit.to_config()


def put_message(broker, name: str, **fields) -> Message:  # type: ignore[no-untyped-def]
    fields.setdefault("payload", b'{"n": 1}')
    fields.setdefault("content_type", "application/json")
    message = Message(id=new_id(), **fields)
    conn = broker.connection()
    conn.send_and_wait(f"/queue/{name}", *message.to_frame())
    conn.disconnect()
    # Every message has a history (DESIGN invariant 7): its service is found through it.
    recorder().record(Event(message.id, message.service, EventKind.POSTED, area=name))
    recorder().flush()
    return message


def ids_on(page: str) -> list[str]:
    return re.findall(r'name="ids" value="([^"]+)"', page)


def test_operator_browses_the_fault_area_and_filters_by_outcome_and_attempts(client_as, broker, unit):
    fault = [
        put_message(
            broker,
            unit.areas.fault,
            service=unit.service,
            last_outcome="fault",
            last_status=400,
            last_error="order refused",
            attempt=1,
        )
        for _ in range(2)
    ]
    late = put_message(
        broker,
        unit.areas.fault,
        service=unit.service,
        last_outcome="fault",
        last_status=422,
        last_error="stock exhausted",
        attempt=3,
    )
    client = client_as("operator")

    page = client.get(f"/areas/{unit.service}/FAULT/").content.decode()
    assert ids_on(page) == [m.id for m in [*fault, late]]
    assert "3 messages" in page and "order refused" in page

    by_outcome = client.get(f"/areas/{unit.service}/FAULT/", {"outcome": "STOCK"}).content.decode()
    assert ids_on(by_outcome) == [late.id]
    by_attempts = client.get(f"/areas/{unit.service}/FAULT/", {"min_attempts": "2"}).content.decode()
    assert ids_on(by_attempts) == [late.id]
    none = client.get(f"/areas/{unit.service}/FAULT/", {"posted_before": "2000-01-01T00:00"}).content.decode()
    assert ids_on(none) == [] and "No message matches the filter." in none


def test_area_pages_are_paged_from_the_head_of_the_queue(client_as, broker, unit):
    ids = fill(broker, unit.areas.error, 60, unit.service)
    client = client_as("operator")
    first = client.get(f"/areas/{unit.service}/ERROR/").content.decode()
    second = client.get(f"/areas/{unit.service}/ERROR/", {"offset": "50"}).content.decode()
    assert ids_on(first) == ids[:50]
    assert ids_on(second) == ids[50:]
    assert "Messages 1–50 of 60" in first and "Messages 51–60 of 60" in second


def test_unknown_area_and_bad_subtype_answer_with_their_codes(client_as, broker, unit):
    client = client_as("viewer")
    unknown = client.get("/areas/NoSuchService/FAULT/")
    assert unknown.status_code == 404 and "ERROR SE-ASE-E0009" in unknown.content.decode()
    bad = client.get(f"/areas/{unit.service}/BOGUS/")
    assert bad.status_code == 400 and "ERROR SE-ASE-E0021" in bad.content.decode()


def test_viewer_sees_no_selection_and_a_forged_purge_is_refused(client_as, broker, unit):
    message = put_message(broker, unit.areas.fault, service=unit.service)
    client = client_as("viewer")
    page = client.get(f"/areas/{unit.service}/FAULT/").content.decode()
    assert message.id in page
    assert ids_on(page) == [] and "Purge…" not in page
    for step in ("confirm", "run"):
        response = client.post(f"/areas/{unit.service}/FAULT/{step}", {"action": "purge", "ids": [message.id]})
        assert response.status_code == 403
    assert not Job.objects.exists()
    assert broker.depth(unit.areas.fault) == 1


def test_confirmation_names_the_area_and_the_exact_count(client_as, broker, unit):
    ids = fill(broker, unit.areas.fault, 5, unit.service, last_outcome="fault", last_error="refused")
    put_message(broker, unit.areas.fault, service=unit.service, last_outcome="fault", last_error="other")
    client = client_as("operator")
    url = f"/areas/{unit.service}/FAULT/confirm"

    selected = client.post(url, {"action": "purge", "scope": "selected", "ids": ids[:2]}).content.decode()
    everything = client.post(url, {"action": "purge", "scope": "all"}).content.decode()
    matching = client.post(url, {"action": "purge", "scope": "all", "outcome": "refused"}).content.decode()

    assert f"Purge 2 messages of {unit.service} / FAULT?" in selected
    assert f"Purge all 6 messages of {unit.service} / FAULT?" in everything
    assert f"Purge 5 messages of {unit.service} / FAULT?" in matching
    assert sorted(ids_on(matching)) == sorted(ids)  # hidden fields carry exactly the matching ids
    assert broker.depth(unit.areas.fault) == 6  # a confirmation changes nothing


def test_purging_the_selected_messages_runs_a_job_shows_it_and_audits_it(client_as, broker, unit):
    ids = fill(broker, unit.areas.fault, 4, unit.service)
    client = client_as("operator")
    response = client.post(f"/areas/{unit.service}/FAULT/run", {"action": "purge", "ids": ids[:3]})
    job = Job.objects.get()
    assert response["Location"] == f"/jobs/{job.pk}/"
    jobs.run_job(job.pk)  # what the Celery task does

    job.refresh_from_db()
    assert (job.status, job.done) == ("succeeded", 3)
    assert broker.depth(unit.areas.fault) == 1
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "Done: 3 messages purged." in page
    assert f"/api/jobs/{job.pk}/" in page  # where the progress bar reads from
    assert f"#{job.pk}" in client.get("/jobs/").content.decode()
    entry = AuditEntry.objects.get(action="area.purge")
    assert (entry.username, entry.succeeded, sorted(entry.parameters["ids"])) == (
        "operator-user",
        True,
        sorted(ids[:3]),
    )
    assert "area.purge" in client.get("/audit/").content.decode()


def test_recycle_of_a_non_idempotent_target_needs_force(client_as, broker, unit):
    (message_id,) = fill(broker, unit.areas.error, 1, unit.service)
    client = client_as("operator")
    confirm = client.post(f"/areas/{unit.service}/ERROR/confirm", {"action": "recycle", "ids": [message_id]})
    assert "not idempotent" in confirm.content.decode() and 'name="force"' in confirm.content.decode()

    refused = client.post(f"/areas/{unit.service}/ERROR/run", {"action": "recycle", "ids": [message_id]})
    assert refused.status_code == 400
    assert "ERROR SE-ASE-E0013" in refused.content.decode()
    assert not Job.objects.exists()

    forced = client.post(f"/areas/{unit.service}/ERROR/run", {"action": "recycle", "ids": [message_id], "force": "on"})
    job = Job.objects.get()
    assert forced["Location"] == f"/jobs/{job.pk}/"
    jobs.run_job(job.pk)
    assert broker.depth(unit.areas.error) == 0
    assert broker.depth(unit.areas.pending) == 1


def test_pending_cannot_be_recycled(client_as, broker, unit):
    (message_id,) = fill(broker, unit.areas.pending, 1, unit.service)
    page = client_as("operator").get(f"/areas/{unit.service}/PENDING/").content.decode()
    assert "Recycle…" not in page
    confirm = client_as("operator").post(
        f"/areas/{unit.service}/PENDING/confirm", {"action": "recycle", "ids": [message_id]}
    )
    assert "ERROR SE-ASE-E0012" in confirm.content.decode()
    run = client_as("operator").post(f"/areas/{unit.service}/PENDING/run", {"action": "recycle", "ids": [message_id]})
    assert run.status_code == 400 and "ERROR SE-ASE-E0012" in run.content.decode()


def test_message_detail_pretty_prints_json_and_xml(client_as, broker, unit):
    as_json = put_message(
        broker,
        unit.areas.fault,
        service=unit.service,
        payload=b'{"order":{"id":7,"lines":[1,2]}}',
        properties={"customer": "acme"},
    )
    as_xml = put_message(
        broker,
        unit.areas.fault,
        service=unit.service,
        content_type="application/xml",
        payload=b"<order><id>7</id><line>1</line></order>",
    )
    client = client_as("viewer")
    json_page = client.get(f"/messages/{as_json.id}/").content.decode()
    xml_page = client.get(f"/messages/{as_xml.id}/").content.decode()
    assert 'data-kind="json"' in json_page
    assert json.dumps({"order": {"id": 7, "lines": [1, 2]}}, indent=2).replace('"', "&quot;") in json_page
    assert "customer" in json_page and "acme" in json_page
    assert 'data-kind="xml"' in xml_page and "&lt;?xml" not in xml_page
    assert "&lt;order&gt;\n  &lt;id&gt;7&lt;/id&gt;\n  &lt;line&gt;1&lt;/line&gt;\n&lt;/order&gt;" in xml_page


def test_binary_payload_is_shown_as_its_size_with_a_download(client_as, broker, unit):
    payload = bytes(range(256)) * 4
    message = put_message(
        broker, unit.areas.fault, service=unit.service, content_type="application/octet-stream", payload=payload
    )
    client = client_as("viewer")
    page = client.get(f"/messages/{message.id}/").content.decode()
    assert "Binary payload of 1024 bytes" in page and 'id="payload"' not in page
    download = client.get(f"/messages/{message.id}/payload")
    assert download.content == payload
    assert download["Content-Type"] == "application/octet-stream"
    assert download["Content-Disposition"].startswith("attachment;")


def test_attachments_of_a_multipart_request_can_be_downloaded(client_as, unit, ingress):
    boundary = "XyZ"
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="order"\r\n\r\n{{"n": 1}}\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="scan"; filename="scan.pdf"\r\n'
        f"Content-Type: application/pdf\r\n\r\n%PDF-1.4 fake\r\n--{boundary}--\r\n"
    ).encode()
    response = ingress.post(unit.service, body, content_type=f"multipart/form-data; boundary={boundary}")
    message_id = response.json()["id"]
    recorder().flush()  # the page finds the message's service through its history
    client = client_as("viewer")
    page = client.get(f"/messages/{message_id}/").content.decode()
    assert "scan.pdf" in page and "application/pdf" in page
    download = client.get(f"/messages/{message_id}/attachments/scan")
    assert download.content == b"%PDF-1.4 fake"
    assert download["Content-Type"] == "application/pdf"
    assert client.get(f"/messages/{message_id}/attachments/nothing").status_code == 404


def test_message_known_only_by_its_history_shows_the_timeline(client_as, broker, unit, ingress):
    message_id = ingress.accept(unit.service)
    broker.drain(unit.areas.pending, expect=1)
    recorder().flush()
    page = client_as("viewer").get(f"/messages/{message_id}/").content.decode()
    assert "not in any area" in page and "Posted" in page
    assert client_as("viewer").get("/messages/unknown-id/").status_code == 404
