"""Ordered delivery per group (``X-ASE-Group``) against the real ActiveMQ and Redis: the real ingress,
a sending process with ordered groups, and the retry pump moving due requests back."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from ase_engine.history import MemorySink
from ase_engine.ordering import OrderedGroups, hold_queue
from ase_engine.protection import Protection
from ase_engine.retry import RetryPump
from ase_engine.sending import SendingProcess
from tests.conftest import TEST_REDIS_URL, wait_until
from tests.fixtures.services import IngressClient

pytestmark = [pytest.mark.broker, pytest.mark.slow]


class GroupTarget:
    """Records every call as (group, n, status, time); fails the calls listed in ``failures`` (503)."""

    def __init__(self, failures: dict[tuple[str, int], int]) -> None:
        self.failures = dict(failures)
        self.calls: list[tuple[str, int, int, float]] = []
        self.in_flight: dict[str, int] = {}
        self.most_in_flight: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, headers: dict[str, str], body: bytes) -> tuple[Any, ...]:
        request = json.loads(body)
        group, n = request["g"], request["n"]
        with self._lock:
            self.in_flight[group] = self.in_flight.get(group, 0) + 1
            self.most_in_flight[group] = max(self.most_in_flight.get(group, 0), self.in_flight[group])
            failing = self.failures.get((group, n), 0) > 0
            if failing:
                self.failures[(group, n)] -= 1
        time.sleep(0.003)  # long enough for a second call of the group to overlap, if one were made
        status = 503 if failing else 200
        with self._lock:
            self.in_flight[group] -= 1
            self.calls.append((group, n, status, time.time()))
        return (status, b"{}", "application/json")

    def delivered(self, group: str) -> list[int]:
        return [n for g, n, status, _ in list(self.calls) if g == group and status == 200]

    def called(self, group: str) -> list[int]:
        return [n for g, n, _, _ in list(self.calls) if g == group]


@pytest.fixture
def pump(broker: Any) -> Iterator[Any]:
    """Runs the retry pump every 0.3 s for the given units, as Celery beat would."""
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def _start(unit: Any) -> None:
        def loop() -> None:
            while not stop.is_set():
                RetryPump(broker.component(), MemorySink(), idle=0.1).pump([unit], budget=1)
                stop.wait(0.3)

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        threads.append(thread)

    yield _start
    stop.set()
    for thread in threads:
        thread.join(10)


class CodeRecorder(logging.Handler):
    """The message codes logged under ``ase`` while the test runs (from any thread)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.codes: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.codes.append(getattr(record, "ase_code", ""))


@pytest.fixture
def logged_codes() -> Iterator[list[str]]:
    import console.asgi  # noqa: F401 - its django.setup() re-applies LOGGING, which would drop our handler

    recorder = CodeRecorder()
    logging.getLogger("ase").addHandler(recorder)
    yield recorder.codes
    logging.getLogger("ase").removeHandler(recorder)


