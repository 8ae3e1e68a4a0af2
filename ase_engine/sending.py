"""The sending process (SE-ASE-PROC-025): read persisted requests, invoke the target, settle.

One ``SendingProcess`` per component instance (per Celery worker). It owns
one STOMP connection with one ``client-individual`` subscription per service
unit whose sending process is started here, with a prefetch of twice
``concurrency`` (a thread finding its next message already here): the broker
never hands this instance more than that many unsettled messages per service
unit, so memory stays bounded.

How one message is settled (DESIGN invariants 2 and 3):
- the target acknowledged → ACK: only now does the broker forget the message;
- fault, error, timeout, expired → SEND to the parking queue + ACK, in one
  transaction; the message carries its attempt count and the last outcome.
If this process dies at any point before the ACK or the COMMIT, the broker
still holds the message and redelivers it to another consumer.

Stopping a service unit's sending (PROC-052/050): messages already being
invoked finish and are settled; messages prefetched but not started are left
unsettled and return to the queue when the subscription is removed, after at
most ``stop-timeout`` seconds.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from ase_engine import codes
from ase_engine.broker import StompConnection, queue, wait
from ase_engine.config import ComponentConfig, ServiceUnitConfig
from ase_engine.errors import BrokerUnavailable
from ase_engine.history import Event, EventKind, HistorySink
from ase_engine.message import MalformedMessage, Message, now_ms
from ase_engine.target import HttpTarget, Outcome, Result

log = logging.getLogger("ase.sending")


@dataclass
class _Subscription:
    unit: ServiceUnitConfig
    id: str
    stopping: bool = False
    in_flight: int = 0
    drained: threading.Condition = field(default_factory=threading.Condition)


@dataclass(frozen=True)
class StopReport:
    service: str
    left_in_flight: int


class SendingProcess:
    def __init__(
        self,
        component: ComponentConfig,
        history: HistorySink,
        *,
        target: HttpTarget | None = None,
        concurrency: int = 8,
        instance: str = "",
    ) -> None:
        self.component = component
        self.history = history
        self.concurrency = concurrency
        self.instance = instance or f"ase-{uuid.uuid4().hex[:8]}"
        self.target = target or HttpTarget(max_connections=concurrency * 2)
        self._executor = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="ase-send")
        self._lock = threading.RLock()
        self._subscribing = threading.Lock()
        self._released: set[str] = set()
        self._desired: dict[str, ServiceUnitConfig] = {}
        self._subs: dict[str, _Subscription] = {}
        self._by_id: dict[str, _Subscription] = {}
        self._conn: StompConnection | None = None
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._outage_logged = False
        self.connection_status = "disconnected"
        self.last_connection_error: str | None = None

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        """Start the connection supervisor; subscriptions follow ``apply``."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._supervise, name="ase-sending-supervisor", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> list[StopReport]:
        """Stop every subscription (waiting for in-flight calls), then release the connection (SE-ASE-020)."""
        reports = self.apply([])
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout or 10)
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.disconnect()
            except BrokerUnavailable as exc:
                codes.log(log, "SE-ASE-W0008", reason=str(exc))
        self._executor.shutdown(wait=False, cancel_futures=True)
        self.target.close()
        self.connection_status = "disconnected"
        return reports

    @property
    def services(self) -> list[str]:
        with self._lock:
            return sorted(s for s, sub in self._subs.items() if not sub.stopping)

    def in_flight(self) -> dict[str, int]:
        with self._lock:
            return {s: sub.in_flight for s, sub in self._subs.items()}

    def apply(self, units: Iterable[ServiceUnitConfig]) -> list[StopReport]:
        """Make the running subscriptions match ``units`` (the units whose sending is started).

        New units are subscribed now if connected (else on connection); removed
        units are stopped: this call waits for their in-flight invocations, up
        to each unit's stop-timeout, and reports what was left.
        """
        wanted = {u.service: u for u in units}
        with self._lock:
            self._desired = wanted
            removed = [sub for service, sub in self._subs.items() if service not in wanted]
            changed = [sub for service, sub in self._subs.items() if service in wanted and wanted[service] != sub.unit]
            for sub in removed:
                sub.stopping = True
            for sub in changed:
                # A configuration change (timeout, target URL...) takes effect for the next message.
                sub.unit = wanted[sub.unit.service]
        reports = [self._drain_and_unsubscribe(sub) for sub in removed]
        if self._conn is not None and self._conn.connected:
            self._subscribe_missing()
        else:
            self._wake.set()
        return reports

    # -- subscriptions -----------------------------------------------------

    def _subscribe_missing(self) -> None:
        """Subscribe every wanted unit that has no subscription yet.

        ``_lock`` is never held while waiting for the broker: the receiver
        thread needs it to dispatch messages, and the RECEIPT we wait for
        arrives on that same thread. ``_subscribing`` keeps two callers (the
        supervisor after a reconnection, ``apply``) from subscribing a unit twice.
        """
        with self._subscribing:
            with self._lock:
                conn = self._conn
                missing = [u for s, u in self._desired.items() if s not in self._subs]
            for unit in missing:
                if conn is None:
                    return
                sub = _Subscription(unit=unit, id=f"{unit.service}-{uuid.uuid4().hex[:12]}")
                unit_log = logging.getLogger(f"ase.sending.{unit.service}")
                with self._lock:
                    # Known before the SUBSCRIBE leaves: messages may arrive before its receipt.
                    self._subs[unit.service] = sub
                    self._by_id[sub.id] = sub
                try:
                    wait(
                        conn.subscribe(queue(unit.areas.pending), sub.id, prefetch=2 * self.concurrency),
                        self.component.receipt_timeout,
                    )
                except BrokerUnavailable as exc:
                    codes.log(unit_log, "SE-ASE-W0023", reason=str(exc))
                    sub.stopping = True
                    self._release(conn, sub.id)
                    with self._lock:
                        self._subs.pop(unit.service, None)
                        self._by_id.pop(sub.id, None)
                    continue
                codes.log(unit_log, "SE-ASE-I0002")

    def _release(self, conn: StompConnection, subscription: str) -> None:
        """Unsubscribe without waiting, so the broker gives the subscription's messages to others."""
        try:
            conn.unsubscribe(subscription)
        except BrokerUnavailable:
            pass  # the connection is gone: the broker released everything already

    def _drain_and_unsubscribe(self, sub: _Subscription) -> StopReport:
        unit = sub.unit
        unit_log = logging.getLogger(f"ase.sending.{unit.service}")
        deadline = time.monotonic() + unit.effective_stop_timeout(self.component)
        with sub.drained:
            while sub.in_flight and time.monotonic() < deadline:
                sub.drained.wait(max(0.0, min(0.5, deadline - time.monotonic())))
            left = sub.in_flight
        conn = self._conn
        try:
            if conn is not None and conn.connected:
                wait(conn.unsubscribe(sub.id), self.component.receipt_timeout)
            codes.log(unit_log, "SE-ASE-I0004")
        except BrokerUnavailable as exc:
            codes.log(unit_log, "SE-ASE-W0010", reason=str(exc))
        with self._lock:
            if self._subs.get(unit.service) is sub:
                del self._subs[unit.service]
            self._by_id.pop(sub.id, None)
        return StopReport(unit.service, left)

    # -- connection supervisor ---------------------------------------------

    def _supervise(self) -> None:
        """Keep one connection open; on (re)connection, subscribe every wanted unit.

        Never exits on an error: a broker outage is logged once (E0006) and
        retried with a bounded backoff until ``stop``.
        """
        backoff = 0.5
        while not self._stopping.is_set():
            conn = self._conn
            if conn is None or not conn.connected:
                if self._connect():
                    backoff = 0.5
                else:
                    self._wake.wait(backoff)
                    self._wake.clear()
                    backoff = min(backoff * 2, 5.0)
                    continue
            self._wake.wait(1.0)
            self._wake.clear()

    def _connect(self) -> bool:
        with self._lock:
            # Messages of the old connection will be redelivered; forget its subscriptions.
            for sub in self._subs.values():
                sub.stopping = True
            self._subs.clear()
            self._by_id.clear()
        conn = StompConnection(
            self.component,
            name=f"{self.instance}-{uuid.uuid4().hex[:6]}",
            on_message=self._on_message,
            on_disconnect=self._wake.set,
        )
        try:
            conn.connect(timeout=self.component.receipt_timeout)
        except BrokerUnavailable as exc:
            self.connection_status = "disconnected"
            self.last_connection_error = str(exc)
            if not self._outage_logged:
                codes.log(log, "SE-ASE-E0006", reason=str(exc))
                self._outage_logged = True
            return False
        self._conn = conn
        self._outage_logged = False
        self.connection_status = "connected"
        self.last_connection_error = None
        self._subscribe_missing()
        return True

    # -- messages ----------------------------------------------------------

    def _on_message(self, headers: dict[str, str], body: bytes) -> None:
        """Receiver thread: hand the message to the pool, never block here."""
        subscription = headers.get("subscription", "")
        with self._lock:
            sub = self._by_id.get(subscription)
            conn = self._conn
        if sub is None:
            # A subscription we no longer know (its SUBSCRIBE timed out): release it, or its
            # messages would wait for an ACK that never comes.
            if conn is not None and subscription not in self._released:
                self._released.add(subscription)
                self._release(conn, subscription)
            return
        with sub.drained:
            sub.in_flight += 1
        try:
            self._executor.submit(self._handle, sub, conn, headers, body)
        except RuntimeError:  # executor shut down
            with sub.drained:
                sub.in_flight -= 1
                sub.drained.notify_all()

    def _handle(self, sub: _Subscription, conn: StompConnection | None, headers: dict[str, str], body: bytes) -> None:
        try:
            if sub.stopping or conn is None:
                return  # left unsettled: back to the queue when the subscription goes
            self._settle(sub.unit, conn, headers, body)
        except Exception as exc:  # noqa: BLE001 - one bad message must never stop the process
            logging.getLogger(f"ase.sending.{sub.unit.service}").error(
                "unexpected %s while handling message %s: %s", type(exc).__name__, headers.get("ase-id"), exc
            )
        finally:
            with sub.drained:
                sub.in_flight -= 1
                sub.drained.notify_all()

    def _settle(self, unit: ServiceUnitConfig, conn: StompConnection, headers: dict[str, str], body: bytes) -> None:
        unit_log = logging.getLogger(f"ase.sending.{unit.service}")
        ack_id = headers["ack"]
        areas = unit.areas
        try:
            message = Message.from_frame(headers, body)
        except MalformedMessage as exc:
            unit_log.error(
                "message %s on queue '%s' is not an ASE message (%s): moved to '%s'",
                headers.get("message-id"),
                areas.pending,
                exc,
                areas.error,
            )
            parked = {k: v for k, v in headers.items() if k not in ("ack", "subscription", "message-id", "destination")}
            parked.update({"persistent": "true", "ase-last-outcome": "malformed", "ase-last-error": str(exc)})
            self._move(unit, conn, ack_id, areas.error, parked, body)
            return

        ttl = unit.effective_ttl(self.component)
        if ttl > 0 and now_ms() > message.incoming_timestamp + ttl * 1000:
            expired = message.with_outcome("expired", error=f"time-to-live of {ttl} s exceeded")
            if self._move(unit, conn, ack_id, areas.expired, *expired.to_frame()):
                codes.log(unit_log, "SE-ASE-W0011", area=areas.expired)
                self._event(message, EventKind.EXPIRED, areas.expired, outcome_code="SE-ASE-W0011")
            return

        result = self.target.invoke(unit, message)
        self._event(
            message,
            EventKind.ATTEMPT,
            areas.pending,
            attempt=message.attempt + 1,
            status=result.status,
            duration_ms=result.duration_ms,
            detail=result.outcome.value,
        )
        if result.outcome is Outcome.ACK:
            try:
                conn.ack(ack_id)
            except BrokerUnavailable as exc:
                codes.log(unit_log, "SE-ASE-E0007", area=areas.pending, reason=str(exc))
                return
            self._event(message, EventKind.ACKED, areas.pending, attempt=message.attempt + 1, status=result.status)
            return
        self._park(unit, conn, ack_id, message, result)

    def _park(
        self, unit: ServiceUnitConfig, conn: StompConnection, ack_id: str, message: Message, result: Result
    ) -> None:
        """Settle an answer other than an acknowledgement (PROC-025, PROC-026).

        A fault is parked in the fault area, with no error logged. An error or
        a timeout of an idempotent target is moved to the RETRY queue of its
        next retry (W0022 / W0024) while retries remain; the last one, or any
        of a non-idempotent target, is parked in the error (E0020) or timed-out
        (E0017) area.
        """
        unit_log = logging.getLogger(f"ase.sending.{unit.service}")
        areas = unit.areas
        outcome = result.outcome
        failed = message.with_outcome(outcome.value, status=result.status, error=result.reason, answer=result.answer)
        retry = failed.attempt  # retries done so far: attempt - 1; this would be retry number ``attempt``
        if outcome is not Outcome.FAULT and unit.retries and retry <= unit.retry.number:
            delay = unit.retry.delay(retry)
            waiting = replace(failed, due=now_ms() + delay * 1000)
            area = areas.retry(retry)
            if not self._move(unit, conn, ack_id, area, *waiting.to_frame()):
                return
            code = "SE-ASE-W0024" if outcome is Outcome.TIMEOUT else "SE-ASE-W0022"
            codes.log(unit_log, code, request_id=message.id, duration=delay, attempt=retry, attempts=unit.retry.number)
            self._event(
                message,
                EventKind.RETRY_SCHEDULED,
                area,
                attempt=failed.attempt,
                status=result.status,
                outcome_code=code,
                detail=f"{outcome.value}: {result.reason}; retry {retry}/{unit.retry.number} in {delay} s",
            )
            return
        if outcome is Outcome.FAULT:
            area, kind, code = areas.fault, EventKind.FAULT, ""
        elif outcome is Outcome.TIMEOUT:
            area, kind, code = areas.timedout, EventKind.TIMEOUT, "SE-ASE-E0017"
        else:
            area, kind, code = areas.error, EventKind.ERROR, "SE-ASE-E0020"
        if not self._move(unit, conn, ack_id, area, *failed.to_frame()):
            return
        if code:  # a fault is a business answer: no error is logged (PROC-025)
            codes.log(unit_log, code, request_id=message.id, queue=area)
        self._event(
            message, kind, area, attempt=failed.attempt, status=result.status, outcome_code=code, detail=result.reason
        )

    def _move(
        self,
        unit: ServiceUnitConfig,
        conn: StompConnection,
        ack_id: str,
        area: str,
        headers: dict[str, str],
        body: bytes,
    ) -> bool:
        try:
            wait(conn.move(ack_id, queue(area), headers, body), self.component.receipt_timeout)
        except BrokerUnavailable as exc:
            codes.log(
                logging.getLogger(f"ase.sending.{unit.service}"),
                "SE-ASE-E0007",
                area=unit.areas.pending,
                reason=str(exc),
            )
            return False
        return True

    def _event(
        self,
        message: Message,
        kind: EventKind,
        area: str,
        *,
        attempt: int | None = None,
        status: int | None = None,
        duration_ms: int | None = None,
        outcome_code: str = "",
        detail: str = "",
    ) -> None:
        try:
            self.history.record(
                Event(
                    message.id,
                    message.service,
                    kind,
                    area=area,
                    attempt=message.attempt if attempt is None else attempt,
                    outcome_code=outcome_code,
                    target_status=status,
                    duration_ms=duration_ms,
                    size=message.size,
                    detail=detail[:500],
                    instance=self.instance,
                )
            )
        except Exception as exc:  # noqa: BLE001 - history must never cost the message
            log.error("history event %s for message %s not recorded: %s", kind.value, message.id, exc)
