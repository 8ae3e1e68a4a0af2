"""Persistence areas seen by an operator: identify, browse, purge, recycle (SE-ASE-ADM-005/010/015).

An area is named by an ASE service and a sub-type (PENDING, EXPIRED,
TIMEDOUT, ERROR, FAULT, RETRY or ALL) and is one or more queues.

Browsing uses an ActiveMQ queue browser (STOMP ``browser:true``
subscription): the broker sends copies of the queue's head, at most its
``maxBrowsePageSize`` messages (deploy/activemq/activemq.xml: 1000), and
nothing is consumed. A page is read from that head window and the
subscription is dropped as soon as the page is full, so a page costs the
messages before it, never the whole queue, however deep.

Purge and recycle consume the area's queues from the head with
``client-individual`` acks and commit in transactions of ``batch`` messages
(purge: ACKs only; recycle: SEND to PENDING + ACK, DESIGN invariant 3), a
few commits in flight. "All messages" stops at the depth the area had when
the operation started, so requests that arrive meanwhile are left alone.
A selection (ids, posted before, last error contains) is evaluated on the
headers: messages it does not take are held un-acknowledged while the scan
goes on and go back to the queue, in place, when the connection closes. A
selective scan therefore looks at no more than ``scan_window`` messages of
each queue (selectors cannot help: ActiveMQ evaluates a consumer's selector
over the first ``maxPageSize`` messages only).
"""

from __future__ import annotations

import logging
import queue as queue_module
import threading
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any

from ase_engine import codes
from ase_engine.broker import Move, StompConnection, queue, wait
from ase_engine.config import ComponentConfig, ServiceUnitConfig
from ase_engine.errors import AreaError, BrokerUnavailable
from ase_engine.history import Event, EventKind, HistorySink
from ase_engine.message import H_ID, H_INCOMING, H_LAST_ERROR, MalformedMessage, Message, now_ms

log = logging.getLogger("ase.areas")

PENDING, EXPIRED, TIMEDOUT, ERROR, FAULT = "PENDING", "EXPIRED", "TIMEDOUT", "ERROR", "FAULT"
RETRY, ALL = "RETRY", "ALL"
SUBTYPES = (PENDING, EXPIRED, TIMEDOUT, ERROR, FAULT, RETRY, ALL)
# The areas a unit has, one row each in a listing (ALL is their union).
LISTED = (PENDING, EXPIRED, TIMEDOUT, ERROR, FAULT, RETRY)


def label(service: str, subtype: str) -> str:
    """How an area is named in messages: ``OrderService/ERROR``."""
    return f"{service}/{subtype}"


def check_subtype(service: str, raw: str) -> str:
    """The sub-type in upper case; E0021 if it is not one of ``SUBTYPES``."""
    value = (raw or "").strip().upper()
    if value not in SUBTYPES:
        raise AreaError("SE-ASE-E0021", area=label(service, raw))
    return value


def queues_of(unit: ServiceUnitConfig, subtype: str) -> list[str]:
    """The queues of one area of ``unit``, without duplicates (several sub-types may share a queue)."""
    areas = unit.areas
    by_subtype = {
        PENDING: [areas.pending],
        EXPIRED: [areas.expired],
        TIMEDOUT: [areas.timedout],
        ERROR: [areas.error],
        FAULT: [areas.fault],
        RETRY: unit.retry_queues(),
        ALL: areas.all() + unit.retry_queues(),
    }
    return list(dict.fromkeys(by_subtype[subtype]))


def subtype_of_queue(unit: ServiceUnitConfig, name: str) -> str | None:
    """The first sub-type (in ``LISTED`` order) whose area contains queue ``name``."""
    for subtype in LISTED:
        if name in queues_of(unit, subtype):
            return subtype
    return None


# -- browsing -------------------------------------------------------------------------


@dataclass(frozen=True)
class Browsed:
    """One message copy from a queue browser."""

    queue: str
    headers: dict[str, str]
    body: bytes

    @property
    def message(self) -> Message | None:
        try:
            return Message.from_frame(self.headers, self.body)
        except MalformedMessage:
            return None

    @property
    def broker_timestamp(self) -> int | None:
        value = self.headers.get("timestamp")
        return int(value) if value and value.isdigit() else None


