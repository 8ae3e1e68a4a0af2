"""The posting process over HTTP (SE-ASE-PROC-020, PROC-006, PROC-051) against the real test ActiveMQ."""

from __future__ import annotations

import json
import logging
import time

import pytest

from ase_engine.message import Message
from console import operations
from console.history import recorder
from console.models import MessageEvent

pytestmark = pytest.mark.broker


def post(ingress, service: str, body: bytes = b'{"order": 1}', **headers: str):  # type: ignore[no-untyped-def]
    return ingress.post(service, body, **headers)


def test_post_persists_the_whole_message_before_answering_202(ingress, broker, deploy, service_name):
    deploy(service_name, "http://127.0.0.1:9/never", mustBeAutomaticallyStarted="false")

    response = post(ingress, service_name, b'{"order": 1}', **{"X-ASE-Property-customer": "42", "X-ASE-MEP": "InOnly"})

    assert response.status_code == 202
    answer = response.json()
    assert answer["service"] == service_name
    assert answer["accepted_at"].endswith("+00:00")
    ((headers, body),) = broker.drain(service_name, expect=1)
    message = Message.from_frame(headers, body)
    assert message.id == answer["id"]
    assert message.payload == b'{"order": 1}'
    assert message.content_type == "application/json"
    assert message.properties == {"customer": "42"}
    assert message.mep == "InOnly"
    assert message.attempt == 0
    assert headers["persistent"] == "true"
    assert abs(message.incoming_timestamp / 1000 - __import__("time").time()) < 60


def test_binary_body_is_stored_byte_for_byte(ingress, broker, deploy, service_name):
    deploy(service_name, "http://127.0.0.1:9/never", mustBeAutomaticallyStarted="false")
    payload = bytes(range(256)) * 64

    response = post(ingress, service_name, payload, content_type="application/octet-stream")

    assert response.status_code == 202
    ((headers, body),) = broker.drain(service_name, expect=1)
    assert Message.from_frame(headers, body).payload == payload


def test_robust_in_only_is_accepted(ingress, broker, deploy, service_name):
    deploy(service_name, "http://127.0.0.1:9/never", mustBeAutomaticallyStarted="false")

    response = post(ingress, service_name, **{"X-ASE-MEP": "RobustInOnly"})

    assert response.status_code == 202
    ((headers, body),) = broker.drain(service_name, expect=1)
    assert Message.from_frame(headers, body).mep == "RobustInOnly"


def test_other_mep_is_refused_with_e0010_and_nothing_is_stored(ingress, broker, deploy, service_name, caplog):
    deploy(service_name, "http://127.0.0.1:9/never", mustBeAutomaticallyStarted="false")

    with caplog.at_level(logging.INFO):
        response = post(ingress, service_name, **{"X-ASE-MEP": "InOut"})

    assert response.status_code == 400
    assert response.json()["error"] == (
        "ERROR SE-ASE-E0010: Only one-way request (InOnly or RobustInOnly) are supported. Received MEP: InOut."
    )
    assert broker.depth(service_name) == 0
    coded = [r for r in caplog.records if getattr(r, "ase_code", None) == "SE-ASE-E0010"]
    assert coded and coded[0].levelno == logging.ERROR
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []


def test_unknown_service_is_404(ingress, broker, transactional_db):
    response = post(ingress, "NoSuchService")

    assert response.status_code == 404
    assert "NoSuchService" in response.json()["error"]


def test_body_over_the_limit_is_413_and_nothing_is_stored(ingress, broker, deploy, service_name, settings):
    deploy(service_name, "http://127.0.0.1:9/never", mustBeAutomaticallyStarted="false")
    settings.ASE_MAX_BODY_BYTES = 1024

    response = post(ingress, service_name, b"x" * 1025)

    assert response.status_code == 413
    assert broker.depth(service_name) == 0


def test_stopped_posting_process_answers_503_with_e0011(ingress, broker, deploy, service_name):
    deploy(service_name, "http://127.0.0.1:9/never", mustBeAutomaticallyStarted="false")
    operations.set_process("posting", False, service_name)

    response = post(ingress, service_name)

    assert response.status_code == 503
    assert response.json()["error"].startswith(
        f"ERROR SE-ASE-E0011: An error occurs saving a request in the "
        f"persistence area '{service_name}': the posting process is stopped"
    )
    assert broker.depth(service_name) == 0


