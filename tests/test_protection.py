"""Target protection against the real ActiveMQ and Redis: a circuit breaker shared by two sending
instances (target brought down and up), and a rate limit held across two real Celery workers."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import redis

from ase_engine.config import RetryPolicy
from ase_engine.history import EventKind, MemorySink
from ase_engine.protection import CLOSED, OPEN, Protection
from ase_engine.sending import SendingProcess
from console.models import MessageEvent
from tests.conftest import TEST_REDIS_URL, free_port, wait_until
from tests.fixtures.engine import put, unit_for
from tests.fixtures.services import IngressClient

pytestmark = pytest.mark.broker


class SwitchableTarget:
    """An HTTP target on a fixed port that can be brought down (connection refused) and up again."""

    def __init__(self) -> None:
        self.port = free_port()
        self.received: list[tuple[str, float]] = []
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/orders"

    def up(self) -> None:
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                received.append((self.headers["X-ASE-Message-Id"], time.time()))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def down(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


@pytest.fixture
def switchable() -> Iterator[SwitchableTarget]:
    target = SwitchableTarget()
    yield target
    target.down()


def test_breaker_opens_pauses_half_opens_and_closes_with_the_target_down_then_up(
    broker, redis_available, switchable, service_name, caplog
):
    unit = unit_for(
        service_name,
        switchable.url,
        is_idempotent=True,
        retry=RetryPolicy(number=3, base_interval=600, factor=1),
        breaker_threshold=3,
        breaker_cooldown=4,
    )
    conn = broker.connection()
    conn.ensure_queues(unit.areas.all() + unit.retry_queues())
    conn.disconnect()
    for n in range(12):
        put(broker, unit, payload=f'{{"n": {n}}}'.encode())
    history = MemorySink()
    client = redis.Redis.from_url(TEST_REDIS_URL)
    watcher = Protection(client, "test-watcher")
    processes = [
        SendingProcess(broker.component(), history, concurrency=2, instance=name, protection=Protection(client, name))
        for name in ("instance-a", "instance-b")
    ]

    def attempts() -> int:
        return sum(1 for e in list(history.events) if e.kind is EventKind.ATTEMPT)

    try:
        with caplog.at_level(logging.INFO):
            for process in processes:  # the target is down: connection refused
                process.start()
                process.apply([unit])

            wait_until(lambda: watcher.breaker(service_name).state == OPEN, 15, what="the breaker to open")
            opened = watcher.breaker(service_name)
            # Failed requests wait in RETRY; the others are back in PENDING once the calls in flight are done.
            wait_until(lambda: broker.depth(service_name) == 12 - attempts(), 10, what="requests back in PENDING")
            failed = attempts()
            assert opened.opens == 1 and 3 <= failed <= 3 + 3  # the threshold, plus the other threads' calls
            time.sleep(1)  # within the cool-down: nobody calls the target
            assert attempts() == failed
            assert broker.depth(service_name) == 12 - failed

            wait_until(lambda: watcher.breaker(service_name).probes == 1, 10, what="the half-open probe")
            wait_until(lambda: watcher.breaker(service_name).opens == 2, 10, what="the failed probe to reopen")
            assert attempts() == failed + 1  # exactly one request probed the target

            switchable.up()
            wait_until(lambda: watcher.breaker(service_name).state == CLOSED, 15, what="the breaker to close")
            wait_until(lambda: len(switchable.received) == 12 - failed - 1, 15, what="delivery of the rest")
            wait_until(lambda: broker.depth(service_name) == 0, 10, what="PENDING drained")
            closed = watcher.breaker(service_name)
    finally:
        for process in processes:
            process.stop()
        watcher.reset(service_name)

    assert (closed.opens, closed.probes, closed.closes, closed.failures) == (2, 2, 1, 0)
    coded = [getattr(r, "ase_code", "") for r in caplog.records]
    assert coded.count("SE-ASE-W1001") == 2
    assert coded.count("SE-ASE-I1002") == 2
    assert coded.count("SE-ASE-I1003") == 1
    delivered = [message_id for message_id, _ in switchable.received]
    assert len(set(delivered)) == len(delivered)


def test_a_paused_unit_leaves_its_requests_untouched_in_pending(broker, redis_available, service_name):
    unit = unit_for(service_name, "http://127.0.0.1:9/never", breaker_threshold=1, breaker_cooldown=600)
    client = redis.Redis.from_url(TEST_REDIS_URL)
    Protection(client, "x").record(unit, failed=True)  # another instance saw the target fail: open
    conn = broker.connection()
    conn.ensure_queues(unit.areas.all())
    conn.disconnect()
    sent = [put(broker, unit) for _ in range(3)]
    process = SendingProcess(
        broker.component(), MemorySink(), concurrency=2, instance="paused", protection=Protection(client, "paused")
    )
    try:
        process.start()
        process.apply([unit])
        time.sleep(2)
        assert process.services == [service_name]
    finally:
        process.stop()
        Protection(client, "x").reset(service_name)

    stored = broker.drain(service_name, expect=3)
    assert sorted(h["ase-id"] for h, _ in stored) == sorted(m.id for m in sent)
    assert {h["ase-attempt"] for h, _ in stored} == {"0"}


def test_breaker_states_show_each_protected_unit_as_every_worker_sees_it(broker, deploy, redis_available, service_name):
    from console.protection import breaker_states

    result = deploy(
        service_name,
        "http://127.0.0.1:9/never",
        mustBeAutomaticallyStarted="false",
        **{"circuit-breaker-threshold": "2", "circuit-breaker-cooldown": "60"},
    )
    deploy(f"{service_name}b", "http://127.0.0.1:9/never", mustBeAutomaticallyStarted="false")
    unit = result.unit.to_config()
    shared = Protection(redis.Redis.from_url(TEST_REDIS_URL), "w1")
    try:
        shared.record(unit, failed=True)
        (before,) = breaker_states()
        shared.record(unit, failed=True)
        (after,) = breaker_states([service_name])
    finally:
        shared.reset(service_name)

    assert (before["service"], before["state"], before["consecutive_failures"]) == (service_name, "closed", 1)
    assert (after["state"], after["opens"], after["threshold"], after["cooldown"]) == ("open", 1, 2, 60)
    assert after["half_open_after_ms"] - after["opened_at_ms"] == 60_000


@pytest.mark.slow
def test_rate_limit_holds_within_ten_percent_across_two_workers(broker, switchable, deploy, workers, service_name):
    switchable.up()
    deploy(service_name, switchable.url, **{"rate-limit": "10"})
    first, second = workers(), workers()

    client = IngressClient()
    ids = [client.accept(service_name, f'{{"n": {n}}}'.encode()) for n in range(61)]

    wait_until(lambda: len(switchable.received) >= 61, 30, what="61 deliveries")
    times = sorted(at for _, at in switchable.received)
    rate = 60 / (times[-1] - times[0])
    assert 9.0 <= rate <= 11.0, f"{rate:.2f} messages/s"
    assert sorted(m for m, _ in switchable.received) == sorted(ids)
    wait_until(
        lambda: MessageEvent.objects.filter(service=service_name, kind="acked").count() == 61, 10, what="acked events"
    )
    instances = set(MessageEvent.objects.filter(service=service_name, kind="acked").values_list("instance", flat=True))
    assert instances == {first.name, second.name}