class _Browser:
    """Collects one browse subscription's frames from ``skip`` to ``skip + take``."""

    def __init__(self, skip: int, take: int, match: Callable[[dict[str, str]], bool] | None = None) -> None:
        self.skip = skip
        self.take = take
        self.match = match
        self.seen = 0
        self.frames: list[tuple[dict[str, str], bytes]] = []
        self.ended = False
        self.done = threading.Event()

    def on_frame(self, headers: dict[str, str], body: bytes) -> None:
        if self.done.is_set():
            return
        if headers.get("browser") == "end":
            self.ended = True
            self.done.set()
            return
        if self.match is not None and not self.match(headers):
            return
        self.seen += 1
        if self.seen > self.skip:
            self.frames.append((headers, body))
            if len(self.frames) >= self.take:
                self.done.set()


def browse(
    component: ComponentConfig,
    queues: Iterable[tuple[str, int]],
    offset: int,
    limit: int,
    *,
    match: Callable[[dict[str, str]], bool] | None = None,
    timeout: float = 5.0,
) -> list[Browsed]:
    """Messages ``offset .. offset+limit`` of the areas' browsable heads, queue after queue.

    ``queues`` gives each queue with the number of messages a browser can see
    in it (its depth, capped at the broker's browse window); queues wholly
    before ``offset`` are skipped without being read. Raises ``BrokerUnavailable``.
    """
    result: list[Browsed] = []
    plan = [(name, visible) for name, visible in queues if visible > 0]
    if not plan or limit <= 0:
        return result
    browsers: dict[str, _Browser] = {}
    lock = threading.Lock()

    def on_message(headers: dict[str, str], body: bytes) -> None:
        with lock:
            browser = browsers.get(headers.get("subscription", ""))
        if browser is not None:
            browser.on_frame(headers, body)

    conn = StompConnection(component, name=f"browse-{uuid.uuid4().hex[:8]}", on_message=on_message, heartbeats=(0, 0))
    conn.connect(timeout=component.receipt_timeout)
    try:
        for name, visible in plan:
            if match is None and offset >= visible:
                offset -= visible
                continue
            browser = _Browser(offset, limit - len(result), match)
            subscription = f"browse-{uuid.uuid4().hex[:8]}"
            with lock:
                browsers[subscription] = browser
            wait(
                conn.subscribe(queue(name), subscription, ack="auto", extra={"browser": "true"}),
                component.receipt_timeout,
            )
            if not browser.done.wait(timeout):
                log.warning("browsing %s: no end of browse within %g s; page may be short", name, timeout)
            browser.done.set()
            conn.unsubscribe(subscription)
            result.extend(Browsed(name, headers, body) for headers, body in browser.frames)
            offset = max(0, offset - browser.seen)
            if len(result) >= limit:
                break
    finally:
        try:
            conn.disconnect()
        except BrokerUnavailable as exc:
            codes.log(log, "SE-ASE-W0008", reason=str(exc))
    return result[:limit]


def depths(component: ComponentConfig, names: Iterable[str], timeout: float = 2.0) -> dict[str, int | None]:
    """The number of messages in each queue (statistics plugin); ``None`` for a queue that does not exist."""
    names = list(dict.fromkeys(names))
    conn = StompConnection(component, name=f"stats-{uuid.uuid4().hex[:8]}", heartbeats=(0, 0))
    conn.connect(timeout=component.receipt_timeout)
    try:
        stats = conn.queue_stats(names, timeout=timeout)
    finally:
        try:
            conn.disconnect()
        except BrokerUnavailable as exc:
            codes.log(log, "SE-ASE-W0008", reason=str(exc))
    return {name: (None if stat is None else int(stat.get("size", 0))) for name, stat in stats.items()}


# -- purge and recycle ---------------------------------------------------------------------


