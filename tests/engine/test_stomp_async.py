"""The posting process's asyncio STOMP producer: frames, receipts and failures, against the real test broker."""

from __future__ import annotations

import asyncio
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
