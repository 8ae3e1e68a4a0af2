"""Persistence areas through the admin API: depths (incl. RETRY), browse pages, message detail (ADM-005)."""

from __future__ import annotations

import pytest

from ase_engine.broker import queue, wait
from ase_engine.message import Message, new_id
from console.history import recorder
from tests.fixtures.engine import put

pytestmark = pytest.mark.broker


def fill(broker, name: str, count: int, service: str, **fields) -> list[str]:  # type: ignore[no-untyped-def]
    """Queue ``count`` ASE messages in ``name`` quickly (receipts pipelined); returns their ids in order."""
    conn = broker.connection()
    ids, futures = [], []
    for n in range(count):
        message = Message(
            id=new_id(), service=service, payload=b'{"n": %d}' % n, content_type="application/json", **fields
        )
        ids.append(message.id)
        futures.append(conn.send(queue(name), *message.to_frame()))
    for future in futures:
        wait(future, 30)
    conn.disconnect()
    return ids


@pytest.fixture
def unit(deploy, service_name):  # type: ignore[no-untyped-def]
    """An idempotent unit with two retries, its sending process stopped so nothing moves by itself."""
    return deploy(
        service_name,
        "http://127.0.0.1:9/x",
        **{"is-idempotent": "true", "retry-policy-number": "2", "mustBeAutomaticallyStarted": "false"},
    ).unit.to_config()


def test_areas_list_every_area_with_its_depth_including_retry(api, broker, unit):
    fill(broker, unit.areas.error, 2, unit.service)
    fill(broker, unit.areas.retry(1), 1, unit.service)
    fill(broker, unit.areas.retry(2), 3, unit.service)

    response = api("viewer").get(f"/api/areas/?service={unit.service}")

    assert response.status_code == 200
    depths = {row["subtype"]: row["depth"] for row in response.json()}
    assert depths == {"PENDING": 0, "EXPIRED": 0, "TIMEDOUT": 0, "ERROR": 2, "FAULT": 0, "RETRY": 4}
    (retry,) = [row for row in response.json() if row["subtype"] == "RETRY"]
    assert retry["queues"] == [
        {"name": f"{unit.service}_retry_1", "depth": 1},
        {"name": f"{unit.service}_retry_2", "depth": 3},
    ]


def test_unknown_area_is_404_with_e0009(api, broker, transactional_db):
    response = api("viewer").get("/api/areas/NoSuchService/ERROR/messages/")

    assert response.status_code == 404
    assert response.json() == {
        "error": "ERROR SE-ASE-E0009: The persistence area 'NoSuchService/ERROR' does not exist."
    }


def test_bad_subtype_is_400_with_e0021(api, broker, unit, caplog):
    response = api("viewer").get(f"/api/areas/{unit.service}/BROKEN/messages/")

    assert response.status_code == 400
    assert response.json() == {
        "error": f"ERROR SE-ASE-E0021: The persistence area '{unit.service}/BROKEN' is provided with an invalid "
        "sub-type. Only following sub-type are supported: PENDING, EXPIRED, TIMEDOUT, ERROR, FAULT and ALL"
    }
    assert any(r.levelname == "ERROR" and "SE-ASE-E0021" in r.getMessage() and not r.exc_info for r in caplog.records)


def test_browse_pages_through_an_area_oldest_first_without_consuming(api, broker, unit):
    ids = fill(broker, unit.areas.fault, 25, unit.service, attempt=1, last_outcome="fault", last_status=422)
    viewer = api("viewer")

    first = viewer.get(f"/api/areas/{unit.service}/fault/messages/?limit=10").json()
    last = viewer.get(f"/api/areas/{unit.service}/FAULT/messages/?offset=20&limit=10").json()

    assert [m["id"] for m in first["messages"]] == ids[:10]
    assert first["depth"] == 25 and first["browsable"] == 25 and first["next_offset"] == 10
    row = first["messages"][0]
    assert (row["attempts"], row["last_outcome"], row["last_status"], row["subtype"]) == (1, "fault", 422, "FAULT")
    assert row["size"] == len(b'{"n": 0}') and row["posted_at"]
    assert [m["id"] for m in last["messages"]] == ids[20:]
    assert last["next_offset"] is None
    assert broker.depth(unit.areas.fault) == 25


def test_browse_reaches_the_broker_window_of_a_deep_queue_and_says_so(api, broker, unit):
    fill(broker, unit.areas.error, 1100, unit.service)

    page = api("viewer").get(f"/api/areas/{unit.service}/ERROR/messages/?offset=990&limit=50").json()

    assert page["depth"] == 1100
    assert page["browsable"] == 1000
    assert len(page["messages"]) == 10
    assert page["next_offset"] is None


def test_browse_of_all_spans_the_queues_of_the_area(api, broker, unit):
    error_ids = fill(broker, unit.areas.error, 3, unit.service)
    retry_ids = fill(broker, unit.areas.retry(1), 2, unit.service)

    page = api("viewer").get(f"/api/areas/{unit.service}/ALL/messages/?offset=2&limit=2").json()

    assert [m["id"] for m in page["messages"]] == [error_ids[2], retry_ids[0]]
    assert [m["subtype"] for m in page["messages"]] == ["ERROR", "RETRY"]


def test_message_detail_has_payload_properties_attachments_and_history(api, broker, unit, ingress):
    from console.models import ServiceUnit

    ServiceUnit.objects.filter(service=unit.service).update(posting_started=True)
    response = ingress.post(unit.service, b'{"order": 7}', **{"X-ASE-Property-Customer": "acme"})
    message_id = response.json()["id"]
    recorder().flush()

    detail = api("viewer").get(f"/api/messages/{message_id}/").json()

    assert detail["id"] == message_id and detail["service"] == unit.service
    assert detail["location"] == {"queue": unit.areas.pending, "subtype": "PENDING"}
    assert (detail["payload"], detail["payload_encoding"]) == ('{"order": 7}', "utf-8")
    assert detail["properties"] == {"customer": "acme"}
    assert detail["attachments"] == []
    assert [e["kind"] for e in detail["history"]] == ["posted"]


def test_binary_payload_is_base64_in_the_detail(api, broker, unit):
    message = put(broker, unit, destination=unit.areas.error, payload=b"\xff\x00\x01")
    from console.models import MessageEvent

    MessageEvent.objects.create(message_id=message.id, service=unit.service, kind="posted", at="2026-01-01T00:00Z")
    detail = api("viewer").get(f"/api/messages/{message.id}/").json()

    assert (detail["payload"], detail["payload_encoding"]) == ("/wAB", "base64")
    assert detail["location"]["subtype"] == "ERROR"


def test_unknown_message_is_404(api, broker, transactional_db):
    response = api("viewer").get(f"/api/messages/{new_id()}/")

    assert response.status_code == 404
    assert "No message" in response.json()["error"]
