"""The sending process (SE-ASE-PROC-025) against the real test ActiveMQ and a real HTTP target.

These drive the engine's ``SendingProcess`` in this test process; the Celery
worker that hosts it in production is tested in test_workers.py.
"""

from __future__ import annotations

import logging
import time

import pytest

from ase_engine.broker import queue
from ase_engine.history import EventKind
from ase_engine.message import Message
from ase_engine.sending import SendingProcess
from tests.conftest import wait_until
from tests.fixtures.engine import put, unit_for

pytestmark = pytest.mark.broker

SOAP_FAULT = (
    b'<?xml version="1.0"?><soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/">'
    b"<soap:Body><soap:Fault><faultcode>soap:Client</faultcode><faultstring>bad order</faultstring>"
    b"</soap:Fault></soap:Body></soap:Envelope>"
)


def test_acknowledged_request_is_delivered_then_removed(broker, target, sending, history, service_name):
    unit = unit_for(service_name, target.on("/ok", 200, b"{}", "application/json"))
    sending(unit)

    message = put(broker, unit, properties={"customer": "42"})

    wait_until(lambda: EventKind.ACKED in history.kinds(message.id), 10, what="ack")
    (received,) = target.received
    assert received.body == b'{"n": 1}'
    assert received.headers["X-ASE-Message-Id"] == message.id
    assert received.headers["X-ASE-Property-customer"] == "42"
    assert received.headers["Content-Type"] == "application/json"
    assert broker.depth(unit.areas.pending) == 0
    assert history.kinds(message.id) == [EventKind.ATTEMPT, EventKind.ACKED]


def test_fault_moves_request_to_fault_area_with_the_answer(broker, target, sending, history, service_name, caplog):
    unit = unit_for(service_name, target.on("/f", 422, b'{"fault": "no such product"}', "application/json"))
    sending(unit)

    with caplog.at_level(logging.INFO):
        message = put(broker, unit)
        wait_until(lambda: EventKind.PARKED in history.kinds(message.id), 10, what="fault")

    assert broker.depth(unit.areas.pending) == 0
    ((headers, body),) = broker.drain(unit.areas.fault, expect=1)
    parked = Message.from_frame(headers, body)
    assert parked.id == message.id and parked.payload == message.payload
    assert (parked.last_outcome, parked.last_status, parked.attempt) == ("fault", 422, 1)
    assert parked.last_answer == '{"fault": "no such product"}'
    assert history.kinds(message.id) == [EventKind.ATTEMPT, EventKind.FAULT, EventKind.PARKED]
    assert [e.area for e in history.events if e.message_id == message.id and e.kind is EventKind.PARKED] == [
        unit.areas.fault
    ]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], "a fault logs no error (PROC-025)"


def test_soap_fault_in_a_500_answer_is_a_fault(broker, target, sending, history, service_name):
    unit = unit_for(service_name, target.on("/soap", 500, SOAP_FAULT, "text/xml; charset=utf-8"))
    sending(unit)

    message = put(broker, unit)

    wait_until(lambda: EventKind.FAULT in history.kinds(message.id), 10, what="fault")
    assert broker.depth(unit.areas.fault) == 1
    assert broker.depth(unit.areas.error) == 0


@pytest.mark.parametrize("status", [500, 503, 408, 429])
def test_technical_error_moves_request_to_error_area_with_e0020(
    broker, target, sending, history, service_name, caplog, status
):
    unit = unit_for(service_name, target.on("/e", status, b"down", "text/plain"))
    sending(unit)

    with caplog.at_level(logging.INFO):
        message = put(broker, unit)
        wait_until(lambda: EventKind.ERROR in history.kinds(message.id), 10, what="error")

    ((headers, body),) = broker.drain(unit.areas.error, expect=1)
    assert Message.from_frame(headers, body).last_status == status
    assert broker.depth(unit.areas.pending) == 0
    logged = [r for r in caplog.records if getattr(r, "ase_code", "") == "SE-ASE-E0020"]
    assert logged[0].getMessage() == (
        f"SE-ASE-E0020: A request '{message.id}' cannot be processed because of an error on target service "
        f"invocation. The request is moved the queue '{unit.areas.error}'."
    )
    assert logged[0].levelno == logging.ERROR and not logged[0].exc_info