def test_a_group_of_100_reaches_the_target_in_order_while_its_10th_is_retried_twice_and_another_group_flows(
    broker, target, deploy, pump, service_name, logged_codes
):
    calls = GroupTarget(failures={("A", 10): 2})
    result = deploy(
        service_name,
        target.on("/ordered", "call", calls),
        mustBeAutomaticallyStarted="false",
        provides_mustBeAutomaticallyStarted="true",
        **{
            "ordered-groups": "true",
            "is-idempotent": "true",
            "retry-policy-number": "3",
            "retry-policy-base-interval": "2",
            "retry-policy-factor": "1",
        },
    )
    unit = result.unit.to_config()
    ingress = IngressClient()
    for n in range(1, 101):
        response = ingress.post(service_name, json.dumps({"g": "A", "n": n}).encode(), **{"X-ASE-Group": "A"})
        assert response.status_code == 202
        if n % 4 == 0:
            body = json.dumps({"g": "B", "n": n // 4}).encode()
            assert ingress.post(service_name, body, **{"X-ASE-Group": "B"}).status_code == 202
    client = redis.Redis.from_url(TEST_REDIS_URL)
    process = SendingProcess(
        broker.component(),
        MemorySink(),
        concurrency=4,
        instance="ordered",
        protection=Protection(client, "ordered"),
        groups=OrderedGroups(client),
        drain_idle=0.3,
    )
    try:
        process.start()
        process.apply([unit])
        pump(unit)
        wait_until(lambda: len(calls.delivered("A")) == 100, 60, what="100 deliveries of group A")
        wait_until(lambda: OrderedGroups(client).state(service_name, "A") is None, 10, what="group A freed")
    finally:
        process.stop()

    assert calls.delivered("A") == list(range(1, 101))
    assert calls.called("A") == [*range(1, 10), 10, 10, 10, *range(11, 101)]
    assert calls.delivered("B") == list(range(1, 26))
    assert calls.most_in_flight == {"A": 1, "B": 1}
    tenth_delivered = next(at for g, n, status, at in calls.calls if (g, n, status) == ("A", 10, 200))
    first_failure = next(at for g, n, status, at in calls.calls if (g, n, status) == ("A", 10, 503))
    last_b = max(at for g, _, _, at in calls.calls if g == "B")
    assert tenth_delivered - first_failure >= 3.5  # two retries 2 s apart
    assert last_b < first_failure + 2  # B did not wait for A's retries
    assert broker.depth(hold_queue(unit, "A")) == 0
    assert broker.depth(service_name) == 0
    assert logged_codes.count("SE-ASE-W1002") == 2


def test_with_skip_a_retried_head_is_passed_by_its_followers(broker, target, deploy, pump, service_name):
    calls = GroupTarget(failures={("A", 2): 1})
    result = deploy(
        service_name,
        target.on("/ordered", "call", calls),
        mustBeAutomaticallyStarted="false",
        **{
            "ordered-groups": "true",
            "ordered-group-blocked": "skip",
            "is-idempotent": "true",
            "retry-policy-number": "1",
            "retry-policy-base-interval": "1",
        },
    )
    unit = result.unit.to_config()
    ingress = IngressClient()
    for n in range(1, 6):
        assert ingress.post(service_name, json.dumps({"g": "A", "n": n}).encode(), **{"X-ASE-Group": "A"}).status_code
    client = redis.Redis.from_url(TEST_REDIS_URL)
    process = SendingProcess(
        broker.component(), MemorySink(), concurrency=4, instance="skip", groups=OrderedGroups(client)
    )
    try:
        process.start()
        process.apply([unit])
        pump(unit)
        wait_until(lambda: len(calls.delivered("A")) == 5, 30, what="5 deliveries")
    finally:
        process.stop()

    assert calls.delivered("A") == [1, 3, 4, 5, 2]
    assert OrderedGroups(client).state(service_name, "A") is None


def test_two_sending_instances_never_call_one_group_twice_at_once_and_keep_its_order(
    broker, target, deploy, service_name
):
    calls = GroupTarget(failures={})
    result = deploy(
        service_name,
        target.on("/ordered", "call", calls),
        mustBeAutomaticallyStarted="false",
        **{"ordered-groups": "true"},
    )
    unit = result.unit.to_config()
    ingress = IngressClient()
    for n in range(1, 41):
        for group in ("A", "B", "C"):
            body = json.dumps({"g": group, "n": n}).encode()
            assert ingress.post(service_name, body, **{"X-ASE-Group": group}).status_code == 202
    client = redis.Redis.from_url(TEST_REDIS_URL)
    processes = [
        SendingProcess(broker.component(), MemorySink(), concurrency=4, instance=name, groups=OrderedGroups(client))
        for name in ("one", "two")
    ]
    try:
        for process in processes:
            process.start()
            process.apply([unit])
        wait_until(lambda: len(calls.calls) == 120, 30, what="120 deliveries")
    finally:
        for process in processes:
            process.stop()

    for group in ("A", "B", "C"):
        assert calls.delivered(group) == list(range(1, 41))
    assert calls.most_in_flight == {"A": 1, "B": 1, "C": 1}


def test_without_the_shared_group_state_grouped_requests_wait_untouched_in_pending(broker, target, service_name):
    from tests.conftest import free_port
    from tests.fixtures.engine import put, unit_for

    unit = unit_for(service_name, target.on("/ordered", 200, b"{}", "application/json"), ordered_groups=True)
    conn = broker.connection()
    conn.ensure_queues(unit.areas.all())
    conn.disconnect()
    sent = [put(broker, unit, group="A") for _ in range(3)]
    unreachable = redis.Redis(port=free_port(), socket_connect_timeout=0.5, socket_timeout=0.5)
    process = SendingProcess(
        broker.component(), MemorySink(), concurrency=2, instance="no-redis", groups=OrderedGroups(unreachable)
    )
    try:
        process.start()
        process.apply([unit])
        time.sleep(3)
    finally:
        process.stop()

    assert target.received == []
    stored = broker.drain(service_name, expect=3)
    assert sorted(h["ase-id"] for h, _ in stored) == sorted(m.id for m in sent)
    assert {h["ase-attempt"] for h, _ in stored} == {"0"}


def test_a_group_whose_head_is_parked_waits_until_the_head_is_recycled(broker, target, service_name, logged_codes):
    from ase_engine.broker import queue
    from tests.fixtures.engine import put, unit_for

    calls = GroupTarget(failures={("A", 2): 1})
    unit = unit_for(service_name, target.on("/ordered", "call", calls), ordered_groups=True)  # not idempotent
    conn = broker.connection()
    conn.ensure_queues(unit.areas.all())
    conn.disconnect()
    for n in range(1, 6):
        put(broker, unit, group="A", payload=json.dumps({"g": "A", "n": n}).encode())
    client = redis.Redis.from_url(TEST_REDIS_URL)
    groups = OrderedGroups(client)
    process = SendingProcess(
        broker.component(), MemorySink(), concurrency=2, instance="parked", groups=groups, drain_idle=0.3
    )
    try:
        process.start()
        process.apply([unit])
        wait_until(lambda: broker.depth(hold_queue(unit, "A")) == 3, 15, what="3 followers held")
        time.sleep(1)
        assert calls.called("A") == [1, 2]
        (blocked,) = groups.blocked(service_name)
        assert (blocked.group, blocked.phase) == ("A", "blocked")
        assert blocked.reason == f"is parked in '{unit.areas.error}'"

        # What an operator's recycle does: the parked request goes back to PENDING, whole.
        ((headers, body),) = broker.drain(unit.areas.error, expect=1)
        kept = {k: v for k, v in headers.items() if k not in ("ack", "subscription", "message-id", "destination")}
        conn = broker.connection()
        conn.send_and_wait(queue(unit.areas.pending), kept, body)
        conn.disconnect()

        wait_until(lambda: calls.delivered("A") == [1, 2, 3, 4, 5], 15, what="the group delivered in order")
        wait_until(lambda: groups.state(service_name, "A") is None, 10, what="the group freed")
    finally:
        process.stop()

    assert calls.called("A") == [1, 2, 2, 3, 4, 5]
    assert logged_codes.count("SE-ASE-W1002") == 1
    assert "SE-ASE-E0020" in logged_codes


def test_two_celery_workers_and_beat_keep_a_group_in_order_through_a_retry(
    broker, target, deploy, workers, beats, service_name
):
    from console.protection import blocked_groups

    calls = GroupTarget(failures={("A", 5): 1})
    deploy(
        service_name,
        target.on("/ordered", "call", calls),
        **{
            "ordered-groups": "true",
            "is-idempotent": "true",
            "retry-policy-number": "2",
            "retry-policy-base-interval": "3",
            "retry-policy-factor": "1",
        },
    )
    workers(), workers()
    beats()
    ingress = IngressClient()
    for n in range(1, 31):
        for group in ("A", "B"):
            body = json.dumps({"g": group, "n": n}).encode()
            assert ingress.post(service_name, body, **{"X-ASE-Group": group}).status_code == 202

    wait_until(lambda: calls.called("A")[:5] == [1, 2, 3, 4, 5], 30, what="A's head failing at 5")
    wait_until(lambda: [g["group"] for g in blocked_groups([service_name])] == ["A"], 10, what="A shown blocked")
    (shown,) = blocked_groups([service_name])
    wait_until(lambda: len(calls.delivered("A")) == 30, 30, what="group A delivered")
    wait_until(lambda: len(calls.delivered("B")) == 30, 10, what="group B delivered")

    assert shown["reason"] == "waits for retry 1/2" and shown["blocked_by"]
    assert calls.delivered("A") == list(range(1, 31))
    assert calls.delivered("B") == list(range(1, 31))
    assert calls.most_in_flight == {"A": 1, "B": 1}
    wait_until(lambda: blocked_groups([service_name]) == [], 10, what="no group blocked")
