"""Retry policy and time-to-live (SE-ASE-PROC-026, PROC-027): the engine's sending process and retry
pump against the real test ActiveMQ and a real HTTP target."""

from __future__ import annotations

import logging
import time

import pytest

from ase_engine.broker import queue
from ase_engine.config import ComponentConfig, RetryPolicy
from ase_engine.history import EventKind
from ase_engine.message import Message, new_id, now_ms
from ase_engine.retry import RetryPump
from tests.conftest import wait_until
from tests.fixtures.engine import put, unit_for

pytestmark = pytest.mark.broker


def test_error_of_idempotent_target_waits_in_the_retry_area_with_w0022(
    broker, target, sending, history, service_name, caplog
):
    unit = unit_for(
        service_name,
        target.on("/e", 503, b"busy", "text/plain"),
        is_idempotent=True,
        retry=RetryPolicy(number=3, base_interval=60, factor=2),
    )
    sending(unit)

    with caplog.at_level(logging.INFO):
        message = put(broker, unit)
        wait_until(lambda: EventKind.RETRY_SCHEDULED in history.kinds(message.id), 10, what="retry scheduled")

    assert broker.depth(unit.areas.pending) == 0
    ((headers, body),) = broker.drain(unit.areas.retry(1), expect=1)
    waiting = Message.from_frame(headers, body)
    assert (waiting.attempt, waiting.last_outcome, waiting.last_status) == (1, "error", 503)
    assert abs((waiting.due or 0) - (now_ms() + 60_000)) < 5_000
    (warning,) = [r for r in caplog.records if getattr(r, "ase_code", "") == "SE-ASE-W0022"]
    assert warning.getMessage() == (
        f"SE-ASE-W0022: A technical error occurs when invoking the target service invokation on request "
        f"'{message.id}'. Waiting for 60 seconds before next try (1/3)."
    )


def test_timeout_of_idempotent_target_logs_w0024(broker, target, sending, history, service_name, caplog):
    unit = unit_for(
        service_name,
        target.on("/slow", "sleep", 3, 200),
        is_idempotent=True,
        retry=RetryPolicy(number=2, base_interval=30, factor=3),
    )
    sending(unit)

    with caplog.at_level(logging.INFO):
        message = put(broker, unit)
        wait_until(lambda: EventKind.RETRY_SCHEDULED in history.kinds(message.id), 10, what="retry scheduled")

    assert broker.depth(unit.areas.retry(1)) == 1
    assert any(
        r.getMessage().endswith("Waiting for 30 seconds before next try (1/2).")
        for r in caplog.records
        if getattr(r, "ase_code", "") == "SE-ASE-W0024"
    )


def test_non_idempotent_target_is_parked_at_once(broker, target, sending, history, service_name):
    unit = unit_for(service_name, target.on("/e", 500, b"", "text/plain"), is_idempotent=False)
    sending(unit)

    message = put(broker, unit)

    wait_until(lambda: EventKind.ERROR in history.kinds(message.id), 10, what="parking")
    assert EventKind.RETRY_SCHEDULED not in history.kinds(message.id)
    assert broker.depth(unit.areas.error) == 1
    assert broker.depth(unit.areas.retry(1)) is None  # never created: nothing is retried for this unit


def test_a_fault_is_never_retried(broker, target, sending, history, service_name):
    unit = unit_for(service_name, target.on("/f", 400, b"no", "text/plain"), is_idempotent=True)
    sending(unit)

    message = put(broker, unit)

    wait_until(lambda: EventKind.FAULT in history.kinds(message.id), 10, what="fault")
    assert broker.depth(unit.areas.fault) == 1


def test_the_pump_leaves_requests_that_are_not_due(broker, history, service_name):
    unit = unit_for(
        service_name,
        "http://127.0.0.1:9/x",
        is_idempotent=True,
        retry=RetryPolicy(number=1, base_interval=30, factor=1),
    )
    waiting = put(broker, unit, unit.areas.retry(1), attempt=1, due=now_ms() + 30_000)

    report = RetryPump(broker.component(), history, idle=0.2).pump([unit])

    assert report.retried == 0
    assert broker.depth(unit.areas.retry(1)) == 1
    assert history.kinds(waiting.id) == []


def test_the_pump_moves_due_requests_back_to_pending(broker, history, service_name):
    unit = unit_for(
        service_name, "http://127.0.0.1:9/x", is_idempotent=True, retry=RetryPolicy(number=1, base_interval=1, factor=1)
    )
    waiting = put(broker, unit, unit.areas.retry(1), attempt=1, due=now_ms() + 1000)
    time.sleep(1.2)

    report = RetryPump(broker.component(), history, idle=0.2).pump([unit])

    assert report.retried == 1
    ((headers, body),) = broker.drain(unit.areas.pending, expect=1)
    ready = Message.from_frame(headers, body)
    assert (ready.id, ready.attempt, ready.due) == (waiting.id, 1, None)
    assert history.kinds(waiting.id) == [EventKind.RETRIED]