def test_no_receipt_within_the_receipt_timeout_answers_503_with_e0011(
    ingress, broker, deploy, service_name, caplog, settings
):
    deploy(service_name, "http://127.0.0.1:9/never", mustBeAutomaticallyStarted="false")
    for _ in range(settings.ASE_POSTING_CONNECTIONS):  # every posting connection is open
        assert post(ingress, service_name).status_code == 202

    with caplog.at_level(logging.INFO), broker.frozen():
        started = time.monotonic()
        response = post(ingress, service_name)
        waited = time.monotonic() - started

    assert response.status_code == 503
    assert response.json()["error"] == (
        f"ERROR SE-ASE-E0011: An error occurs saving a request in the persistence area '{service_name}': "
        "no receipt from the broker within 5 s."
    )
    assert 4.5 < waited < 8
    assert [r.levelno for r in caplog.records if getattr(r, "ase_code", None) == "SE-ASE-E0011"] == [logging.ERROR]
    assert post(ingress, service_name).status_code == 202


def test_started_again_posting_process_accepts_requests(ingress, broker, deploy, service_name):
    deploy(service_name, "http://127.0.0.1:9/never", mustBeAutomaticallyStarted="false")
    operations.set_process("posting", False, service_name)
    operations.set_process("posting", True, service_name)

    assert post(ingress, service_name).status_code == 202


def test_get_is_not_a_request(ingress, broker, deploy, service_name):
    deploy(service_name, "http://127.0.0.1:9/never", mustBeAutomaticallyStarted="false")

    response = ingress.request("GET", f"/ase/{service_name}/")

    assert response.status_code == 405


def test_multipart_attachments_are_described_and_kept_in_the_body(ingress, broker, deploy, service_name):
    deploy(service_name, "http://127.0.0.1:9/never", mustBeAutomaticallyStarted="false")
    boundary = "ASEboundary"
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="order"\r\n\r\n{{"order": 7}}\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="invoice"; filename="invoice.pdf"\r\n'
        f"Content-Type: application/pdf\r\n\r\n%PDF-1.4 fake\r\n--{boundary}--\r\n"
    ).encode()

    response = post(ingress, service_name, body, content_type=f"multipart/form-data; boundary={boundary}")

    assert response.status_code == 202
    ((headers, stored),) = broker.drain(service_name, expect=1)
    message = Message.from_frame(headers, stored)
    assert message.payload == body
    assert message.content_type == f"multipart/form-data; boundary={boundary}"
    described = {a.name: a for a in message.attachments}
    assert described["invoice"].filename == "invoice.pdf"
    assert described["invoice"].content_type == "application/pdf"
    assert described["invoice"].size == len(b"%PDF-1.4 fake")
    assert described["order"].filename is None


def test_malformed_multipart_is_400_and_nothing_is_stored(ingress, broker, deploy, service_name):
    deploy(service_name, "http://127.0.0.1:9/never", mustBeAutomaticallyStarted="false")

    response = post(ingress, service_name, b"garbage", content_type="multipart/form-data")

    assert response.status_code == 400
    assert broker.depth(service_name) == 0


def test_accepted_request_has_a_posted_history_event(ingress, broker, deploy, service_name):
    deploy(service_name, "http://127.0.0.1:9/never", mustBeAutomaticallyStarted="false")

    message_id = post(ingress, service_name).json()["id"]
    recorder().flush()

    event = MessageEvent.objects.get(message_id=message_id)
    assert (event.kind, event.service, event.area, event.size) == ("posted", service_name, service_name, 12)


def test_a_history_store_that_fails_costs_no_request(ingress, broker, deploy, service_name, caplog):
    from django.db import connection

    deploy(service_name, "http://127.0.0.1:9/never", mustBeAutomaticallyStarted="false")
    recorder().flush()
    table = MessageEvent._meta.db_table
    with connection.cursor() as cursor:  # the history table is gone: every write of the recorder fails
        cursor.execute(f"ALTER TABLE {table} RENAME TO {table}_away")
    try:
        with caplog.at_level(logging.INFO):
            response = post(ingress, service_name)
            recorder().flush()
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"ALTER TABLE {table}_away RENAME TO {table}")

    assert response.status_code == 202
    ((headers, _),) = broker.drain(service_name, expect=1)
    assert headers["ase-id"] == response.json()["id"]
    failed = [r for r in caplog.records if r.name == "ase.history"]
    assert failed and failed[0].levelno == logging.ERROR
    assert "history events not stored" in failed[0].getMessage()
    assert [r for r in caplog.records if r.exc_info] == []


def test_posting_uses_the_configured_pending_queue(ingress, broker, deploy, service_name):
    deploy(
        service_name,
        "http://127.0.0.1:9/never",
        mustBeAutomaticallyStarted="false",
        **{"persistence-area-name": f"{service_name}_custom"},
    )

    assert post(ingress, service_name).status_code == 202
    assert broker.depth(f"{service_name}_custom") == 1
    assert json.loads(json.dumps(broker.drain(f"{service_name}_custom", expect=1)[0][0]))["ase-service"] == service_name
