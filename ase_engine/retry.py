"""The retry pump: moves requests whose retry is due from the RETRY area back to PENDING.

Nothing waits in memory (PROC-026, DESIGN invariant 4). A request waiting for
retry ``n`` sits in its unit's queue ``<pending>_retry_<n>``; every request
of that queue waits the same delay, ``base × factor^(n-1)``, from the moment
it was moved there, so the queue's order is the order in which its requests
fall due and the due ones are always at its head.

One pump run subscribes to every RETRY queue with the selector
``JMSTimestamp <= now - delay(n)`` (the broker's timestamp of the move into
the queue). ActiveMQ evaluates a selector only over the first page of a queue
(maxPageSize, 200 messages), which is exactly where due requests are in this
layout; nothing that is not due is ever delivered to the pump, so no
redelivery counter is touched. Due requests are moved in transactions of up
to ``batch`` (SEND to PENDING + ACK, one COMMIT; a few commits pipelined), or to the expired area if
their time-to-live passed (PROC-027, W0011). A run ends when the queues have
been quiet for ``idle`` seconds or its ``budget`` is spent; whatever it had
received but not committed returns to its RETRY queue.
"""

from __future__ import annotations

import logging
import queue as queue_module
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any

from ase_engine import codes
from ase_engine.broker import Move, StompConnection, queue, wait
from ase_engine.config import ComponentConfig, ServiceUnitConfig
from ase_engine.errors import BrokerUnavailable
from ase_engine.history import Event, EventKind, HistorySink
from ase_engine.message import MalformedMessage, Message, now_ms

log = logging.getLogger("ase.retry")


@dataclass
class PumpReport:
    retried: int = 0
    expired: int = 0
    failed: int = 0
    seconds: float = 0.0
    per_service: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class _Source:
    unit: ServiceUnitConfig
    number: int