def test_refused_connection_is_an_error(broker, sending, history, service_name):
    unit = unit_for(service_name, "http://127.0.0.1:9/closed")
    sending(unit)

    message = put(broker, unit)

    wait_until(lambda: EventKind.ERROR in history.kinds(message.id), 10, what="error")
    ((headers, body),) = broker.drain(unit.areas.error, expect=1)
    assert "ConnectError" in (Message.from_frame(headers, body).last_error or "")


def test_timeout_moves_request_to_timedout_area_with_e0017(broker, target, sending, history, service_name, caplog):
    unit = unit_for(service_name, target.on("/slow", "sleep", 3, 200))
    sending(unit)

    with caplog.at_level(logging.INFO):
        message = put(broker, unit)
        wait_until(lambda: EventKind.TIMEOUT in history.kinds(message.id), 10, what="timeout")

    assert broker.depth(unit.areas.timedout) == 1
    assert broker.depth(unit.areas.pending) == 0
    assert any(getattr(r, "ase_code", "") == "SE-ASE-E0017" for r in caplog.records)
    attempt = next(e for e in history.events if e.message_id == message.id and e.kind is EventKind.ATTEMPT)
    assert 900 <= (attempt.duration_ms or 0) < 2500


def test_expired_request_moves_to_expired_area_with_w0011(broker, target, sending, history, service_name, caplog):
    unit = unit_for(service_name, target.on("/ok", 200, b"{}", "application/json"), time_to_live=1)
    sending(unit)

    with caplog.at_level(logging.INFO):
        message = put(broker, unit, incoming_timestamp=int(time.time() * 1000) - 5_000)
        wait_until(lambda: EventKind.PARKED in history.kinds(message.id), 10, what="expiry")

    assert target.received == []
    assert broker.depth(unit.areas.expired) == 1
    assert history.kinds(message.id) == [EventKind.EXPIRED, EventKind.PARKED]
    assert any(getattr(r, "ase_code", "") == "SE-ASE-W0011" for r in caplog.records)


def test_malformed_frame_is_parked_in_error_area_and_the_process_goes_on(
    broker, target, sending, history, service_name
):
    unit = unit_for(service_name, target.on("/ok", 200, b"{}", "application/json"))
    sending(unit)
    conn = broker.connection()
    conn.send_and_wait(queue(unit.areas.pending), {"persistent": "true"}, b"not an ASE message")
    conn.disconnect()

    message = put(broker, unit)

    wait_until(lambda: EventKind.ACKED in history.kinds(message.id), 10, what="the next message")
    ((headers, body),) = broker.drain(unit.areas.error, expect=1)
    assert body == b"not an ASE message"
    assert headers["ase-last-outcome"] == "malformed"


def test_custom_queue_names_are_used_for_every_area(broker, target, sending, history, service_name):
    from ase_engine.config import QueueNames

    queues = QueueNames(
        f"{service_name}_in", f"{service_name}_x", f"{service_name}_t", f"{service_name}_e", f"{service_name}_e"
    )
    unit = unit_for(service_name, target.on("/f", 400, b"no", "text/plain"), queues=queues)
    sending(unit)

    message = put(broker, unit)

    wait_until(lambda: EventKind.FAULT in history.kinds(message.id), 10, what="fault")
    assert broker.depth(f"{service_name}_e") == 1


def test_removed_unit_stops_consuming_and_leaves_requests_pending(broker, target, sending, history, service_name):
    unit = unit_for(service_name, target.on("/ok", 200, b"{}", "application/json"))
    process = sending(unit)

    reports = process.apply([])
    message = put(broker, unit)
    time.sleep(1.0)

    assert [r.service for r in reports] == [service_name]
    assert history.kinds(message.id) == []
    assert broker.depth(unit.areas.pending) == 1


