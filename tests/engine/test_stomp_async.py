"""The posting process's asyncio STOMP producer: frames, receipts and failures, against the real test broker."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import time
import uuid

import pytest

from ase_engine.broker import queue
from ase_engine.config import ComponentConfig
from ase_engine.errors import BrokerUnavailable
from ase_engine.stomp_async import AsyncPostingPool, AsyncStompProducer, encode_frame, read_frame


def frames_read(data: bytes, count: int) -> list[tuple[str, dict[str, str], bytes]]:
    async def read() -> list[tuple[str, dict[str, str], bytes]]:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        return [await read_frame(reader) for _ in range(count)]

    return asyncio.run(read())


def test_header_values_with_colons_newlines_and_backslashes_survive_encoding() -> None:
    value = 'a:b\nc\\d\re {"k":"v"}'
    frame = encode_frame("SEND", {"destination": "/queue/q", "x-odd:name": value}, b"body")

    ((command, headers, body),) = frames_read(frame, 1)

    assert command == "SEND"
    assert headers["x-odd:name"] == value
    assert headers["content-length"] == "4"
    assert body == b"body"


def test_body_with_nul_bytes_is_read_to_its_content_length_and_heartbeats_are_skipped() -> None:
    payload = b"\x00\x01\x00binary\x00"
    message = encode_frame("MESSAGE", {"id": "1"}, payload)
    data = b"\n\n" + message + b"\n" + encode_frame("RECEIPT", {"receipt-id": "r"})

    (first, second) = frames_read(data, 2)

    assert first == ("MESSAGE", {"id": "1", "content-length": str(len(payload))}, payload)
    assert second == ("RECEIPT", {"receipt-id": "r"}, b"")


def test_repeated_header_keeps_its_first_value() -> None:
    ((_, headers, _),) = frames_read(b"MESSAGE\nkey:first\nkey:second\n\n\x00", 1)
    assert headers["key"] == "first"


@pytest.mark.broker
def test_send_returns_after_the_receipt_and_the_message_is_in_the_queue(broker) -> None:
    name = f"async_{uuid.uuid4().hex[:8]}"
    properties = '{"customer":"a:b","note":"x\\ny"}'

    async def scenario() -> None:
        pool = AsyncPostingPool(broker.component(), size=2)
        try:
            for i in range(10):
                await pool.send(queue(name), {"persistent": "true", "ase-properties": properties, "n": str(i)}, b"x")
        finally:
            await pool.close()

    asyncio.run(scenario())

    got = broker.drain(name, expect=10)
    assert sorted(int(h["n"]) for h, _ in got) == list(range(10))
    assert {h["ase-properties"] for h, _ in got} == {properties}
    assert {h["persistent"] for h, _ in got} == {"true"}


@pytest.mark.broker
def test_error_frame_for_a_send_fails_that_send(broker) -> None:
    async def scenario() -> str:
        producer = AsyncStompProducer(broker.component(), "bad")
        await producer.connect(5)
        try:
            # ActiveMQ refuses a SEND without a destination with an ERROR frame naming our receipt.
            with pytest.raises(BrokerUnavailable) as raised:
                await producer.send("", {"persistent": "true"}, b"x", timeout=5)
            return str(raised.value)
        finally:
            await producer.close()

    assert asyncio.run(scenario())


def test_unreachable_broker_fails_fast_and_the_pool_does_not_retry_at_once() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    component = ComponentConfig(broker_url=f"127.0.0.1:{port}", receipt_timeout=5)

    async def scenario() -> tuple[float, str]:
        pool = AsyncPostingPool(component, size=1, retry_interval=30)
        started = time.monotonic()
        with pytest.raises(BrokerUnavailable):
            await pool.send(queue("never"), {}, b"x")
        with pytest.raises(BrokerUnavailable) as second:
            await pool.send(queue("never"), {}, b"x")
        return time.monotonic() - started, str(second.value)

    elapsed, reason = asyncio.run(scenario())
    assert elapsed < 2
    assert "refused" in reason.lower()


@pytest.mark.broker
def test_requests_of_one_loop_turn_are_persisted_in_one_transaction(broker) -> None:
    name = f"group_{uuid.uuid4().hex[:8]}"

    async def scenario() -> tuple[int, int]:
        pool = AsyncPostingPool(broker.component(), size=2)
        try:
            # gather starts the 20 sends in the same turn of the loop: one batch, one COMMIT, one RECEIPT.
            await asyncio.gather(
                *(pool.send(queue(name), {"persistent": "true", "n": str(i)}, b"x") for i in range(20))
            )
            return pool.batches, pool.messages
        finally:
            await pool.close()

    assert asyncio.run(scenario()) == (1, 20)
    got = broker.drain(name, expect=20)
    assert sorted(int(h["n"]) for h, _ in got) == list(range(20))
    assert all("transaction" not in h for h, _ in got)


@pytest.mark.broker
def test_a_batch_is_cut_at_max_batch_messages(broker) -> None:
    name = f"group_{uuid.uuid4().hex[:8]}"

    async def scenario() -> int:
        pool = AsyncPostingPool(broker.component(), size=2, max_batch=4)
        try:
            await asyncio.gather(
                *(pool.send(queue(name), {"persistent": "true", "n": str(i)}, b"x") for i in range(10))
            )
            return pool.batches
        finally:
            await pool.close()

    assert asyncio.run(scenario()) == 3  # 4 + 4 + 2
    assert len(broker.drain(name, expect=10)) == 10


@pytest.mark.broker
def test_a_failing_send_fails_every_request_of_its_transaction_and_none_is_kept(broker) -> None:
    name = f"group_{uuid.uuid4().hex[:8]}"

    async def scenario() -> tuple[list[BaseException | None], int]:
        pool = AsyncPostingPool(broker.component(), size=1, retry_interval=0)
        try:
            sends = [pool.send(queue(name), {"persistent": "true", "n": str(i)}, b"x") for i in range(3)]
            # ActiveMQ refuses a SEND without a destination: inside a transaction it ends the connection.
            sends.insert(1, pool.send("", {"persistent": "true"}, b"bad"))
            outcomes = await asyncio.gather(*sends, return_exceptions=True)
            # The pool reconnects for the next request, which is persisted.
            await pool.send(queue(name), {"persistent": "true", "n": "after"}, b"x")
            return outcomes, pool.batches
        finally:
            await pool.close()

    outcomes, batches = asyncio.run(scenario())
    assert [type(outcome) for outcome in outcomes] == [BrokerUnavailable] * 4
    assert batches == 2
    assert broker.depth(name) == 1
    got = broker.drain(name, expect=1)
    assert [h["n"] for h, _ in got] == ["after"]


@pytest.mark.broker
def test_a_cancelled_request_does_not_cancel_the_others_of_its_batch(broker) -> None:
    name = f"group_{uuid.uuid4().hex[:8]}"

    async def scenario() -> list[object]:
        pool = AsyncPostingPool(broker.component(), size=1)
        try:
            tasks = [asyncio.create_task(pool.send(queue(name), {"persistent": "true"}, b"x")) for _ in range(3)]
            await asyncio.sleep(0)  # the three sends are in the batch, written at the end of this turn
            tasks[0].cancel()
            return await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            await pool.close()

    outcomes = asyncio.run(scenario())
    assert isinstance(outcomes[0], asyncio.CancelledError)
    assert outcomes[1:] == [None, None]
    assert len(broker.drain(name, expect=3)) == 3  # the cancelled request's message was persisted all the same


@pytest.mark.broker
def test_requests_that_come_while_every_connection_waits_go_in_one_batch(broker) -> None:
    name = f"group_{uuid.uuid4().hex[:8]}"

    async def scenario() -> tuple[int, int]:
        pool = AsyncPostingPool(broker.component(), size=1)
        try:
            first = asyncio.create_task(pool.send(queue(name), {"persistent": "true", "n": "0"}, b"x"))
            await asyncio.sleep(0)  # the first is alone in its turn: written at once, as a plain SEND
            later = []
            for i in range(1, 6):
                later.append(asyncio.create_task(pool.send(queue(name), {"persistent": "true", "n": str(i)}, b"x")))
                await asyncio.sleep(0)  # each in a turn of its own, while the only connection waits
            await asyncio.gather(first, *later)
            return pool.batches, pool.messages
        finally:
            await pool.close()

    assert asyncio.run(scenario()) == (2, 6)
    assert sorted(int(h["n"]) for h, _ in broker.drain(name, expect=6)) == list(range(6))


@pytest.mark.broker
def test_a_request_waiting_for_a_busy_connection_fails_within_the_receipt_timeout(broker) -> None:
    component = dataclasses.replace(broker.component(), receipt_timeout=2)

    async def scenario() -> list[tuple[str, float]]:
        pool = AsyncPostingPool(component, size=1)
        loop = asyncio.get_running_loop()
        outcomes: list[tuple[str, float]] = []

        async def post(delay: float) -> None:
            await asyncio.sleep(delay)
            started = loop.time()
            try:
                await pool.send(queue(f"frozen_{uuid.uuid4().hex[:8]}"), {"persistent": "true"}, b"x")
                outcomes.append(("accepted", loop.time() - started))
            except BrokerUnavailable as exc:
                outcomes.append((str(exc), loop.time() - started))

        try:
            await pool.send(queue("warm"), {"persistent": "true"}, b"x")  # the connection is open
            with broker.frozen():
                # The first is written and gets no receipt; the second waits for the only connection.
                await asyncio.gather(post(0), post(1))
            return outcomes
        finally:
            await pool.close()

    outcomes = asyncio.run(scenario())
    assert [reason for reason, _ in outcomes] == ["no receipt from the broker within 2 s"] * 2
    assert all(1.9 < waited < 2.6 for _, waited in outcomes), outcomes
