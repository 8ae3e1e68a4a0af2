"""The ingress's pipelined Redis client (console.respwire) against the real Redis of the test run."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from console.respwire import RespClient, RespError, _parse
from tests.conftest import TEST_REDIS_URL, free_port

ECHO = "redis.call('SET', KEYS[1], ARGV[1], 'PX', 60000) return {ARGV[1], tonumber(ARGV[2]), false}"


def test_two_hundred_concurrent_calls_on_one_connection_each_get_their_own_reply(redis_available):
    async def scenario() -> list[object]:
        client = RespClient(TEST_REDIS_URL, 5)
        script = client.script(ECHO)
        prefix = uuid.uuid4().hex
        return await asyncio.gather(*(client.run(script, [f"{prefix}:{n}"], [f"v{n}", n]) for n in range(200)))

    replies = asyncio.run(scenario())

    assert replies == [[f"v{n}".encode(), n, None] for n in range(200)]


def test_a_reply_split_across_reads_is_parsed_only_when_complete():
    whole = b"*3\r\n$5\r\nhello\r\n:42\r\n$-1\r\n"

    assert _parse(bytearray(whole), 0) == ([b"hello", 42, None], len(whole))
    for cut in range(1, len(whole)):
        assert _parse(bytearray(whole[:cut]), 0) is None


def test_an_error_reply_fails_only_its_call(redis_available):
    async def scenario() -> tuple[BaseException | None, object]:
        client = RespClient(TEST_REDIS_URL, 5)
        bad = client.script("return redis.call('INCR', KEYS[1])")
        good = client.script(ECHO)
        key = uuid.uuid4().hex
        await client.run(good, [key], ["text", 1])
        failed = None
        try:
            await client.run(bad, [key], [])
        except RespError as exc:
            failed = exc
        return failed, await client.run(good, [key + "x"], ["after", 2])

    failed, after = asyncio.run(scenario())

    assert failed is not None and "not an integer" in str(failed)
    assert after == [b"after", 2, None]


def test_an_unreachable_redis_is_an_os_error():
    async def scenario() -> None:
        client = RespClient(f"redis://127.0.0.1:{free_port()}/0", 2)
        await client.run(client.script(ECHO), ["k"], ["v", 1])

    with pytest.raises(OSError):
        asyncio.run(scenario())
