"""The STOMP transport to ActiveMQ.

``StompConnection`` wraps one stomp.py 1.2 connection and turns the broker's
answers into futures: every SEND, COMMIT and SUBSCRIBE we need to be sure of
carries a ``receipt`` header, and the future completes when the RECEIPT frame
comes back (or fails on an ERROR frame or a disconnect). Nothing here retries
or reconnects by itself; the owners (the sending process, the retry pump)
decide what to do with a ``BrokerUnavailable``.

ActiveMQ facts this module relies on:
- a RECEIPT for a ``persistent:true`` SEND is sent after the message is stored;
- a transacted SEND + ACK is applied at COMMIT, and rolled back if the
  connection drops before it (DESIGN invariant 3);
- un-acked ``client-individual`` messages are redelivered when the consumer's
  connection closes, however it closes (invariant 2);
- ``ActiveMQ.Statistics.Destination.<queue>`` answers with the queue's
  statistics when the queue exists, and with nothing when it does not.
"""

from __future__ import annotations

import functools
import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import stomp
import stomp.exception
from defusedxml import ElementTree

from ase_engine.config import ComponentConfig
from ase_engine.errors import BrokerUnavailable

log = logging.getLogger(__name__)

MessageHandler = Callable[[dict[str, str], bytes], None]

# A selector that matches no message: subscribing with it creates a queue
# without taking anything from it.
_NO_MESSAGE_SELECTOR = "JMSType = 'ase.create-queue.no-message-matches'"
_STATS_PREFIX = "/queue/ActiveMQ.Statistics.Destination."


@dataclass(frozen=True)
class Move:
    """One message to send to ``destination`` while acknowledging ``ack_id``."""

    ack_id: str
    destination: str
    headers: dict[str, str]
    body: bytes


def queue(name: str) -> str:
    return f"/queue/{name}"


