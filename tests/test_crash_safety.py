"""Crash safety of retries (DESIGN invariants 2-4): kill -9 of workers and of beat while requests move
between PENDING, RETRY and the parking areas; every request ends in exactly one place."""

from __future__ import annotations

import collections
import json
import threading
import time

import pytest

from ase_engine.message import Message
from tests.conftest import wait_until
from tests.fixtures.services import IngressClient

pytestmark = [pytest.mark.broker, pytest.mark.slow]

REQUESTS = 1000


class MixedTarget:
    """A target failing a fixed fraction of calls, by request number ``n`` (stable across redeliveries):
    n % 10 == 0 always 503 (ends in the error area after its retries), n % 10 == 1 a fault (400),
    n % 10 in (2, 3) a 503 on the first call then 200 (delivered on retry), the rest 200."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: collections.Counter[str] = collections.Counter()
        self.delivered: set[str] = set()

    def __call__(self, headers: dict[str, str], body: bytes) -> tuple[int, bytes, str]:
        message_id = headers["X-ASE-Message-Id"]
        n = json.loads(body)["n"]
        with self.lock:
            self.calls[message_id] += 1
            first = self.calls[message_id] == 1
        if n % 10 == 0 or (n % 10 in (2, 3) and first):
            return 503, b"busy", "text/plain"
        if n % 10 == 1:
            return 400, b'{"fault": "rejected"}', "application/json"
        with self.lock:
            self.delivered.add(message_id)
        return 200, b"{}", "application/json"


def test_kill_9_of_workers_and_beat_during_retries_leaves_every_request_in_exactly_one_place(
    broker, target, deploy, workers, beats, service_name
):
    mixed = MixedTarget()
    result = deploy(
        service_name,
        target.on("/mixed", "call", mixed),
        timeout="2000",
        **{
            "is-idempotent": "true",
            "retry-policy-number": "2",
            "retry-policy-base-interval": "1",
            "retry-policy-factor": "1",
        },
    )
    unit = result.unit.to_config()
    first, second = workers(), workers()
    beat = beats()

    client = IngressClient()
    expected: dict[str, int] = {}
    for n in range(REQUESTS):
        response = client.post(service_name, json.dumps({"n": n}).encode())
        assert response.status_code == 202
        expected[response.json()["id"]] = n
        if n == 300:
            first.kill9()  # while requests are moved to RETRY
            first = workers()
        if n == 600:
            beat.kill9()
            beat = beats()
    wait_until(lambda: any(c > 1 for c in list(mixed.calls.values())), 20, what="retries under way")
    second.kill9()  # while the pump and the retries run
    time.sleep(1.0)
    beat.kill9()
    workers()
    beats()

    areas = [unit.areas.pending, *unit.retry_queues()]
    parking = [unit.areas.fault, unit.areas.error, unit.areas.timedout, unit.areas.expired]

    def settled() -> bool:
        if any(broker.depth(a) for a in areas):
            return False
        parked = sum(broker.depth(a) or 0 for a in parking)
        return len(mixed.delivered) + parked >= REQUESTS

    wait_until(settled, 120, interval=1.0, what="every request settled")
    places: dict[str, list[str]] = collections.defaultdict(list)
    for message_id in mixed.delivered:
        places[message_id].append("delivered")
    for area in parking:
        for headers, body in broker.drain(area, expect=broker.depth(area) or 0, timeout=30):
            places[Message.from_frame(headers, body).id].append(area)

    assert set(places) == set(expected), "a request was lost"
    assert {i: p for i, p in places.items() if len(p) != 1} == {}, "a request is in more than one place"
    for message_id, (place,) in places.items():
        n = expected[message_id] % 10
        want = unit.areas.error if n == 0 else unit.areas.fault if n == 1 else "delivered"
        assert place == want, (expected[message_id], place)


def test_activemq_restart_during_retries_loses_nothing_and_retries_resume_within_10_s(
    broker, target, deploy, workers, beats, service_name
):
    calls: collections.Counter[str] = collections.Counter()
    answered: list[tuple[float, str, int]] = []
    lock = threading.Lock()

    def twice_busy(headers: dict[str, str], body: bytes) -> tuple[int, bytes, str]:
        message_id = headers["X-ASE-Message-Id"]
        with lock:
            calls[message_id] += 1
            status = 503 if calls[message_id] <= 2 else 200
            answered.append((time.monotonic(), message_id, status))
        return status, b"", "text/plain"

    result = deploy(
        service_name,
        target.on("/busy", "call", twice_busy),
        **{
            "is-idempotent": "true",
            "retry-policy-number": "3",
            "retry-policy-base-interval": "2",
            "retry-policy-factor": "1",
        },
    )
    unit = result.unit.to_config()
    workers()
    beats()
    client = IngressClient()
    ids = {client.post(service_name, b"{}").json()["id"] for _ in range(50)}
    wait_until(lambda: sum(broker.depth(q) or 0 for q in unit.retry_queues()) > 0, 20, what="requests in RETRY")

    broker.kill()
    time.sleep(2.0)
    broker.start()
    back = time.monotonic()

    wait_until(lambda: any(at > back for at, _, _ in list(answered)), 10, what="a call within 10 s of the restart")
    wait_until(lambda: {m for _, m, s in list(answered) if s == 200} >= ids, 60, what="every request delivered")
    # A request whose ACK died with the broker is delivered once more (at least once): let such copies drain.
    wait_until(
        lambda: not any(broker.depth(q) for q in [unit.areas.pending, *unit.retry_queues()]),
        30,
        what="PENDING and RETRY empty",
    )
    assert not any(broker.depth(q) for q in [unit.areas.error, unit.areas.timedout, unit.areas.expired])
