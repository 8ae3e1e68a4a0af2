"""Stores the engine's history events in the database, off the request path.

``BufferedRecorder.record`` only puts the event on a queue; a daemon thread
writes them in batches (one transaction each: COPY on PostgreSQL, one
``executemany`` INSERT on SQLite) every ``interval`` seconds
(``ASE_HISTORY_FLUSH_INTERVAL``), at most ``batch`` events per transaction.
Where the batch is written is the ``store``: in the thread itself
(``ASE_HISTORY_WRITER=thread``, the default on PostgreSQL, whose server does
the work), or, on SQLite, by a child process (``WriterStore``,
``console.history_writer``). A failing write is logged and the batch
dropped: history must never cost a message or block the ingress. What is
buffered when the process is killed (at most ``interval`` seconds of events)
is lost.
"""

from __future__ import annotations

import atexit
import collections
import logging
import threading
from collections.abc import Callable

from django.db import close_old_connections, connection

from ase_engine.history import Event
from console.history_writer import WriterProcess

log = logging.getLogger("ase.history")


def store_in_thread(events: list[Event]) -> None:
    """Write ``events`` through this process's own database connection (``history_store.bulk_load``)."""
    from console.history_store import bulk_load

    close_old_connections()
    bulk_load(events, chunk=len(events))


class WriterStore:
    """Write batches through a child process (``console.history_writer``) into the SQLite database:
    ``target`` is its file, table and columns (default: the default database's, ``sqlite_target``)."""

    def __init__(self, target: tuple[str, str, list[str]] | None = None, timeout: float | None = None) -> None:
        self._target = target
        self._timeout = timeout
        self.writer: WriterProcess | None = None

    def __call__(self, events: list[Event]) -> None:
        from console.history_store import sqlite_rows, sqlite_target

        if self.writer is None:
            database, table, columns = self._target or sqlite_target()
            timeout = self._timeout or float(connection.settings_dict.get("OPTIONS", {}).get("timeout", 5))
            self.writer = WriterProcess(database, table, columns, timeout)
        self.writer.store(sqlite_rows(events))

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def writer_process_possible() -> bool:
    """A child process can write the default database: SQLite in a file (not in memory)."""
    return connection.vendor == "sqlite" and not connection.is_in_memory_db()


def make_store(writer: str) -> Callable[[list[Event]], None]:
    """The store ``ASE_HISTORY_WRITER`` names; ``auto``: a writer process where one can write, else the thread."""
    if writer == "process" or (writer == "auto" and writer_process_possible()):
        return WriterStore()
    return store_in_thread


class BufferedRecorder:
    def __init__(
        self,
        interval: float = 1.0,
        batch: int = 5000,
        capacity: int = 100_000,
        store: Callable[[list[Event]], None] = store_in_thread,
    ) -> None:
        self.interval = interval
        self.batch = batch
        self.capacity = capacity
        self.store = store
        # A deque, not a queue.Queue: append and popleft are atomic, and record() is on every request's
        # path (a Queue takes a lock and notifies a condition per put). The writer thread polls every interval.
        self._events: collections.deque[Event] = collections.deque()
        self._thread = threading.Thread(target=self._run, name="ase-history", daemon=True)
        self._stop = threading.Event()
        # Held while a batch is taken off the buffer and written, so that flush()
        # cannot return while the writer thread still holds uncommitted events.
        self._writing = threading.Lock()
        self._thread.start()
        atexit.register(self.close)

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

    def close(self) -> None:
        """Flush, then end the store's writer process if it has one (at exit)."""
        self.flush()
        close = getattr(self.store, "close", None)
        if close is not None:
            close()

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
        """One batch, one transaction; no model instances on this path."""
        if not events:
            return
        try:
            self.store(events)
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
            if not settings.ASE_HISTORY_ENABLED:
                _recorder = DisabledRecorder()
            else:
                store = make_store(settings.ASE_HISTORY_WRITER)
                _recorder = BufferedRecorder(interval=settings.ASE_HISTORY_FLUSH_INTERVAL, store=store)
        return _recorder
