"""A small pipelined Redis client (RESP2 over one asyncio connection) for the ingress hot path.

Why not ``redis.asyncio``: the duplicate check adds two script calls to every
keyed request, and redis-py's asyncio client spends 75-100 us of CPU per call
(connection pool, locks, generic parser: measured on this machine), which cost
the ingress a third of its throughput (docs/BENCHMARKS.md). Here every call is
one pre-encoded ``EVALSHA`` appended to a buffer flushed once per event-loop
iteration, on one connection per event loop; replies come back in order and
complete the callers' futures.

Only what console.dedup needs: scripts (``EVALSHA``, loaded at connection,
reloaded after a Redis restart), ``AUTH`` and ``SELECT`` from a ``redis://`` URL.
Any connection error or timeout fails every call in flight and closes the
connection; the next call opens a new one.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
from typing import Any
from urllib.parse import unquote, urlparse

Reply = Any


class RespError(Exception):
    """An error reply (``-ERR ...``) or a broken connection."""


def encode(*args: bytes | str | int) -> bytes:
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


def _parse(buf: bytearray, pos: int) -> tuple[Reply, int] | None:
    """One reply from ``buf[pos:]``: ``(value, end)``, or ``None`` if incomplete."""
    end = buf.find(b"\r\n", pos)
    if end < 0:
        return None
    kind, line = buf[pos], bytes(buf[pos + 1 : end])
    if kind == 43:  # +
        return line, end + 2
    if kind == 45:  # -
        return RespError(line.decode("utf-8", "replace")), end + 2
    if kind == 58:  # :
        return int(line), end + 2
    if kind == 36:  # $
        size = int(line)
        if size < 0:
            return None, end + 2
        if len(buf) < end + 2 + size + 2:
            return None
        return bytes(buf[end + 2 : end + 2 + size]), end + 2 + size + 2
    if kind == 42:  # *
        count = int(line)
        if count < 0:
            return None, end + 2
        items: list[Reply] = []
        at = end + 2
        for _ in range(count):
            parsed = _parse(buf, at)
            if parsed is None:
                return None
            items.append(parsed[0])
            at = parsed[1]
        return items, at
    raise RespError(f"unexpected reply type {chr(kind)!r}")


class _Protocol(asyncio.Protocol):
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.waiters: collections.deque[asyncio.Future[Reply]] = collections.deque()
        self.buf = bytearray()
        self.out: list[bytes] = []
        self.lost: BaseException | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio.Transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        pos = 0
        while pos < len(self.buf):
            parsed = _parse(self.buf, pos)
            if parsed is None:
                break
            value, pos = parsed
            waiter = self.waiters.popleft()
            if not waiter.done():
                if isinstance(value, RespError):
                    waiter.set_exception(value)
                else:
                    waiter.set_result(value)
        del self.buf[:pos]

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = exc or RespError("connection closed by Redis")
        self.fail(self.lost)

    def fail(self, exc: BaseException) -> None:
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_exception(RespError(f"{type(exc).__name__}: {exc}"))

    def call(self, command: bytes) -> asyncio.Future[Reply]:
        if self.lost is not None or self.transport is None or self.transport.is_closing():
            raise RespError("not connected")
        future: asyncio.Future[Reply] = self.loop.create_future()
        self.waiters.append(future)
        if not self.out:
            self.loop.call_soon(self.flush)
        self.out.append(command)
        return future

    def flush(self) -> None:
        out, self.out = self.out, []
        if out and self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(out))


class Script:
    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()


class RespClient:
    """One pipelined connection, for the event loop that created it."""

    def __init__(self, url: str, timeout: float) -> None:
        parsed = urlparse(url)
        if parsed.scheme != "redis":
            raise ValueError(f"only redis:// URLs are supported here, not '{parsed.scheme}://'")
        self.host = parsed.hostname or "127.0.0.1"
        self.port = parsed.port or 6379
        self.password = unquote(parsed.password) if parsed.password else None
        self.username = unquote(parsed.username) if parsed.username else None
        self.db = int(parsed.path.strip("/") or 0)
        self.timeout = timeout
        self._proto: _Protocol | None = None
        self._connecting: asyncio.Lock | None = None
        self._scripts: list[Script] = []

    def script(self, source: str) -> Script:
        script = Script(source)
        self._scripts.append(script)
        return script

    async def _connection(self) -> _Protocol:
        proto = self._proto
        if proto is not None and proto.lost is None:
            return proto
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._proto is not None and self._proto.lost is None:
                return self._proto
            loop = asyncio.get_running_loop()
            async with asyncio.timeout(self.timeout):
                _, proto = await loop.create_connection(lambda: _Protocol(loop), self.host, self.port)
                setup: list[asyncio.Future[Reply]] = []
                if self.password:
                    auth = (self.username, self.password) if self.username else (self.password,)
                    setup.append(proto.call(encode("AUTH", *auth)))
                if self.db:
                    setup.append(proto.call(encode("SELECT", self.db)))
                setup += [proto.call(encode("SCRIPT", "LOAD", s.source)) for s in self._scripts]
                try:
                    await asyncio.gather(*setup)
                except BaseException:
                    if proto.transport is not None:
                        proto.transport.abort()
                    raise
            self._proto = proto
            return proto

    async def run(self, script: Script, keys: list[str], args: list[Any]) -> Reply:
        """``EVALSHA`` with a timeout; a timeout or a broken connection closes it (replies would misalign)."""
        proto = await self._connection()
        command = encode("EVALSHA", script.sha, len(keys), *keys, *args)
        try:
            async with asyncio.timeout(self.timeout):
                return await proto.call(command)
        except TimeoutError:
            self._drop(proto, TimeoutError(f"no answer from Redis within {self.timeout:g} s"))
            raise
        except RespError as exc:
            if str(exc).startswith("NOSCRIPT"):  # Redis restarted and lost its scripts: load them again
                self._drop(proto, exc)
                proto = await self._connection()
                async with asyncio.timeout(self.timeout):
                    return await proto.call(command)
            raise

    def submit(self, script: Script, keys: list[str], args: list[Any]) -> asyncio.Future[Reply] | None:
        """``EVALSHA`` on the open connection without waiting for it (``None`` if none is open): the
        command leaves with this loop iteration's batch; the reply completes the returned future."""
        proto = self._proto
        if proto is None or proto.lost is not None:
            return None
        return proto.call(encode("EVALSHA", script.sha, len(keys), *keys, *args))

    def _drop(self, proto: _Protocol, exc: BaseException) -> None:
        proto.lost = exc
        proto.fail(exc)
        if proto.transport is not None:
            proto.transport.abort()
        if self._proto is proto:
            self._proto = None