@dataclass(frozen=True)
class Selection:
    """Which messages an operation takes: all of them when every field is empty."""

    ids: frozenset[str] | None = None
    posted_before_ms: int | None = None
    error_contains: str | None = None

    @property
    def everything(self) -> bool:
        return not self.ids and self.posted_before_ms is None and not self.error_contains

    def matches(self, headers: dict[str, str]) -> bool:
        if self.ids and headers.get(H_ID) not in self.ids:
            return False
        if self.posted_before_ms is not None:
            incoming = headers.get(H_INCOMING, "")
            if not incoming.isdigit() or int(incoming) >= self.posted_before_ms:
                return False
        if self.error_contains and self.error_contains.lower() not in headers.get(H_LAST_ERROR, "").lower():
            return False
        return True


@dataclass
class AreaReport:
    """Progress and result of a purge or a recycle."""

    total: int = 0
    done: int = 0
    scanned: int = 0
    skipped: int = 0
    not_found: list[str] = field(default_factory=list)
    per_queue: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "done": self.done,
            "scanned": self.scanned,
            "skipped": self.skipped,
            "not_found": self.not_found,
            "per_queue": self.per_queue,
        }


Progress = Callable[[AreaReport], None]
_Pending = tuple["Future[Any]", list[Event], str]


class AreaMover:
    """Purges or recycles the messages of one area, in small transactions (see the module docstring)."""

    def __init__(
        self,
        component: ComponentConfig,
        history: HistorySink,
        *,
        instance: str = "admin",
        batch: int = 500,
        in_flight: int = 4,
        idle: float = 2.0,
        scan_window: int = 10_000,
        commit_timeout: float = 60.0,
        per_connection: int = 20_000,
    ) -> None:
        self.component = component
        self.history = history
        self.instance = instance
        self.batch = batch
        self.in_flight = in_flight
        self.idle = idle
        self.scan_window = scan_window
        self.commit_timeout = commit_timeout
        self.per_connection = per_connection

    def purge(
        self, unit: ServiceUnitConfig, queues: list[str], selection: Selection, progress: Progress | None = None
    ) -> AreaReport:
        """Destroy the selected messages; raises ``BrokerUnavailable`` (the caller reports E0008)."""
        return self._run("purge", unit, queues, selection, progress)

    def recycle(
        self, unit: ServiceUnitConfig, queues: list[str], selection: Selection, progress: Progress | None = None
    ) -> AreaReport:
        """Move the selected messages back to PENDING with a fresh incoming timestamp and no attempts
        (ADM-015); raises ``BrokerUnavailable`` (the caller reports E0018)."""
        return self._run("recycle", unit, queues, selection, progress)

    def _run(
        self,
        action: str,
        unit: ServiceUnitConfig,
        queues: list[str],
        selection: Selection,
        progress: Progress | None,
    ) -> AreaReport:
        report = AreaReport()
        sizes = depths(self.component, queues)
        limits = {
            name: (size or 0) if selection.everything else min(size or 0, self.scan_window)
            for name, size in sizes.items()
        }
        report.total = (
            sum(limits.values()) if selection.everything else len(selection.ids or ()) or sum(limits.values())
        )
        remaining_ids = set(selection.ids or ())
        for name in queues:
            left = limits.get(name, 0)
            while left > 0:
                # "All" is done on a fresh connection every ``per_connection`` messages: ActiveMQ keeps state
                # for the transactions of a connection until it closes (measured: a broker with 512 MB of heap
                # ran out of memory after ~60,000 transactional moves on one connection).
                chunk = min(left, self.per_connection) if selection.everything else left
                scanned = self._queue(action, unit, name, chunk, selection, remaining_ids, report, progress)
                left = left - scanned if selection.everything and scanned > 0 else 0
            if selection.ids and not remaining_ids:
                break
        report.not_found = sorted(remaining_ids)
        return report

    def _queue(
        self,
        action: str,
        unit: ServiceUnitConfig,
        name: str,
        limit: int,
        selection: Selection,
        remaining_ids: set[str],
        report: AreaReport,
        progress: Progress | None,
    ) -> int:
        """Work on up to ``limit`` messages of queue ``name`` over one connection; returns how many it scanned."""
        inbox: queue_module.Queue[tuple[dict[str, str], bytes]] = queue_module.Queue()
        # No heart-beats: while the broker syncs a large commit it may stay silent longer than a beat.
        conn = StompConnection(
            self.component,
            name=f"{action}-{uuid.uuid4().hex[:8]}",
            on_message=lambda headers, body: inbox.put((headers, body)),
            heartbeats=(0, 0),
        )
        conn.connect(timeout=self.component.receipt_timeout)
        # Messages a selection does not take stay un-acked: the prefetch must leave room for them all.
        prefetch = self.batch * (self.in_flight + 1) + (0 if selection.everything else limit)
        pending: list[_Pending] = []
        scanned = 0
        try:
            wait(conn.subscribe(queue(name), f"{action}-{name}", prefetch=prefetch), self.component.receipt_timeout)
            while scanned < limit:
                try:
                    first = inbox.get(timeout=self.idle)
                except queue_module.Empty:
                    break  # taken by another consumer meanwhile (PENDING: the sending process)
                frames = [first]
                while len(frames) < self.batch and scanned + len(frames) < limit:
                    try:
                        frames.append(inbox.get_nowait())
                    except queue_module.Empty:
                        break
                scanned += len(frames)
                report.scanned += len(frames)
                chosen = [(h, b) for h, b in frames if selection.matches(h)]
                if selection.ids:
                    chosen = [(h, b) for h, b in chosen if h.get(H_ID) in remaining_ids]
                    remaining_ids.difference_update(h.get(H_ID, "") for h, _ in chosen)
                if chosen:
                    pending.append(self._commit(action, conn, unit, name, chosen, report))
                while len(pending) >= self.in_flight or (pending and inbox.empty()):
                    self._settle(pending.pop(0), report, progress)
                if selection.ids and not remaining_ids:
                    break
        finally:
            try:
                while pending:
                    self._settle(pending.pop(0), report, progress)
            finally:
                try:
                    conn.disconnect()  # whatever was not taken returns to the queue
                except BrokerUnavailable as exc:
                    codes.log(log, "SE-ASE-W0008", reason=str(exc))
        return scanned

    def _commit(
        self,
        action: str,
        conn: StompConnection,
        unit: ServiceUnitConfig,
        name: str,
        frames: list[tuple[dict[str, str], bytes]],
        report: AreaReport,
    ) -> _Pending:
        events: list[Event] = []
        if action == "purge":
            for headers, body in frames:
                events.append(self._event(headers, body, unit, EventKind.PURGED, name, f"purged from {name}"))
            return conn.ack_many([h["ack"] for h, _ in frames]), events, name
        moves: list[Move] = []
        now = now_ms()
        for headers, body in frames:
            try:
                message = Message.from_frame(headers, body)
            except MalformedMessage:
                report.skipped += 1  # not an ASE request: nothing to send to the target, left where it is
                continue
            fresh = replace(message, incoming_timestamp=now, attempt=0, due=None)
            moves.append(Move(headers["ack"], queue(unit.areas.pending), *fresh.to_frame()))
            events.append(
                self._event(headers, body, unit, EventKind.RECYCLED, unit.areas.pending, f"recycled from {name}")
            )
        if not moves:
            done: Future[Any] = Future()
            done.set_result(None)
            return done, events, name
        return conn.move_many(moves), events, name

    def _settle(self, item: _Pending, report: AreaReport, progress: Progress | None) -> None:
        future, events, name = item
        wait(future, self.commit_timeout)
        report.done += len(events)
        report.per_queue[name] = report.per_queue.get(name, 0) + len(events)
        for event in events:
            try:
                self.history.record(event)
            except Exception as exc:  # noqa: BLE001 - history must never cost the operation
                log.error("history event for message %s not recorded: %s", event.message_id, exc)
        if progress is not None:
            progress(report)

    def _event(
        self, headers: dict[str, str], body: bytes, unit: ServiceUnitConfig, kind: EventKind, area: str, detail: str
    ) -> Event:
        attempt = headers.get("ase-attempt", "0")
        return Event(
            headers.get(H_ID, headers.get("message-id", "")),
            unit.service,
            kind,
            area=area,
            attempt=int(attempt) if attempt.isdigit() else 0,
            size=len(body),
            detail=detail,
            instance=self.instance,
        )
