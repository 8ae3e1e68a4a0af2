"""Stores the engine's history events in the database, off the request path.

``BufferedRecorder.record`` only puts the event on a queue; a daemon thread
writes them in batches (one transaction each: COPY on PostgreSQL, one
``executemany`` INSERT elsewhere) every ``interval`` seconds
(``ASE_HISTORY_FLUSH_INTERVAL``), at most ``batch`` events per transaction.
A failing write is logged and the batch dropped: history must never cost a
message or block the ingress. What is buffered when the process is killed
(at most ``interval`` seconds of events) is lost.
"""

from __future__ import annotations

import atexit
import collections
import logging
import threading

from django.db import close_old_connections

from ase_engine.history import Event

log = logging.getLogger("ase.history")


class BufferedRecorder:
    def __init__(self, interval: float = 1.0, batch: int = 5000, capacity: int = 100_000) -> None:
        self.interval = interval
        self.batch = batch
        self.capacity = capacity
        # A deque, not a queue.Queue: append and popleft are atomic, and record() is on every request's
        # path (a Queue takes a lock and notifies a condition per put). The writer thread polls every interval.
        self._events: collections.deque[Event] = collections.deque()
        self._thread = threading.Thread(target=self._run, name="ase-history", daemon=True)
        self._stop = threading.Event()
        # Held while a batch is taken off the buffer and written, so that flush()
        # cannot return while the writer thread still holds uncommitted events.
        self._writing = threading.Lock()
        self._thread.start()
        atexit.register(self.flush)

    def record(self, event: Event) -> None:
        if len(self._events) < self.capacity:
            self._events.append(event)
        else:
            log.error("history buffer full: event %s of message %s dropped", event.kind.value, event.message_id)

    def flush(self) -> None:
        """Write everything buffered now, and wait for a batch the writer thread is storing
        (used at exit and by tests): on return, every event recorded before the call is committed."""
        with self._writing:
            while self._events:
                self._write(self._take())

    def _take(self) -> list[Event]:
        events: list[Event] = []
        while len(events) < self.batch:
            try:
                events.append(self._events.popleft())
            except IndexError:
                break
        return events

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            while True:
                with self._writing:
                    events = self._take()
                    if not events:
                        break
                    self._write(events)

    def _write(self, events: list[Event]) -> None:
        """One batch, one transaction (``history_store.bulk_load``: COPY on PostgreSQL, one multi-row
        ``executemany`` elsewhere); no model instances on this path."""
        if not events:
            return
        from console.history_store import bulk_load

        close_old_connections()
        try:
            bulk_load(events, chunk=len(events))
        except Exception as exc:  # noqa: BLE001 - history must never take the process down
            log.error("%d history events not stored: %s: %s", len(events), type(exc).__name__, exc)


class DisabledRecorder:
    """Records nothing (``ASE_HISTORY_ENABLED=false``): only to measure what recording costs."""

    def record(self, event: Event) -> None:
        pass

    def flush(self) -> None:
        pass


_recorder: BufferedRecorder | DisabledRecorder | None = None
_lock = threading.Lock()


def recorder() -> BufferedRecorder | DisabledRecorder:
    """The process-wide recorder, started on first use."""
    global _recorder
    from django.conf import settings

    with _lock:
        if _recorder is None:
            _recorder = (
                BufferedRecorder(interval=settings.ASE_HISTORY_FLUSH_INTERVAL)
                if settings.ASE_HISTORY_ENABLED
                else DisabledRecorder()
            )
        return _recorder
