"""The STOMP transport (ase_engine.broker) and the ActiveMQ behaviour ASE relies on, on the real broker."""

from __future__ import annotations

import threading
import uuid

import pytest
import stomp

from ase_engine.broker import StompConnection, queue, wait
from ase_engine.config import ComponentConfig
from ase_engine.errors import BrokerUnavailable
from tests.conftest import wait_until

pytestmark = pytest.mark.broker


def test_a_move_commits_send_and_ack_together(broker):
    source, destination = f"q{uuid.uuid4().hex[:8]}", f"q{uuid.uuid4().hex[:8]}"
    got: list[dict[str, str]] = []
    conn = StompConnection(broker.component(), name="mover", on_message=lambda h, b: got.append(h))
    conn.connect()
    conn.send_and_wait(queue(source), {"persistent": "true"}, b"payload")
    wait(conn.subscribe(queue(source), "s", prefetch=1), 5)
    wait_until(lambda: bool(got), 5, what="the message")

    wait(conn.move(got[0]["ack"], queue(destination), {"persistent": "true"}, b"payload"), 5)
    conn.disconnect()

    assert (broker.depth(source), broker.depth(destination)) == (0, 1)


def test_a_move_interrupted_before_commit_leaves_the_message_where_it_was(broker):
    """Invariant 3: SEND + ACK inside BEGIN/COMMIT; a connection lost before COMMIT rolls both back."""
    source, destination = f"q{uuid.uuid4().hex[:8]}", f"q{uuid.uuid4().hex[:8]}"
    seeder = broker.connection()
    seeder.send_and_wait(queue(source), {"persistent": "true"}, b"payload")
    seeder.disconnect()
    received = threading.Event()
    frames: list[stomp.utils.Frame] = []

    class Listener(stomp.ConnectionListener):
        def on_message(self, frame):  # type: ignore[no-untyped-def]
            frames.append(frame)
            received.set()

    raw = stomp.Connection12([("127.0.0.1", broker.port)], auto_decode=False)
    raw.set_listener("", Listener())
    raw.connect(wait=True, headers={"host": "localhost"})
    raw.subscribe(queue(source), "s", ack="client-individual", headers={"activemq.prefetchSize": "1"})
    assert received.wait(5)
    raw.begin(transaction="tx1")
    raw.send(queue(destination), b"payload", headers={"persistent": "true"}, transaction="tx1")
    raw.ack(frames[0].headers["ack"], transaction="tx1")
    raw.transport.socket.close()  # the process dies before COMMIT
    raw.transport.stop()

    wait_until(lambda: broker.depth(source) == 1, 10, what="the message back in its queue")
    assert broker.depth(destination) in (None, 0)  # never created: the SEND was rolled back


def test_queue_statistics_answer_none_for_a_queue_that_does_not_exist(broker):
    conn = broker.connection()
    try:
        stats = conn.queue_stats([f"missing{uuid.uuid4().hex[:8]}"], timeout=1)
    finally:
        conn.disconnect()

    assert list(stats.values()) == [None]


def test_creating_queues_is_idempotent_and_keeps_their_messages(broker):
    name = f"q{uuid.uuid4().hex[:8]}"
    conn = broker.connection()
    try:
        conn.ensure_queues([name])
        conn.send_and_wait(queue(name), {"persistent": "true"}, b"kept")
        conn.ensure_queues([name])
        assert conn.queue_stats([name])[name]["size"] == 1
    finally:
        conn.disconnect()


def test_connecting_to_a_closed_port_raises_broker_unavailable():
    conn = StompConnection(ComponentConfig(broker_url="127.0.0.1:9"), name="nowhere")

    with pytest.raises(BrokerUnavailable):
        conn.connect(timeout=2)


def test_a_send_on_a_lost_connection_fails_instead_of_hanging(broker):
    conn = broker.connection()
    conn.disconnect()

    with pytest.raises(BrokerUnavailable):
        conn.send_and_wait(queue("anything"), {"persistent": "true"}, b"x", timeout=2)