class RetryPump:
    def __init__(
        self,
        component: ComponentConfig,
        history: HistorySink,
        *,
        instance: str = "retry-pump",
        batch: int = 200,
        prefetch: int = 1000,
        in_flight: int = 3,
        idle: float = 0.25,
    ) -> None:
        self.component = component
        self.history = history
        self.instance = instance
        self.batch = batch
        self.prefetch = prefetch
        self.in_flight = in_flight
        self.idle = idle

    def pump(self, units: Sequence[ServiceUnitConfig], budget: float = 5.0) -> PumpReport:
        """Move every due request of ``units`` back to PENDING; raises ``BrokerUnavailable``."""
        started = time.monotonic()
        report = PumpReport()
        sources: dict[str, _Source] = {}
        inbox: queue_module.Queue[tuple[dict[str, str], bytes]] = queue_module.Queue()
        conn = StompConnection(
            self.component,
            name=f"{self.instance}-{uuid.uuid4().hex[:6]}",
            on_message=lambda headers, body: inbox.put((headers, body)),
        )
        conn.connect(timeout=self.component.receipt_timeout)
        try:
            now = now_ms()
            receipts = []
            for unit in units:
                for number in range(1, unit.retry.number + 1) if unit.retries else ():
                    subscription = f"retry-{number}-{uuid.uuid4().hex[:8]}"
                    sources[subscription] = _Source(unit, number)
                    cutoff = now - unit.retry.delay(number) * 1000
                    receipts.append(
                        conn.subscribe(
                            queue(unit.areas.retry(number)),
                            subscription,
                            prefetch=self.prefetch,
                            selector=f"JMSTimestamp <= {cutoff}",
                        )
                    )
            for receipt in receipts:
                wait(receipt, self.component.receipt_timeout)
            self._drain(conn, inbox, sources, report, deadline=started + budget)
        finally:
            try:
                conn.disconnect()
            except BrokerUnavailable as exc:
                codes.log(log, "SE-ASE-W0008", reason=str(exc))
        report.seconds = time.monotonic() - started
        return report

    def _drain(
        self,
        conn: StompConnection,
        inbox: queue_module.Queue[tuple[dict[str, str], bytes]],
        sources: dict[str, _Source],
        report: PumpReport,
        deadline: float,
    ) -> None:
        """Move what arrives, in transactions of up to ``batch``, keeping up to ``in_flight`` commits pending
        so the broker's disk sync of one batch overlaps the encoding of the next."""
        pending: list[tuple[Future[Any], list[Event], list[tuple[logging.Logger, str]]]] = []
        try:
            while time.monotonic() < deadline:
                if inbox.empty():
                    while pending:  # nothing to overlap with: settle now rather than after the idle wait
                        self._settled(pending.pop(0), report)
                try:
                    first = inbox.get(timeout=self.idle)
                except queue_module.Empty:
                    return
                frames = [first]
                while len(frames) < self.batch:
                    try:
                        frames.append(inbox.get_nowait())
                    except queue_module.Empty:
                        break
                pending.append(self._move_batch(conn, frames, sources))
                while len(pending) >= self.in_flight:
                    self._settled(pending.pop(0), report)
        finally:
            while pending:
                self._settled(pending.pop(0), report)

    def _move_batch(
        self,
        conn: StompConnection,
        frames: list[tuple[dict[str, str], bytes]],
        sources: dict[str, _Source],
    ) -> tuple[Future[Any], list[Event], list[tuple[logging.Logger, str]]]:
        """Send one transaction moving ``frames`` (due → PENDING, expired → the expired area); not waited for."""
        moves: list[Move] = []
        events: list[Event] = []
        expired_logs: list[tuple[logging.Logger, str]] = []
        now = now_ms()
        for headers, body in frames:
            source = sources[headers["subscription"]]
            unit, areas = source.unit, source.unit.areas
            try:
                message = Message.from_frame(headers, body)
            except MalformedMessage as exc:
                kept = {
                    k: v for k, v in headers.items() if k not in ("ack", "subscription", "message-id", "destination")
                }
                kept.update({"persistent": "true", "ase-last-outcome": "malformed", "ase-last-error": str(exc)})
                moves.append(Move(headers["ack"], queue(areas.error), kept, body))
                continue
            ttl = unit.effective_ttl(self.component)
            if ttl > 0 and now > message.incoming_timestamp + ttl * 1000:
                expired = replace(
                    message, due=None, last_outcome="expired", last_error=f"time-to-live of {ttl} s exceeded"
                )
                moves.append(Move(headers["ack"], queue(areas.expired), *expired.to_frame()))
                events.append(self._event(message, EventKind.EXPIRED, areas.expired, "SE-ASE-W0011"))
                events.append(self._event(message, EventKind.PARKED, areas.expired, "SE-ASE-W0011"))
                expired_logs.append((logging.getLogger(f"ase.retry.{unit.service}"), areas.expired))
                continue
            ready = replace(message, due=None)
            moves.append(Move(headers["ack"], queue(areas.pending), *ready.to_frame()))
            events.append(self._event(message, EventKind.RETRIED, areas.pending, "", f"retry {source.number}"))
        return conn.move_many(moves), events, expired_logs

    def _settled(
        self,
        batch: tuple[Future[Any], list[Event], list[tuple[logging.Logger, str]]],
        report: PumpReport,
    ) -> None:
        """Wait for one batch's COMMIT receipt, then log and record what it moved."""
        future, events, expired_logs = batch
        try:
            wait(future, self.component.receipt_timeout)
        except BrokerUnavailable as exc:
            # Rolled back by the broker: the requests stay in their RETRY queues for the next run.
            report.failed += sum(1 for event in events if event.kind is not EventKind.PARKED)
            log.error("retry pump: %d due requests not moved this run: %s", len(events), exc)
            raise
        for unit_log, area in expired_logs:
            codes.log(unit_log, "SE-ASE-W0011", area=area)
        report.expired += len(expired_logs)
        for event in events:
            if event.kind is EventKind.RETRIED:
                report.retried += 1
                report.per_service[event.service] = report.per_service.get(event.service, 0) + 1
            try:
                self.history.record(event)
            except Exception as exc:  # noqa: BLE001 - history must never cost the message
                log.error("history event for message %s not recorded: %s", event.message_id, exc)

    def _event(self, message: Message, kind: EventKind, area: str, code: str, detail: str = "") -> Event:
        return Event(
            message.id,
            message.service,
            kind,
            area=area,
            attempt=message.attempt,
            outcome_code=code,
            size=message.size,
            detail=detail,
            instance=self.instance,
        )