def test_stopping_waits_for_the_invocation_in_flight(broker, target, sending, history, service_name):
    unit = unit_for(service_name, target.on("/slow", "sleep", 1.5, 200), timeout_ms=5000, stop_timeout=10)
    process = sending(unit)
    message = put(broker, unit)
    assert target.started.wait(10)

    started = time.monotonic()
    (report,) = process.apply([])

    assert report.left_in_flight == 0
    assert time.monotonic() - started >= 0.5
    assert history.kinds(message.id) == [EventKind.ATTEMPT, EventKind.ACKED]
    assert broker.depth(unit.areas.pending) == 0


def test_stop_timeout_bounds_the_wait_and_the_request_stays_in_the_broker(
    broker, target, sending, history, service_name
):
    unit = unit_for(service_name, target.on("/slow", "sleep", 4, 200), timeout_ms=10_000, stop_timeout=1)
    process = sending(unit)
    put(broker, unit)
    assert target.started.wait(10)

    started = time.monotonic()
    (report,) = process.apply([])

    assert report.left_in_flight == 1
    assert time.monotonic() - started < 3
    # Unsubscribed before the target answered: the broker still holds the request.
    wait_until(lambda: broker.depth(unit.areas.pending) == 1, 10, what="the request back in PENDING")
    # Let the abandoned invocation end (its late ACK fails with E0007) before the process is stopped.
    wait_until(lambda: len(target.received) == 1, 10, what="the slow call to end")
    time.sleep(0.3)


def test_units_with_waiting_requests_start_together_without_stalling(broker, target, history, service_name):
    """Requests already queued for several units are dispatched while the next unit subscribes;
    every unit starts at once and every request is delivered (no subscription is lost)."""
    url = target.on("/ok", 200, b"{}", "application/json")
    units = [unit_for(f"{service_name}{n}", url) for n in range(4)]
    conn = broker.connection()
    for unit in units:
        conn.ensure_queues(unit.areas.all())
    conn.disconnect()
    messages = [put(broker, unit) for unit in units for _ in range(3)]
    process = SendingProcess(broker.component(), history, concurrency=2, instance="test")
    process.start()
    try:
        started = time.monotonic()
        process.apply(units)
        wait_until(lambda: all(EventKind.ACKED in history.kinds(m.id) for m in messages), 15, what="12 deliveries")
        assert time.monotonic() - started < 4, "a subscription waited for a receipt it could not get"
        assert sorted(process.services) == sorted(u.service for u in units)
    finally:
        process.stop()


def coded(caplog: pytest.LogCaptureFixture, code: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "ase_code", None) == code]


def test_subscribe_the_broker_does_not_confirm_logs_w0023_and_nothing_is_consumed(
    broker, target, history, service_name, caplog
):
    unit = unit_for(service_name, target.on("/ok", 200, b"{}", "application/json"))
    conn = broker.connection()
    conn.ensure_queues(unit.areas.all())
    conn.disconnect()
    process = SendingProcess(broker.component(receipt_timeout=1.5), history, concurrency=2, instance="w0023")
    process.start()
    try:
        wait_until(lambda: process.connection_status == "connected", 10, what="connection")
        with caplog.at_level(logging.INFO), broker.frozen():
            process.apply([unit])

        (record,) = coded(caplog, "SE-ASE-W0023")
        assert record.levelno == logging.WARNING
        assert not record.exc_info
        assert process.services == []
        message = put(broker, unit)
        time.sleep(1.0)
        assert history.kinds(message.id) == []
        assert broker.depth(unit.areas.pending) == 1
    finally:
        process.stop()


def test_unsubscribe_the_broker_does_not_confirm_logs_w0010(broker, target, sending, history, service_name, caplog):
    caplog.set_level(logging.INFO)
    unit = unit_for(service_name, target.on("/ok", 200, b"{}", "application/json"))
    process = sending(unit)
    process.component = broker.component(receipt_timeout=1.5)
    # The SUBSCRIBE's receipt is in: nothing of this unit is still waiting for the broker.
    wait_until(lambda: coded(caplog, "SE-ASE-I0002"), 10, what="I0002")

    with broker.frozen():
        (report,) = process.apply([])

    assert report.service == service_name
    (record,) = coded(caplog, "SE-ASE-W0010")
    assert record.levelno == logging.WARNING
    assert coded(caplog, "SE-ASE-I0004") == []
    assert process.services == []