def test_due_requests_behind_10000_waiting_ones_are_retried_on_time(broker, history, service_name):
    """The ActiveMQ selector trap: a selector sees only the first 200 messages of a queue. With one RETRY
    queue per retry number, requests due for retry 1 never queue behind the 10,000 waiting for retry 2."""
    unit = unit_for(
        service_name,
        "http://127.0.0.1:9/x",
        is_idempotent=True,
        retry=RetryPolicy(number=2, base_interval=1, factor=600),
    )
    conn = broker.connection()
    headers, body = Message(id=new_id(), service=unit.service, payload=b"{}", attempt=2).to_frame()
    futures = [conn.send(queue(unit.areas.retry(2)), {**headers, "ase-id": new_id()}, body) for _ in range(10_000)]
    for future in futures:
        future.result(60)
    conn.disconnect()
    due = [put(broker, unit, unit.areas.retry(1), attempt=1) for _ in range(10)]
    time.sleep(1.1)

    started = time.monotonic()
    report = RetryPump(broker.component(), history, idle=0.3).pump([unit])

    assert report.retried == 10
    assert time.monotonic() - started < 1.5
    assert {Message.from_frame(h, b).id for h, b in broker.drain(unit.areas.pending, expect=10)} == {m.id for m in due}
    assert broker.depth(unit.areas.retry(2)) == 10_000


def test_the_pump_expires_requests_whose_ttl_passed_with_w0011(broker, history, service_name, caplog):
    unit = unit_for(
        service_name,
        "http://127.0.0.1:9/x",
        is_idempotent=True,
        time_to_live=2,
        retry=RetryPolicy(number=1, base_interval=1, factor=1),
    )
    old = put(broker, unit, unit.areas.retry(1), attempt=1, incoming_timestamp=now_ms() - 10_000)
    time.sleep(1.1)

    with caplog.at_level(logging.INFO):
        report = RetryPump(broker.component(), history, idle=0.2).pump([unit])

    assert (report.retried, report.expired) == (0, 1)
    assert broker.depth(unit.areas.expired) == 1
    assert history.kinds(old.id) == [EventKind.EXPIRED, EventKind.PARKED]
    assert any(getattr(r, "ase_code", "") == "SE-ASE-W0011" for r in caplog.records)


def test_component_ttl_is_read_at_each_pump_run(broker, history, service_name):
    """Hot update (CFG-010): the same request survives one run and expires in the next once the TTL shrinks."""
    unit = unit_for(
        service_name, "http://127.0.0.1:9/x", is_idempotent=True, retry=RetryPolicy(number=1, base_interval=1, factor=1)
    )
    put(broker, unit, unit.areas.retry(1), attempt=1, incoming_timestamp=now_ms() - 10_000)
    time.sleep(1.1)
    short = ComponentConfig(broker_url=broker.component().broker_url, receipt_timeout=5, time_to_live=5)

    report = RetryPump(short, history, idle=0.2).pump([unit])

    assert report.expired == 1


def test_retries_follow_the_backoff_schedule_then_park_with_e0020(
    broker, target, sending, history, service_name, caplog
):
    """Each try within ±1.5 s of base × factor^(n-1) after the previous one; then the error area."""
    unit = unit_for(
        service_name,
        target.on("/e", 503, b"busy", "text/plain"),
        is_idempotent=True,
        retry=RetryPolicy(number=3, base_interval=1, factor=2),
    )
    sending(unit)
    pump = RetryPump(broker.component(), history, idle=0.1)

    with caplog.at_level(logging.INFO):
        message = put(broker, unit)
        deadline = time.monotonic() + 30
        while EventKind.ERROR not in history.kinds(message.id) and time.monotonic() < deadline:
            pump.pump([unit], budget=0.5)
            time.sleep(0.2)

    calls = [r.at for r in target.received]
    assert len(calls) == 4, "the first call and 3 retries"
    gaps = [b - a for a, b in zip(calls, calls[1:], strict=False)]
    for gap, expected in zip(gaps, [1, 2, 4], strict=True):
        assert abs(gap - expected) <= 1.5, (gaps, [1, 2, 4])
    assert broker.depth(unit.areas.error) == 1
    assert [getattr(r, "ase_code", "") for r in caplog.records if getattr(r, "ase_code", "")].count("SE-ASE-W0022") == 3
    assert any(getattr(r, "ase_code", "") == "SE-ASE-E0020" for r in caplog.records)
    ((headers, body),) = broker.drain(unit.areas.error, expect=1)
    assert Message.from_frame(headers, body).attempt == 4


def test_a_retry_that_succeeds_delivers_the_request(broker, target, sending, history, service_name):
    unit = unit_for(
        service_name,
        target.on("/flaky", 503, b"", "text/plain"),
        is_idempotent=True,
        retry=RetryPolicy(number=2, base_interval=1, factor=1),
    )
    sending(unit)
    message = put(broker, unit)
    wait_until(lambda: EventKind.RETRY_SCHEDULED in history.kinds(message.id), 10, what="retry scheduled")
    target.behaviours["/flaky"] = (200, b"{}", "application/json")
    time.sleep(1.1)

    RetryPump(broker.component(), history, idle=0.2).pump([unit])

    wait_until(lambda: EventKind.ACKED in history.kinds(message.id), 10, what="delivery on retry")
    assert history.kinds(message.id) == [
        EventKind.ATTEMPT,
        EventKind.RETRY_SCHEDULED,
        EventKind.RETRIED,
        EventKind.ATTEMPT,
        EventKind.ACKED,
    ]
