"""Message history: one event per waypoint of a message's life (DESIGN invariant 7).

The engine emits ``Event`` objects to a ``HistorySink``; the Django side
stores them. A sink must never raise into the engine: losing a history row is
bad, losing the message because of it is worse.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field
from typing import Protocol

from ase_engine.message import now_ms

log = logging.getLogger(__name__)


class EventKind(enum.Enum):
    POSTED = "posted"
    ATTEMPT = "attempt"
    ACKED = "acked"
    FAULT = "fault"
    ERROR = "error"
    TIMEOUT = "timeout"
    RETRY_SCHEDULED = "retry_scheduled"
    RETRIED = "retried"
    EXPIRED = "expired"
    PARKED = "parked"
    PURGED = "purged"
    RECYCLED = "recycled"


# The events that leave a message in a parking area (expired, timed out, error, fault) until an
# operator purges or recycles it; a ``PARKED`` event follows each of them, naming the area.
PARKING_KINDS = frozenset({EventKind.EXPIRED, EventKind.TIMEOUT, EventKind.ERROR, EventKind.FAULT})


@dataclass(frozen=True)
class Event:
    message_id: str
    service: str
    kind: EventKind
    area: str = ""
    attempt: int = 0
    outcome_code: str = ""
    target_status: int | None = None
    duration_ms: int | None = None
    size: int | None = None
    detail: str = ""
    instance: str = ""
    at_ms: int = field(default_factory=now_ms)


class HistorySink(Protocol):
    def record(self, event: Event) -> None: ...


class LogSink:
    """A sink that only logs (used where no store is configured)."""

    def record(self, event: Event) -> None:
        log.debug("history %s %s %s", event.message_id, event.kind.value, event.area)


class MemorySink:
    """Keeps events in a list: for engine tests that assert the history."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def record(self, event: Event) -> None:
        self.events.append(event)

    def kinds(self, message_id: str) -> list[EventKind]:
        """The message's events in time order, as a history store orders them (by ``at``)."""
        return [e.kind for e in sorted(self.events, key=lambda e: e.at_ms) if e.message_id == message_id]
