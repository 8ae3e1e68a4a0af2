"""Retries end to end with real Celery workers and a real Celery beat (PROC-026, PROC-027, CFG-010)."""

from __future__ import annotations

import time

import pytest

from ase_engine.broker import queue
from ase_engine.message import Message, new_id
from console.models import ComponentSettings, MessageEvent
from tests.conftest import wait_until
from tests.fixtures.services import IngressClient

pytestmark = [pytest.mark.broker, pytest.mark.slow]


def calls(target, message_id: str) -> list[float]:  # type: ignore[no-untyped-def]
    return [r.at for r in list(target.received) if r.headers.get("X-ASE-Message-Id") == message_id]


def test_beat_retries_on_schedule_behind_10000_waiting_requests(broker, target, deploy, workers, beats, service_name):
    result = deploy(
        service_name,
        target.on("/flaky", 503, b"busy", "text/plain"),
        **{
            "is-idempotent": "true",
            "retry-policy-number": "2",
            "retry-policy-base-interval": "2",
            "retry-policy-factor": "600",
        },
    )
    unit = result.unit.to_config()
    conn = broker.connection()
    headers, body = Message(id=new_id(), service=service_name, payload=b"{}", attempt=2).to_frame()
    for future in [conn.send(queue(unit.areas.retry(2)), {**headers, "ase-id": new_id()}, body) for _ in range(10_000)]:
        future.result(60)
    conn.disconnect()
    workers()
    beats()

    message_id = IngressClient().accept(service_name)
    wait_until(lambda: len(calls(target, message_id)) == 1, 15, what="the first call")
    target.behaviours["/flaky"] = (200, b"{}", "application/json")

    wait_until(lambda: len(calls(target, message_id)) == 2, 15, what="the retry")
    first, second = calls(target, message_id)
    assert abs((second - first) - 2) <= 1.5
    wait_until(
        lambda: MessageEvent.objects.filter(message_id=message_id, kind="acked").exists(), 10, what="the acked event"
    )
    assert broker.depth(unit.areas.retry(2)) == 10_000


def test_ttl_hot_update_expires_waiting_requests_without_restart(broker, target, deploy, workers, beats, service_name):
    result = deploy(
        service_name,
        target.on("/down", 503, b"", "text/plain"),
        **{
            "is-idempotent": "true",
            "retry-policy-number": "1",
            "retry-policy-base-interval": "3",
            "retry-policy-factor": "1",
        },
    )
    unit = result.unit.to_config()
    workers()
    beats()
    message_id = IngressClient().accept(service_name)
    wait_until(lambda: broker.depth(unit.areas.retry(1)) == 1, 15, what="the request in RETRY")

    ComponentSettings.objects.update_or_create(pk=1, defaults={"time_to_live": 1})

    wait_until(lambda: broker.depth(unit.areas.expired) == 1, 15, what="expiry from RETRY")
    assert len(calls(target, message_id)) == 1
    wait_until(
        lambda: MessageEvent.objects.filter(message_id=message_id, kind="expired").exists(),
        10,
        what="the expired event",
    )


def test_expired_request_in_pending_is_never_sent(broker, target, deploy, workers, service_name):
    result = deploy(
        service_name,
        target.on("/ok", 200, b"{}", "application/json"),
        mustBeAutomaticallyStarted="false",
        **{"time-to-live": "1"},
    )
    message_id = IngressClient().accept(service_name)
    time.sleep(1.5)
    from console import operations

    operations.set_process("sending", True, service_name)
    workers()

    wait_until(lambda: broker.depth(result.unit.queue_expired) == 1, 15, what="expiry from PENDING")
    assert calls(target, message_id) == []
