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

Target protection (``ase_engine.protection``, state shared in Redis): while a
unit's circuit breaker is open, this instance *pauses* the unit the same way
(unsubscribe; the requests stay in PENDING, untouched); the supervisor
resumes it when the breaker closes, or subscribes with a prefetch of one when
this instance wins the half-open probe. The rate limit makes the invoking
thread wait for its reserved slot just before the call.

Ordered groups (``ase_engine.ordering``): messages of one group go through one
lane, one at a time, in the order the broker delivered them; a group blocked
by its failing head sends its followers to the group's hold queue.
"""

from __future__ import annotations

import logging
import queue as queue_module
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from ase_engine import codes
from ase_engine.broker import Move, StompConnection, queue, wait
from ase_engine.config import GROUP_WAIT, ComponentConfig, ServiceUnitConfig
from ase_engine.errors import BrokerUnavailable
from ase_engine.history import Event, EventKind, HistorySink
from ase_engine.message import H_GROUP, H_ID, MalformedMessage, Message, now_ms
from ase_engine.ordering import DRAINING, OrderedGroups, hold_queue
from ase_engine.protection import CLOSED, OPEN, Protection
from ase_engine.target import HttpTarget, Outcome, Result

log = logging.getLogger("ase.sending")

Frame = tuple[dict[str, str], bytes]
# Called just before a failed request is moved to a RETRY queue or parked: (message, why).
OnFailure = Callable[[Message, str], None]
# Results of ``_settle`` after which the request is gone from its queue for good (no retry, not parked).
_DONE = ("acked", "fault", "expired", "malformed")


@dataclass
class _Subscription:
    unit: ServiceUnitConfig
    id: str
    stopping: bool = False
    in_flight: int = 0
    paused: bool = False  # stopping because the unit's circuit breaker is not closed
    probe: bool = False  # the half-open probe's subscription (prefetch 1)
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
        protection: Protection | None = None,
        groups: OrderedGroups | None = None,
        drain_idle: float = 1.0,
    ) -> None:
        self.component = component
        self.protection = protection
        self.groups = groups
        self.drain_idle = drain_idle
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
        self._paused: set[str] = set()  # wanted units paused by their circuit breaker
        self._probing: set[str] = set()  # paused units whose half-open probe this instance won
        self._protection_error_logged = False
        self._lanes: dict[tuple[str, str], deque[Frame]] = {}  # (subscription, group) → frames in order
        self._drains: dict[str, queue_module.Queue[Frame]] = {}  # hold-queue subscriptions being drained
        self._stats_lock = threading.Lock()
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
            active = {s for s, sub in self._subs.items() if not sub.stopping or sub.paused}
            return sorted(active | (self._paused & set(self._desired)))

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
            self._paused &= set(wanted)
            self._probing &= set(wanted)
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
                missing = [u for s, u in self._desired.items() if s not in self._subs and s not in self._paused]
            for unit in missing:
                if conn is None:
                    return
                probe = unit.service in self._probing
                self._probing.discard(unit.service)
                sub = _Subscription(unit=unit, id=f"{unit.service}-{uuid.uuid4().hex[:12]}", probe=probe)
                unit_log = logging.getLogger(f"ase.sending.{unit.service}")
                with self._lock:
                    # Known before the SUBSCRIBE leaves: messages may arrive before its receipt.
                    self._subs[unit.service] = sub
                    self._by_id[sub.id] = sub
                try:
                    wait(
                        conn.subscribe(
                            queue(unit.areas.pending), sub.id, prefetch=1 if probe else 2 * self.concurrency
                        ),
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
                if not probe:
                    codes.log(unit_log, "SE-ASE-I0002")

    def _release(self, conn: StompConnection, subscription: str) -> None:
        """Unsubscribe without waiting, so the broker gives the subscription's messages to others."""
        try:
            conn.unsubscribe(subscription)
        except BrokerUnavailable:
            pass  # the connection is gone: the broker released everything already

    def _drain_and_unsubscribe(self, sub: _Subscription, pausing: bool = False) -> StopReport:
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
            if not pausing:
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
            self._wake.wait(0.5)
            self._wake.clear()
            if self.protection is not None or self.groups is not None:
                try:
                    self._protect()
                except Exception as exc:  # noqa: BLE001 - Redis down: the breaker fails open, sending goes on
                    self._protection_failed(exc)

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
            drain = self._drains.get(subscription)
            sub = self._by_id.get(subscription)
            conn = self._conn
        if drain is not None:
            drain.put((headers, body))
            return
        if sub is None:
            # A subscription we no longer know (its SUBSCRIBE timed out): release it, or its
            # messages would wait for an ACK that never comes.
            if conn is not None and subscription not in self._released:
                self._released.add(subscription)
                self._release(conn, subscription)
            return
        with sub.drained:
            sub.in_flight += 1
        group = headers.get(H_GROUP) if sub.unit.ordered_groups else None
        try:
            if group:
                key = (sub.id, group)
                with self._lock:
                    lane = self._lanes.get(key)
                    start = lane is None
                    if lane is None:
                        lane = self._lanes[key] = deque()
                    lane.append((headers, body))
                if start:
                    self._executor.submit(self._run_lane, sub, conn, key)
                return
            self._executor.submit(self._handle, sub, conn, headers, body)
        except RuntimeError:  # executor shut down
            with sub.drained:
                sub.in_flight -= 1
                sub.drained.notify_all()

    def _run_lane(self, sub: _Subscription, conn: StompConnection | None, key: tuple[str, str]) -> None:
        """One group's messages, one at a time, in the order the broker delivered them."""
        while True:
            with self._lock:
                lane = self._lanes[key]
                headers, body = lane.popleft()
            self._handle(sub, conn, headers, body)
            with self._lock:
                if not lane:
                    del self._lanes[key]
                    return

    def _handle(self, sub: _Subscription, conn: StompConnection | None, headers: dict[str, str], body: bytes) -> None:
        try:
            if sub.stopping or conn is None:
                return  # left unsettled: back to the queue when the subscription goes
            if not self._may_invoke(sub):
                self._pause(sub)
                return  # the breaker is not closed: left unsettled, back to PENDING when paused
            if self.groups is not None and sub.unit.ordered_groups and headers.get(H_GROUP):
                self._settle_in_group(sub, conn, headers, body)
            else:
                self._settle(sub.unit, conn, headers, body, sub)
        except Exception as exc:  # noqa: BLE001 - one bad message must never stop the process
            logging.getLogger(f"ase.sending.{sub.unit.service}").error(
                "unexpected %s while handling message %s: %s", type(exc).__name__, headers.get("ase-id"), exc
            )
        finally:
            with sub.drained:
                sub.in_flight -= 1
                sub.drained.notify_all()

    def _settle(
        self,
        unit: ServiceUnitConfig,
        conn: StompConnection,
        headers: dict[str, str],
        body: bytes,
        sub: _Subscription | None = None,
        on_failure: OnFailure | None = None,
    ) -> str:
        """Invoke and settle one request; returns what became of it (``_DONE``, "retry", "parked", "unsettled")."""
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
            return "malformed"

        ttl = unit.effective_ttl(self.component)
        if ttl > 0 and now_ms() > message.incoming_timestamp + ttl * 1000:
            expired = message.with_outcome("expired", error=f"time-to-live of {ttl} s exceeded")
            if self._move(unit, conn, ack_id, areas.expired, *expired.to_frame()):
                codes.log(unit_log, "SE-ASE-W0011", area=areas.expired)
                self._event(message, EventKind.EXPIRED, areas.expired, outcome_code="SE-ASE-W0011")
                self._event(message, EventKind.PARKED, areas.expired, outcome_code="SE-ASE-W0011")
                return "expired"
            return "unsettled"

        self._wait_for_rate(unit)
        result = self.target.invoke(unit, message)
        if sub is not None:
            self._count_for_breaker(sub, result)
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
                return "unsettled"
            self._event(message, EventKind.ACKED, areas.pending, attempt=message.attempt + 1, status=result.status)
            return "acked"
        return self._park(unit, conn, ack_id, message, result, on_failure)

    # -- target protection ---------------------------------------------------

    def _may_invoke(self, sub: _Subscription) -> bool:
        if self.protection is None or sub.unit.breaker_threshold <= 0:
            return True
        try:
            return self.protection.may_invoke(sub.unit, sub.probe)
        except Exception as exc:  # noqa: BLE001 - Redis down: the breaker fails open
            self._protection_failed(exc)
            return True

    def _count_for_breaker(self, sub: _Subscription, result: Result) -> None:
        if self.protection is None or sub.unit.breaker_threshold <= 0:
            return
        failed = result.outcome in (Outcome.ERROR, Outcome.TIMEOUT)
        try:
            state = self.protection.record(sub.unit, failed)
        except Exception as exc:  # noqa: BLE001 - Redis down: the breaker fails open
            self._protection_failed(exc)
            return
        if state == OPEN or sub.probe:
            # Opened: stop taking requests. A probe's subscription (prefetch 1) goes either way:
            # closed, the unit is subscribed again with its full prefetch; open, it waits again.
            self._pause(sub)

    def _wait_for_rate(self, unit: ServiceUnitConfig) -> None:
        if self.protection is None or unit.rate_limit <= 0:
            return
        try:
            delay = self.protection.reserve(unit)
        except Exception as exc:  # noqa: BLE001 - Redis down: no shared bucket, sending goes on
            self._protection_failed(exc)
            return
        if delay > 0:
            self._stopping.wait(delay)

    def _pause(self, sub: _Subscription) -> None:
        """Stop taking the unit's requests here; the supervisor unsubscribes (they return to PENDING)."""
        with self._lock:
            if sub.stopping:
                return
            sub.stopping = True
            sub.paused = True
        self._wake.set()

    def _protect(self) -> None:
        """Supervisor: apply the shared breaker states to this instance's subscriptions.

        Paused subscriptions are unsubscribed (waiting for their invocations in
        flight); a subscription whose breaker another instance opened is paused
        (an idle one would never see a message to notice it); a paused unit is
        resumed when its breaker is closed, or probed when this instance wins
        the half-open probe.
        """
        with self._lock:
            to_unsubscribe = [sub for sub in self._subs.values() if sub.paused]
            watched = [
                sub for sub in self._subs.values() if not sub.stopping and not sub.probe and sub.unit.breaker_threshold
            ]
        for sub in to_unsubscribe:
            self._drain_and_unsubscribe(sub, pausing=True)
            with self._lock:
                if sub.unit.service in self._desired and sub.unit.service not in self._subs:
                    self._paused.add(sub.unit.service)
        for sub in watched:
            if self.protection is not None and not self.protection.may_invoke(sub.unit, probing=False):
                self._pause(sub)
        with self._lock:
            paused = [self._desired[s] for s in self._paused if s in self._desired]
        resumed = False
        for unit in paused:
            if self.protection is None or unit.breaker_threshold <= 0:
                resumed = True  # paused because the group state was unreachable: try again
            elif self.protection.breaker(unit.service).state == CLOSED:
                resumed = True
            elif self.protection.try_probe(unit):
                resumed = True
                with self._lock:
                    self._probing.add(unit.service)
            else:
                continue
            with self._lock:
                self._paused.discard(unit.service)
        if self._protection_error_logged:
            log.info("target protection state reachable again")
            self._protection_error_logged = False
        if resumed and self._conn is not None and self._conn.connected:
            self._subscribe_missing()

    def _protection_failed(self, exc: BaseException) -> None:
        if not self._protection_error_logged:
            log.error("target protection state unavailable (%s: %s): the breaker fails open", type(exc).__name__, exc)
            self._protection_error_logged = True

    def _park(
        self,
        unit: ServiceUnitConfig,
        conn: StompConnection,
        ack_id: str,
        message: Message,
        result: Result,
        on_failure: OnFailure | None = None,
    ) -> str:
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
            if on_failure is not None:
                on_failure(message, f"waits for retry {retry}/{unit.retry.number}")
            if not self._move(unit, conn, ack_id, area, *waiting.to_frame()):
                return "unsettled"
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
            return "retry"
        if outcome is Outcome.FAULT:
            area, kind, code = areas.fault, EventKind.FAULT, ""
        elif outcome is Outcome.TIMEOUT:
            area, kind, code = areas.timedout, EventKind.TIMEOUT, "SE-ASE-E0017"
        else:
            area, kind, code = areas.error, EventKind.ERROR, "SE-ASE-E0020"
        if on_failure is not None and outcome is not Outcome.FAULT:
            on_failure(message, f"is parked in '{area}'")
        if not self._move(unit, conn, ack_id, area, *failed.to_frame()):
            return "unsettled"
        if code:  # a fault is a business answer: no error is logged (PROC-025)
            codes.log(unit_log, code, request_id=message.id, queue=area)
        self._event(
            message, kind, area, attempt=failed.attempt, status=result.status, outcome_code=code, detail=result.reason
        )
        self._event(message, EventKind.PARKED, area, attempt=failed.attempt, status=result.status, outcome_code=code)
        return "fault" if outcome is Outcome.FAULT else "parked"

    # -- ordered groups --------------------------------------------------------

    def _settle_in_group(self, sub: _Subscription, conn: StompConnection, headers: dict[str, str], body: bytes) -> None:
        """Settle a message of an ordered group (its lane's thread): see ``ase_engine.ordering``."""
        assert self.groups is not None
        unit, group = sub.unit, headers[H_GROUP]
        try:
            state = self.groups.state(unit.service, group)
            if state is not None and state.phase == DRAINING:
                drained = self._drain(sub, conn, group)
                if drained == "stopped":
                    return  # left unsettled: back to PENDING; the group's next owner resumes the drain
                state = None if drained == "free" else self.groups.state(unit.service, group)
            if state is not None and state.blocker != headers.get(H_ID):
                self._hold(sub, conn, [(headers, body), *self._take_lane(sub, group, state.blocker)], group)
                return
            result = self._settle(unit, conn, headers, body, sub, on_failure=self._blocker(unit, group))
            if state is not None and result in _DONE:
                # The head that blocked the group is settled: its followers go now, in order.
                self.groups.draining(unit.service, group)
                self._drain(sub, conn, group)
        except Exception as exc:  # noqa: BLE001 - no shared group state: order cannot be kept, pause
            self._protection_failed(exc)
            self._pause(sub)

    def _blocker(self, unit: ServiceUnitConfig, group: str) -> OnFailure | None:
        """What a failing head does to its group: block it (``wait``), or nothing (``skip``)."""
        if unit.group_blocked != GROUP_WAIT or self.groups is None:
            return None
        groups = self.groups

        def block(message: Message, reason: str) -> None:
            groups.block(unit, group, message.id, reason)
            codes.log(
                logging.getLogger(f"ase.sending.{unit.service}"),
                "SE-ASE-W1002",
                group=group,
                service=unit.service,
                request_id=message.id,
                reason=reason,
            )

        return block

    def _take_lane(self, sub: _Subscription, group: str, blocker: str, limit: int = 200) -> list[Frame]:
        """The frames queued behind the current one in a group's lane, up to the blocker itself
        (back from its retry, it must be invoked, not held); the caller settles them."""
        taken: list[Frame] = []
        with self._lock:
            lane = self._lanes.get((sub.id, group))
            while lane and len(taken) < limit and lane[0][0].get(H_ID) != blocker:
                taken.append(lane.popleft())
        if taken:
            with sub.drained:
                sub.in_flight -= len(taken)
                sub.drained.notify_all()
        return taken

    def _hold(self, sub: _Subscription, conn: StompConnection, frames: list[Frame], group: str) -> None:
        """Followers of a blocked group wait in the group's hold queue, in order, moved in one transaction
        (a group's lane may hold many: one commit keeps the prefetch window free for the other groups)."""
        unit = sub.unit
        destination = queue(hold_queue(unit, group))
        moves: list[Move] = []
        for headers, body in frames:
            try:
                message = Message.from_frame(headers, body)
            except MalformedMessage:
                self._settle(unit, conn, headers, body)  # parked in the error area as any malformed frame
                continue
            moves.append(Move(headers["ack"], destination, *message.to_frame()))
        if not moves:
            return
        try:
            wait(conn.move_many(moves), self.component.receipt_timeout)
        except BrokerUnavailable as exc:
            self._removal_failed(unit, exc)

    def _drain(self, sub: _Subscription, conn: StompConnection, group: str) -> str:
        """Invoke the held messages of ``group`` in order: "free" once none is left, "blocked" when one
        of them blocks the group again, "stopped" if this instance stops or loses its connection."""
        assert self.groups is not None
        unit = sub.unit
        hold = hold_queue(unit, group)
        inbox: queue_module.Queue[Frame] = queue_module.Queue()
        drain_id = f"drain-{uuid.uuid4().hex[:12]}"
        with self._lock:
            self._drains[drain_id] = inbox
        try:
            wait(conn.subscribe(queue(hold), drain_id, prefetch=1), self.component.receipt_timeout)
            idle = 0
            while True:
                if sub.stopping or self._stopping.is_set() or not conn.connected:
                    return "stopped"
                try:
                    headers, body = inbox.get(timeout=self.drain_idle)
                except queue_module.Empty:
                    with self._stats_lock:  # the connection's first statistics query subscribes: one at a time
                        stats = conn.queue_stats([hold], timeout=2).get(hold)
                    idle += 1
                    if stats is None or int(stats.get("size", 0)) == 0:
                        break
                    if idle >= 5:
                        return "stopped"  # messages the broker does not hand out: leave the drain to the next try
                    continue
                idle = 0
                result = self._settle(unit, conn, headers, body, sub, on_failure=self._blocker(unit, group))
                if result == "unsettled":
                    return "stopped"
                if result not in _DONE and unit.group_blocked == GROUP_WAIT:
                    return "blocked"
            self.groups.release(unit.service, group)
            return "free"
        finally:
            self._release(conn, drain_id)
            with self._lock:
                self._drains.pop(drain_id, None)

    def _removal_failed(self, unit: ServiceUnitConfig, exc: BrokerUnavailable) -> None:
        """E0007: the request could not be taken off PENDING; the broker keeps it and delivers it again."""
        codes.log(
            logging.getLogger(f"ase.sending.{unit.service}"), "SE-ASE-E0007", area=unit.areas.pending, reason=str(exc)
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
            self._removal_failed(unit, exc)
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
