"""STOMP on the event loop, for the posting process: persistent SENDs whose RECEIPT is awaited.

The ingress serves many requests on one asyncio loop. With stomp.py, every
SEND was written from the loop but every RECEIPT arrived on stomp.py's
receiver thread and had to wake the loop through a thread-safe future; the
thread hand-offs and the GIL contention cost more than the rest of the
request (docs/BENCHMARKS.md). Here a connection is an asyncio stream: the
SEND is written by the coroutine that posts, and one reader task per
connection resolves the receipt futures, on the same loop.

Group commit (``AsyncPostingPool``): a posting connection carries one batch
at a time, and the requests that come while it waits for the broker gather
into the next batch, written as ``BEGIN``, their ``SEND``s and a ``COMMIT``
carrying the ``receipt``, in one write. The broker's RECEIPT of the COMMIT
means every message of the transaction is on disk (KahaDB syncs its journal
on commit), so each request still answers only after the broker confirmed its
message; a request that finds the connection free is a plain SEND with a
receipt, written at once. Under load the broker syncs its journal once per
batch instead of once per message, and both sides exchange two frames fewer
per message (docs/BENCHMARKS.md, "group commit"). A transaction is all or
nothing: a failure fails every request of it, and none of its messages is
kept (an ERROR inside a transaction ends the connection, and the broker rolls
back what it has not committed).

This module does only what the posting process needs: CONNECT, SEND with a
``receipt`` header, BEGIN/COMMIT, RECEIPT, ERROR, DISCONNECT. Frames are STOMP 1.2
(headers escaped, bodies framed by ``content-length``). No heart-beats are
negotiated: a posting connection can sit idle for a long time, and a dead
one shows at the next SEND (a socket error, or no receipt within the
timeout). Consumers and the sending process's transactions stay on
``ase_engine.broker``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import itertools
import logging
import re
import time
import uuid
from collections.abc import Sequence

from ase_engine.config import ComponentConfig
from ase_engine.errors import BrokerUnavailable

log = logging.getLogger(__name__)

# One message to persist: destination, headers, body.
Outgoing = tuple[str, dict[str, str], bytes]

_ESCAPE = str.maketrans({"\\": "\\\\", "\n": "\\n", "\r": "\\r", ":": "\\c"})
_NEEDS_ESCAPE = re.compile(r"[\\\n\r:]").search
_UNESCAPES = (("\\n", "\n"), ("\\r", "\r"), ("\\c", ":"), ("\\\\", "\\"))
_RECEIPT_PREFIX = b"RECEIPT\nreceipt-id:"
# How often overdue receipts are looked for: a send times out up to this much after its timeout.
_SWEEP_INTERVAL = 0.1
# Largest frame the broker sends a producer (RECEIPT, ERROR); a longer one ends the connection.
_READ_LIMIT = 1 << 20


def encode_frame(command: str, headers: dict[str, str], body: bytes = b"", escape: bool = True) -> bytes:
    """One STOMP 1.2 frame. ``content-length`` is always set when there is a body."""
    lines = [command]
    for name, value in headers.items():
        if escape and _NEEDS_ESCAPE(name):
            name = name.translate(_ESCAPE)
        if escape and _NEEDS_ESCAPE(value):
            value = value.translate(_ESCAPE)
        lines.append(f"{name}:{value}")
    if body:
        lines.append(f"content-length:{len(body)}")
    return "\n".join(lines).encode() + b"\n\n" + body + b"\x00"


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out, i = [], 0
    while i < len(text):
        pair = text[i : i + 2]
        for escaped, plain in _UNESCAPES:
            if pair == escaped:
                out.append(plain)
                i += 2
                break
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def parse_head(head: bytes) -> tuple[str, dict[str, str]]:
    """Command and headers of a frame's head (everything before the blank line).

    As STOMP 1.2 says, the first occurrence of a repeated header wins."""
    lines = head.decode("utf-8").replace("\r\n", "\n").split("\n")
    command = lines[0]
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers.setdefault(_unescape(name), _unescape(value))
    return command, headers


def split_frame(data: bytes) -> tuple[str, dict[str, str], bytes]:
    """Command, headers and body of one frame as read up to its NUL (leading heart-beat end-of-lines skipped).

    The body is everything up to that NUL; ``read_frame`` reads on when ``content-length`` says it holds NULs."""
    data = data.lstrip(b"\r\n")
    split = data.find(b"\n\n")
    if split < 0:
        command, headers = parse_head(data[:-1])
        return command, headers, b""
    command, headers = parse_head(data[:split].rstrip(b"\r"))
    return command, headers, data[split + 2 : -1]


async def read_frame(reader: asyncio.StreamReader) -> tuple[str, dict[str, str], bytes]:
    """The next frame from the stream, skipping heart-beat end-of-lines."""
    command, headers, body = split_frame(await reader.readuntil(b"\x00"))
    length = headers.get("content-length")
    if length is not None and length.isdigit():
        # The body may itself contain NUL bytes: read up to its declared length.
        while len(body) < int(length):
            body += b"\x00" + (await reader.readuntil(b"\x00"))[:-1]
        return command, headers, body[: int(length)]
    return command, headers, body


class AsyncStompProducer:
    """One STOMP connection on the running event loop; ``send`` returns once the broker confirmed."""

    def __init__(self, component: ComponentConfig, name: str) -> None:
        self.component = component
        self.name = name
        self.last_error: str | None = None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._pending: dict[str, asyncio.Future[None]] = {}
        self._counter = itertools.count()
        # (deadline, receipt) in sending order: with one timeout per connection, also in deadline order.
        self._deadlines: collections.deque[tuple[float, str]] = collections.deque()
        self._sweeper: asyncio.TimerHandle | None = None

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def connect(self, timeout: float) -> None:
        """Open the connection (the first reachable host of the failover list); ``BrokerUnavailable`` if none."""
        errors = []
        for host, port in self.component.hosts:
            try:
                await asyncio.wait_for(self._connect_to(host, port), timeout)
                return
            except TimeoutError:
                errors.append(f"{host}:{port}: no answer within {timeout:g} s")
                await self._close_transport()
            except (OSError, BrokerUnavailable) as exc:
                errors.append(f"{host}:{port}: {_reason(exc)}")
                await self._close_transport()
        self.last_error = "; ".join(errors)
        raise BrokerUnavailable(self.last_error)

    async def _connect_to(self, host: str, port: int) -> None:
        reader, writer = await asyncio.open_connection(host, port, limit=_READ_LIMIT)
        self._reader, self._writer = reader, writer
        headers = {"accept-version": "1.2", "host": self.component.broker_vhost, "heart-beat": "0,0"}
        if self.component.broker_login:
            headers["login"] = self.component.broker_login
            headers["passcode"] = self.component.broker_passcode
        # CONNECT headers are not escaped (STOMP 1.2, "Value Encoding").
        writer.write(encode_frame("CONNECT", headers, escape=False))
        command, answer, body = await read_frame(reader)
        if command != "CONNECTED":
            raise BrokerUnavailable(answer.get("message") or body.decode("utf-8", "replace").strip() or command)
        self.last_error = None
        self._reader_task = asyncio.get_running_loop().create_task(self._read_loop(reader))

    async def send(self, destination: str, headers: dict[str, str], body: bytes, timeout: float) -> None:
        """SEND with a receipt and wait for it; ``BrokerUnavailable`` unless the broker confirmed in time."""
        done = asyncio.get_running_loop().create_future()
        self.persist([(destination, headers, body)], done, timeout)
        await done

    def persist(
        self, messages: Sequence[Outgoing], done: asyncio.Future[None], timeout: float, since: float | None = None
    ) -> None:
        """Write ``messages`` (one SEND, or a transaction of several) and settle ``done`` when the broker answers.

        ``done`` gets ``None`` on the RECEIPT, ``BrokerUnavailable`` on an ERROR, a lost connection or no answer
        within ``timeout`` seconds of ``since`` (loop time; default now). Runs on the loop without waiting: the
        receipt arrives on the reader task."""
        writer = self._writer
        if writer is None or writer.is_closing():
            done.set_exception(BrokerUnavailable(self.last_error or "not connected to the broker"))
            return
        loop = asyncio.get_running_loop()
        receipt = f"{self.name}-{next(self._counter)}"
        if len(messages) == 1:
            ((destination, headers, body),) = messages
            data = encode_frame("SEND", {**headers, "destination": destination, "receipt": receipt}, body)
        else:
            tx = {"transaction": receipt}
            data = b"".join(
                [
                    encode_frame("BEGIN", tx),
                    *(
                        encode_frame("SEND", {**headers, "destination": destination, **tx}, body)
                        for destination, headers, body in messages
                    ),
                    encode_frame("COMMIT", {**tx, "receipt": receipt}),
                ]
            )
        try:
            writer.write(data)
        except (OSError, RuntimeError) as exc:
            self.last_error = _reason(exc)
            done.set_exception(BrokerUnavailable(self.last_error))
            return
        self._pending[receipt] = done
        self._deadlines.append(((loop.time() if since is None else since) + timeout, receipt))
        if self._sweeper is None:
            self._sweeper = loop.call_later(_SWEEP_INTERVAL, self._sweep, timeout)

    def _sweep(self, timeout: float) -> None:
        """Fail the sends whose receipt is overdue (one timer per connection, not one per send)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        deadlines = self._deadlines
        while deadlines and (deadlines[0][0] <= now or deadlines[0][1] not in self._pending):
            _, receipt = deadlines.popleft()
            self._settle(receipt, _no_receipt(timeout))
        self._sweeper = loop.call_later(_SWEEP_INTERVAL, self._sweep, timeout) if deadlines else None

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        """Resolve receipts until the connection ends; then fail whatever still waits."""
        reason = "connection to the broker lost"
        try:
            while True:
                data = await reader.readuntil(b"\x00")
                if data[:1] == b"\n":
                    # ActiveMQ ends every frame with an end-of-line after the NUL: it starts the next read.
                    data = data[1:]
                if data.startswith(_RECEIPT_PREFIX) and data.endswith(b"\n\n\x00"):
                    # The common case, without a general parse: "RECEIPT\nreceipt-id:<id>\n\n\0".
                    self._resolve(data[len(_RECEIPT_PREFIX) : -3].decode())
                    continue
                self._on_other_frame(data)
        except _ConnectionEnds as exc:
            reason = str(exc)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError) as exc:
            reason = self.last_error or f"connection to the broker lost ({_reason(exc)})"
        except asyncio.CancelledError:
            reason = "connection closed"
            raise
        finally:
            self.last_error = reason
            if self._writer is not None:
                self._writer.close()
            self._fail_all(reason)

    def _on_other_frame(self, data: bytes) -> None:
        if not data.strip(b"\r\n\x00"):
            return  # a heart-beat
        command, headers, body = split_frame(data)
        if command == "RECEIPT":
            self._resolve(headers.get("receipt-id", ""))
            return
        if command == "ERROR":
            reason = headers.get("message") or body.decode("utf-8", "replace").strip().split("\n")[0] or "ERROR frame"
            self.last_error = reason
            receipt = headers.get("receipt-id", "")
            if receipt in self._pending:
                self._settle(receipt, BrokerUnavailable(reason))
                return
            # Not tied to a receipt: a SEND inside a transaction failed. Which requests it belonged to is unknown,
            # so the connection ends: the broker rolls back what is not committed, and every wait fails.
            log.warning("broker error on posting connection %s: %s", self.name, reason)
            raise _ConnectionEnds(f"broker error: {reason}")
        log.warning("unexpected %s frame on posting connection %s", command, self.name)

    def _resolve(self, receipt: str) -> None:
        self._settle(receipt, None)

    def _settle(self, receipt: str, error: BaseException | None) -> None:
        done = self._pending.pop(receipt, None)
        if done is None or done.done():
            return
        if error is None:
            done.set_result(None)
        else:
            done.set_exception(error)

    def _fail_all(self, reason: str) -> None:
        pending, self._pending = self._pending, {}
        for done in pending.values():
            if not done.done():
                done.set_exception(BrokerUnavailable(reason))

    async def close(self) -> None:
        """DISCONNECT (waiting briefly for its receipt), then close the socket."""
        if self.connected and self._writer is not None:
            receipt = f"bye-{uuid.uuid4().hex}"
            future = asyncio.get_running_loop().create_future()
            self._pending[receipt] = future
            self._writer.write(encode_frame("DISCONNECT", {"receipt": receipt}))
            with contextlib.suppress(BrokerUnavailable, TimeoutError, OSError):
                await asyncio.wait_for(future, 2)
        await self._close_transport()

    async def _close_transport(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        task, self._reader_task = self._reader_task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


class _Batch:
    """Messages persisted together (one SEND, or one transaction); ``done`` settles when the broker answers."""

    __slots__ = ("messages", "size", "done", "opened")

    def __init__(self, done: asyncio.Future[None], opened: float) -> None:
        self.messages: list[Outgoing] = []
        self.size = 0
        self.done = done
        # Loop time of the first request: the receipt timeout counts from here, waiting for a connection included.
        self.opened = opened


class AsyncPostingPool:
    """Posting connections shared by every request of one event loop, with group commit.

    Each connection carries one batch at a time. ``send`` adds the message to the open batch and waits
    for it; at the end of the current turn of the loop (``call_soon``) the batch is written to a free
    connection. While every connection waits for the broker, the requests that come meanwhile gather in
    the open batch (up to ``max_batch`` messages or ``max_batch_bytes`` of bodies, then another opens),
    written as soon as a connection is free. So nothing waits for more requests to come: a lone request
    is written in its own turn, as a plain SEND; under load, batches grow by themselves, and the broker
    syncs its journal once per batch (docs/BENCHMARKS.md, "group commit").

    A connection that dropped is reopened by the next batch that picks it, on
    the loop, but not more often than every ``retry_interval`` seconds: while
    the broker is down a request fails fast instead of waiting for a connect.
    """

    def __init__(
        self,
        component: ComponentConfig,
        size: int = 1,
        retry_interval: float = 0.5,
        max_batch: int = 64,
        max_batch_bytes: int = 4 << 20,
    ) -> None:
        self.component = component
        self.retry_interval = retry_interval
        self.max_batch = max_batch
        self.max_batch_bytes = max_batch_bytes
        # Batches handed to a connection so far (SENDs and transactions), and the messages in them.
        self.batches = 0
        self.messages = 0
        self._producers = [AsyncStompProducer(component, f"post-{i}-{uuid.uuid4().hex[:8]}") for i in range(size)]
        self._next_try = [0.0] * size
        # Connections with no batch waiting for the broker, in the order they became free.
        self._free: collections.deque[int] = collections.deque(range(size))
        # Batches not written yet, oldest first; the last one may still take messages (``_open``).
        self._queued: collections.deque[_Batch] = collections.deque()
        self._open: _Batch | None = None
        self._pump_scheduled = False
        self._connects: set[asyncio.Task[None]] = set()

    async def send(self, destination: str, headers: dict[str, str], body: bytes) -> None:
        """Persist one message: returns after the broker's RECEIPT; ``BrokerUnavailable`` otherwise."""
        batch = self._open
        if batch is None:
            loop = asyncio.get_running_loop()
            batch = self._open = _Batch(loop.create_future(), loop.time())
            self._queued.append(batch)
            if not self._pump_scheduled:
                self._pump_scheduled = True
                loop.call_soon(self._pump)
        batch.messages.append((destination, headers, body))
        batch.size += len(body)
        if len(batch.messages) >= self.max_batch or batch.size >= self.max_batch_bytes:
            self._open = None  # full: the next message opens another batch
        # Shielded: a request that is cancelled must not cancel the wait of the others in its batch.
        await asyncio.shield(batch.done)

    def _pump(self) -> None:
        """Write the queued batches to the free connections."""
        self._pump_scheduled = False
        while self._queued and self._free:
            batch = self._queued.popleft()
            if self._open is batch:
                self._open = None
            index = self._free.popleft()
            batch.done.add_done_callback(functools.partial(self._landed, index))
            self._write(index, batch)

    def _landed(self, index: int, _done: asyncio.Future[None]) -> None:
        """The broker answered the batch on connection ``index`` (or it failed): the connection takes the next."""
        self._free.append(index)
        self._pump()

    def _write(self, index: int, batch: _Batch) -> None:
        self.batches += 1
        self.messages += len(batch.messages)
        producer = self._producers[index]
        timeout = self.component.receipt_timeout
        if asyncio.get_running_loop().time() >= batch.opened + timeout:
            # Waited for a connection as long as it may wait for the broker (a broker that does not answer).
            batch.done.set_exception(_no_receipt(timeout))
            return
        if producer.connected:
            producer.persist(batch.messages, batch.done, timeout, since=batch.opened)
            return
        task = asyncio.get_running_loop().create_task(self._connect_and_persist(index, batch))
        self._connects.add(task)
        task.add_done_callback(self._connects.discard)

    async def _connect_and_persist(self, index: int, batch: _Batch) -> None:
        """Reopen connection ``index`` (it carries no batch but this one), then write the batch."""
        producer = self._producers[index]
        now = time.monotonic()
        try:
            if now < self._next_try[index]:
                raise BrokerUnavailable(producer.last_error or "not connected to the broker")
            self._next_try[index] = now + self.retry_interval
            await producer.connect(self.component.receipt_timeout)
        except BrokerUnavailable as exc:
            if not batch.done.done():
                batch.done.set_exception(exc)
            return
        producer.persist(batch.messages, batch.done, self.component.receipt_timeout, since=batch.opened)

    async def close(self) -> None:
        for task in list(self._connects):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for producer in self._producers:
            await producer.close()


class _ConnectionEnds(Exception):
    """Raised by the reader when the posting connection must be closed (an ERROR it cannot attribute)."""


def _no_receipt(timeout: float) -> BrokerUnavailable:
    return BrokerUnavailable(f"no receipt from the broker within {timeout:g} s")


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
