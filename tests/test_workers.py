"""The sending process hosted by real Celery workers: instances, start/stop broadcast, kill -9.

Each test starts worker processes (``celery -A console worker``) against the
test ActiveMQ, the test database and Redis, and posts through the real ingress.
"""

from __future__ import annotations

import time

import pytest

from ase_engine.errors import ProcessStateError
from console import operations
from console.models import MessageEvent, WorkerInstance
from tests.conftest import wait_until
from tests.fixtures.services import IngressClient

pytestmark = [pytest.mark.broker, pytest.mark.slow]


def delivered_ids(target, path: str) -> list[str]:  # type: ignore[no-untyped-def]
    return [r.headers["X-ASE-Message-Id"] for r in list(target.received) if r.path == path]


def test_worker_delivers_a_posted_request_to_the_target(broker, target, deploy, workers, service_name):
    deploy(service_name, target.on("/ok", 200, b"{}", "application/json"))
    workers()

    message_id = IngressClient().accept(service_name)

    wait_until(lambda: delivered_ids(target, "/ok") == [message_id], 15, what="delivery")
    wait_until(lambda: broker.depth(service_name) == 0, 10, what="ack")
    wait_until(
        lambda: MessageEvent.objects.filter(message_id=message_id, kind="acked").exists(), 10, what="acked event"
    )


def test_stopping_the_sending_process_reaches_every_instance(broker, target, deploy, workers, service_name):
    deploy(service_name, target.on("/ok", 200, b"{}", "application/json"))
    first, second = workers(), workers()

    result = operations.set_process("sending", False, service_name)

    assert sorted(r["instance"] for r in _replies(result.workers)) == sorted([first.name, second.name]), result.workers
    assert all(service_name not in r["sending"] for r in _replies(result.workers))
    message_id = IngressClient().accept(service_name)
    time.sleep(1.5)
    assert delivered_ids(target, "/ok") == []
    assert broker.depth(service_name) == 1
    with pytest.raises(ProcessStateError) as already:
        operations.set_process("sending", False, service_name)
    assert already.value.code.id == "SE-ASE-W0020"

    operations.set_process("sending", True, service_name)

    wait_until(lambda: delivered_ids(target, "/ok") == [message_id], 15, what="delivery after restart")
    assert "SE-ASE-I0004" in first.log and "SE-ASE-I0004" in second.log
    assert first.log.count("SE-ASE-I0002") >= 2


def test_instances_share_one_queue_and_deliver_each_request_once(broker, target, deploy, workers, service_name):
    deploy(service_name, target.on("/ok", "sleep", 0.05, 200))
    first, second = workers(), workers()

    ids = {IngressClient().accept(service_name, f'{{"n": {n}}}'.encode()) for n in range(40)}

    wait_until(lambda: len(delivered_ids(target, "/ok")) >= 40, 30, what="40 deliveries")
    time.sleep(0.5)
    assert sorted(delivered_ids(target, "/ok")) == sorted(ids)
    wait_until(
        lambda: MessageEvent.objects.filter(service=service_name, kind="acked").count() == 40,
        10,
        what="40 acked events",
    )
    instances = set(MessageEvent.objects.filter(service=service_name, kind="acked").values_list("instance", flat=True))
    assert instances == {first.name, second.name}


def test_kill_9_of_worker_during_invocation_loses_nothing(broker, target, deploy, workers, service_name):
    deploy(service_name, target.on("/slow", "sleep", 3, 200), timeout="20000")
    doomed = workers()
    message_id = IngressClient().accept(service_name)
    assert target.started.wait(15), "the target was never called"

    doomed.kill9()

    assert doomed.proc.returncode == -9
    wait_until(lambda: broker.depth(service_name) == 1, 15, what="the request back in PENDING")
    target.behaviours["/slow"] = (200, b"{}", "application/json")
    workers()
    wait_until(
        lambda: MessageEvent.objects.filter(message_id=message_id, kind="acked").exists(),
        30,
        what="delivery by the restarted worker",
    )
    assert broker.depth(service_name) == 0
    assert set(delivered_ids(target, "/slow")) == {message_id}


def test_stopping_a_unit_waits_for_its_invocation_in_flight(broker, target, deploy, workers, service_name):
    deploy(service_name, target.on("/slow", "sleep", 2, 200), timeout="10000", provides_stop_timeout="15")
    workers()
    message_id = IngressClient().accept(service_name)
    assert target.started.wait(15)

    result = operations.stop_unit(service_name)

    (reply,) = _replies(result.workers)
    assert reply["left_in_flight"] == {service_name: 0}
    assert delivered_ids(target, "/slow") == [message_id]
    wait_until(lambda: broker.depth(service_name) == 0, 10, what="ack")
    assert IngressClient().post(service_name, b"{}").status_code == 503


def test_a_restarted_worker_honours_the_stopped_state(broker, target, deploy, workers, service_name):
    deploy(service_name, target.on("/ok", 200, b"{}", "application/json"))
    operations.set_process("sending", False, service_name)
    IngressClient().accept(service_name)

    worker = workers()
    time.sleep(1.5)

    assert delivered_ids(target, "/ok") == []
    assert WorkerInstance.objects.get(name=worker.name).sending_services == []
    assert broker.depth(service_name) == 1


def _replies(workers: list[dict]) -> list[dict]:  # type: ignore[type-arg]
    """Celery replies are ``{worker name: reply}``."""
    return [reply for item in workers for reply in item.values()]
