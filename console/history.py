"""Stores the engine's history events in the database, off the request path.

``BufferedRecorder.record`` only puts the event on a queue; a daemon thread
writes them in batches (one ``executemany`` INSERT) every ``interval`` seconds or every
``batch`` events. A failing write is logged and the batch dropped: history
must never cost a message or block the ingress. What is buffered when the
process is killed (at most ``interval`` seconds of events) is lost.
"""

from __future__ import annotations

import atexit
import logging
import queue
import threading
from datetime import UTC, datetime

from django.db import close_old_connections

from ase_engine.history import Event

log = logging.getLogger("ase.history")


class BufferedRecorder:
    def __init__(self, interval: float = 0.2, batch: int = 500, capacity: int = 100_000) -> None:
        self.interval = interval
        self.batch = batch
        self._queue: queue.Queue[Event] = queue.Queue(maxsize=capacity)
        self._thread = threading.Thread(target=self._run, name="ase-history", daemon=True)
        self._stop = threading.Event()
        self._thread.start()
        atexit.register(self.flush)

    def record(self, event: Event) -> None:
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            log.error("history buffer full: event %s of message %s dropped", event.kind.value, event.message_id)

    def flush(self) -> None:
        """Write everything buffered now (used at exit and by tests)."""
        while not self._queue.empty():
            self._write(self._take())

    def _take(self) -> list[Event]:
        events: list[Event] = []
        while len(events) < self.batch:
            try:
                events.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return events

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            while True:
                events = self._take()
                if not events:
                    break
                self._write(events)

    def _write(self, events: list[Event]) -> None:
        """One multi-row INSERT (executemany) per batch: no model instances on this path."""
        if not events:
            return
        from django.db import connection

        from console.models import MessageEvent

        close_old_connections()
        table = connection.ops.quote_name(MessageEvent._meta.db_table)
        columns = ", ".join(connection.ops.quote_name(c) for c in _COLUMNS)
        adapt = connection.ops.adapt_datetimefield_value
        sql = f"INSERT INTO {table} ({columns}) VALUES ({', '.join(['%s'] * len(_COLUMNS))})"
        rows = [
            (
                e.message_id,
                e.service,
                e.kind.value,
                adapt(datetime.fromtimestamp(e.at_ms / 1000, tz=UTC)),
                e.area,
                e.attempt,
                e.outcome_code,
                e.target_status,
                e.duration_ms,
                e.size,
                e.detail,
                e.instance,
            )
            for e in events
        ]
        try:
            with connection.cursor() as cursor:
                cursor.executemany(sql, rows)
        except Exception as exc:  # noqa: BLE001 - history must never take the process down
            log.error("%d history events not stored: %s: %s", len(events), type(exc).__name__, exc)


_COLUMNS = (
    "message_id",
    "service",
    "kind",
    "at",
    "area",
    "attempt",
    "outcome_code",
    "target_status",
    "duration_ms",
    "size",
    "detail",
    "instance",
)

_recorder: BufferedRecorder | None = None
_lock = threading.Lock()


def recorder() -> BufferedRecorder:
    """The process-wide recorder, started on first use."""
    global _recorder
    with _lock:
        if _recorder is None:
            _recorder = BufferedRecorder()
        return _recorder