class StompConnection:
    """One STOMP connection; thread-safe for sending from several threads."""

    def __init__(
        self,
        component: ComponentConfig,
        name: str = "ase",
        on_message: MessageHandler | None = None,
        on_disconnect: Callable[[], None] | None = None,
        heartbeats: tuple[int, int] = (10_000, 10_000),
    ) -> None:
        self.component = component
        self.name = name
        self._on_message = on_message
        self._on_disconnect = on_disconnect
        self._heartbeats = heartbeats
        self._lock = threading.Lock()
        self._pending: dict[str, Future[Any]] = {}
        self._connected = threading.Event()
        self._conn: stomp.Connection12 | None = None
        self._stats_subscribed = False
        self._stats_waiters: dict[str, Future[dict[str, Any]]] = {}
        self._counter = itertools.count()
        self.last_error: str | None = None

    # -- lifecycle ---------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._connected.is_set() and self._conn is not None and self._conn.is_connected()

    def connect(self, timeout: float = 5.0) -> None:
        """Open the connection; raises ``BrokerUnavailable`` with the reason."""
        conn = stomp.Connection12(
            self.component.hosts,
            heartbeats=self._heartbeats,
            auto_decode=False,
            reconnect_attempts_max=1,
            vhost=self.component.broker_vhost,
        )
        conn.set_listener("ase", _Listener(self))
        self._conn = conn
        self._connected.clear()
        self._stats_subscribed = False
        try:
            conn.connect(
                username=self.component.broker_login or None,
                passcode=self.component.broker_passcode or None,
                wait=False,
                with_connect_command=True,
            )
        except stomp.exception.StompException as exc:
            self.last_error = _reason(exc)
            raise BrokerUnavailable(self.last_error) from None
        except OSError as exc:
            self.last_error = _reason(exc)
            raise BrokerUnavailable(self.last_error) from None
        if not self._connected.wait(timeout):
            reason = self.last_error or f"no CONNECTED frame within {timeout:g} s"
            self._drop(conn)
            raise BrokerUnavailable(reason)

    def disconnect(self) -> None:
        """Close the connection; raises ``BrokerUnavailable`` if the broker did not confirm."""
        conn, self._conn = self._conn, None
        self._connected.clear()
        if conn is None:
            return
        try:
            if conn.is_connected():
                conn.disconnect(receipt=f"bye-{uuid.uuid4().hex}")
        except (stomp.exception.StompException, OSError) as exc:
            raise BrokerUnavailable(_reason(exc)) from None
        finally:
            self._fail_all("connection closed")

    def _drop(self, conn: stomp.Connection12) -> None:
        try:
            conn.disconnect()
        except Exception as exc:  # noqa: BLE001 - closing a broken connection, nothing to report
            log.debug("closing a failed connection: %s", exc)

    # -- frames ------------------------------------------------------------

    def _conn_or_raise(self) -> stomp.Connection12:
        conn = self._conn
        if conn is None or not self._connected.is_set():
            raise BrokerUnavailable(self.last_error or "not connected to the broker")
        return conn

    def _receipt(self) -> tuple[str, Future[Any]]:
        receipt = f"{self.name}-{next(self._counter)}"
        future: Future[Any] = Future()
        with self._lock:
            self._pending[receipt] = future
        return receipt, future

    def _forget(self, receipt: str) -> None:
        with self._lock:
            self._pending.pop(receipt, None)

    def _transmit(self, receipt: str | None, action: Callable[[stomp.Connection12], None]) -> None:
        try:
            action(self._conn_or_raise())
        except BrokerUnavailable:
            if receipt:
                self._forget(receipt)
            raise
        except (stomp.exception.StompException, OSError) as exc:
            if receipt:
                self._forget(receipt)
            self.last_error = _reason(exc)
            raise BrokerUnavailable(self.last_error) from None

    def send(self, destination: str, headers: dict[str, str], body: bytes) -> Future[Any]:
        """Send with a receipt; the future completes when the broker has the message."""
        receipt, future = self._receipt()
        self._transmit(
            receipt,
            lambda conn: conn.send(destination, body, headers={**headers, "receipt": receipt}),
        )
        return future

    def send_and_wait(
        self, destination: str, headers: dict[str, str], body: bytes, timeout: float | None = None
    ) -> None:
        wait(self.send(destination, headers, body), timeout or self.component.receipt_timeout)

    def subscribe(
        self,
        destination: str,
        subscription: str,
        *,
        ack: str = "client-individual",
        prefetch: int | None = None,
        selector: str | None = None,
        extra: dict[str, str] | None = None,
    ) -> Future[Any]:
        headers = dict(extra or {})
        if prefetch is not None:
            headers["activemq.prefetchSize"] = str(prefetch)
        if selector:
            headers["selector"] = selector
        receipt, future = self._receipt()
        headers["receipt"] = receipt
        self._transmit(receipt, lambda conn: conn.subscribe(destination, subscription, ack=ack, headers=headers))
        return future

    def unsubscribe(self, subscription: str) -> Future[Any]:
        receipt, future = self._receipt()
        self._transmit(receipt, lambda conn: conn.unsubscribe(subscription, headers={"receipt": receipt}))
        return future

    def ack(self, ack_id: str) -> None:
        """Acknowledge one message (no receipt: a lost ack means a redelivery, never a loss)."""
        self._transmit(None, lambda conn: conn.ack(ack_id))

    def move(self, ack_id: str, destination: str, headers: dict[str, str], body: bytes) -> Future[Any]:
        """SEND to ``destination`` and ACK ``ack_id`` in one transaction (invariant 3).

        The future completes on the COMMIT's receipt. If anything fails before
        that, the broker rolls the transaction back and keeps the original.
        """
        return self.move_many([Move(ack_id, destination, headers, body)])

    def move_many(self, moves: list[Move]) -> Future[Any]:
        """Several moves in one transaction: all of them happen, or none."""
        tx = f"{self.name}-tx-{uuid.uuid4().hex}"
        receipt, future = self._receipt()

        def action(conn: stomp.Connection12) -> None:
            conn.begin(transaction=tx)
            for move in moves:
                conn.send(move.destination, move.body, headers=move.headers, transaction=tx)
                conn.ack(move.ack_id, transaction=tx)
            conn.commit(transaction=tx, headers={"receipt": receipt})

        self._transmit(receipt, action)
        return future

    def ack_many(self, ack_ids: list[str]) -> Future[Any]:
        """Acknowledge several messages in one transaction (a purge); the future completes on COMMIT."""
        tx = f"{self.name}-tx-{uuid.uuid4().hex}"
        receipt, future = self._receipt()

        def action(conn: stomp.Connection12) -> None:
            conn.begin(transaction=tx)
            for ack_id in ack_ids:
                conn.ack(ack_id, transaction=tx)
            conn.commit(transaction=tx, headers={"receipt": receipt})

        self._transmit(receipt, action)
        return future

    # -- queues ------------------------------------------------------------

    def ensure_queues(self, names: Iterable[str], timeout: float | None = None) -> None:
        """Create each queue if missing, idempotently, without touching its messages."""
        timeout = timeout or self.component.receipt_timeout
        for name in names:
            sub = f"create-{uuid.uuid4().hex}"
            wait(
                self.subscribe(queue(name), sub, ack="client-individual", prefetch=0, selector=_NO_MESSAGE_SELECTOR),
                timeout,
            )
            wait(self.unsubscribe(sub), timeout)

    def queue_stats(self, names: Iterable[str], timeout: float = 2.0) -> dict[str, dict[str, Any] | None]:
        """Statistics of each queue (``size``, ``enqueueCount``, ...); ``None`` where it does not exist.

        Queries are sent together; a queue that has not answered within
        ``timeout`` is reported as missing.
        """
        self._conn_or_raise()
        self._ensure_stats_subscription()
        waiters: dict[str, Future[dict[str, Any]]] = {}
        for name in names:
            correlation = uuid.uuid4().hex
            future: Future[dict[str, Any]] = Future()
            with self._lock:
                self._stats_waiters[correlation] = future
            waiters[name] = future
            headers = {"reply-to": self._stats_reply_to, "correlation-id": correlation}
            self._transmit(None, functools.partial(_send_empty, _STATS_PREFIX + name, headers))
        deadline = time.monotonic() + timeout
        result: dict[str, dict[str, Any] | None] = {}
        for name, future in waiters.items():
            try:
                result[name] = future.result(max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                result[name] = None
        with self._lock:
            for correlation in [c for c, f in self._stats_waiters.items() if f in waiters.values()]:
                self._stats_waiters.pop(correlation, None)
        return result

    @property
    def _stats_reply_to(self) -> str:
        return f"/temp-queue/ase-stats-{self.name}"

    def _ensure_stats_subscription(self) -> None:
        if self._stats_subscribed:
            return
        wait(
            self.subscribe(self._stats_reply_to, "ase-stats", ack="auto", extra={"transformation": "jms-map-xml"}),
            self.component.receipt_timeout,
        )
        self._stats_subscribed = True

    # -- listener callbacks (receiver thread) ------------------------------

    def _on_connected(self) -> None:
        self.last_error = None
        self._connected.set()

    def _on_receipt(self, receipt: str) -> None:
        with self._lock:
            future = self._pending.pop(receipt, None)
        if future is not None and not future.done():
            future.set_result(None)

    def _on_error(self, headers: dict[str, str], body: bytes) -> None:
        text = headers.get("message") or body.decode("utf-8", "replace").strip().splitlines()[0:1]
        reason = text if isinstance(text, str) else (text[0] if text else "ERROR frame")
        self.last_error = reason
        receipt = headers.get("receipt-id")
        if receipt:
            with self._lock:
                future = self._pending.pop(receipt, None)
            if future is not None and not future.done():
                future.set_exception(BrokerUnavailable(reason))
        else:
            log.warning("broker error on connection %s: %s", self.name, reason)

    def _on_frame(self, headers: dict[str, str], body: bytes) -> None:
        if headers.get("subscription") == "ase-stats":
            with self._lock:
                future = self._stats_waiters.pop(headers.get("correlation-id", ""), None)
            if future is not None and not future.done():
                future.set_result(_parse_stats(body))
            return
        if self._on_message is not None:
            self._on_message(headers, body)

    def _on_disconnected(self) -> None:
        self._connected.clear()
        self._fail_all(self.last_error or "connection to the broker lost")
        if self._on_disconnect is not None:
            self._on_disconnect()

    def _fail_all(self, reason: str) -> None:
        with self._lock:
            pending = list(self._pending.values()) + list(self._stats_waiters.values())
            self._pending.clear()
            self._stats_waiters.clear()
        for future in pending:
            if not future.done():
                future.set_exception(BrokerUnavailable(reason))


class _Listener(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self, owner: StompConnection) -> None:
        self.owner = owner

    def on_connected(self, frame: Any) -> None:
        self.owner._on_connected()

    def on_receipt(self, frame: Any) -> None:
        self.owner._on_receipt(frame.headers.get("receipt-id", ""))

    def on_error(self, frame: Any) -> None:
        self.owner._on_error(frame.headers, frame.body or b"")

    def on_message(self, frame: Any) -> None:
        self.owner._on_frame(frame.headers, frame.body if frame.body is not None else b"")

    def on_disconnected(self) -> None:
        self.owner._on_disconnected()


def _send_empty(destination: str, headers: dict[str, str], conn: stomp.Connection12) -> None:
    conn.send(destination, b"", headers=headers)


def wait(future: Future[Any], timeout: float) -> Any:
    """Wait for a receipt future; a timeout becomes ``BrokerUnavailable``."""
    try:
        return future.result(timeout)
    except TimeoutError:
        raise BrokerUnavailable(f"no receipt from the broker within {timeout:g} s") from None


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _parse_stats(body: bytes) -> dict[str, Any]:
    """Decode a ``jms-map-xml`` statistics reply into a dict of numbers and strings."""
    stats: dict[str, Any] = {}
    for entry in ElementTree.fromstring(body).findall("entry"):
        children = list(entry)
        if len(children) != 2:
            continue
        key, value = children
        if value.tag in ("long", "int"):
            stats[key.text or ""] = int(value.text or 0)
        elif value.tag == "double":
            stats[key.text or ""] = float(value.text or 0)
        else:
            stats[key.text or ""] = value.text
    return stats
