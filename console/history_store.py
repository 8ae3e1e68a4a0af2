"""The message history store in bulk: loading many events at once, and forgetting old ones.

``bulk_load`` is the one way events are written: by the recorder
(``console.history``, one batch at a time), imports and the reports benchmark: PostgreSQL ``COPY ... FROM STDIN`` in
chunks of ``chunk`` rows (one transaction each), one ``executemany`` per chunk on other databases (on
SQLite, the time formatted as Django stores it, without making a ``datetime``). ``purge_history``
deletes the events older than the retention (``ASE_HISTORY_RETENTION_DAYS``) in bounded batches, each
its own short transaction, so that it never holds a lock on the table for long.
"""

from __future__ import annotations

import functools
import itertools
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from ase_engine.history import Event

log = logging.getLogger("ase.history")

COLUMNS = (
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


def _row(event: Event, at: object = None) -> tuple[object, ...]:
    """The event's values in COLUMNS' order; ``at`` as given, by default the aware ``datetime``."""
    return (
        event.message_id,
        event.service,
        event.kind.value,
        _utc(event.at_ms) if at is None else at,
        event.area,
        event.attempt,
        event.outcome_code,
        event.target_status,
        event.duration_ms,
        event.size,
        event.detail[:500],
        event.instance,
    )


def sqlite_rows(events: list[Event], db: BaseDatabaseWrapper = connection) -> list[tuple[object, ...]]:
    """The rows of ``events`` as SQLite takes them: COLUMNS' order, ``at`` as the text Django's SQLite
    backend stores (the naive datetime in the time zone of ``db``, the default database)."""
    if db.timezone_name == "UTC":
        return [_row(event, _sqlite_at(event.at_ms)) for event in events]
    zone = db.timezone
    return [_row(event, str(timezone.make_naive(_utc(event.at_ms), zone))) for event in events]


def sqlite_target() -> tuple[str, str, list[str]]:
    """Where the history is in the default SQLite database: its file, the table and the columns, quoted."""
    return (
        str(connection.settings_dict["NAME"]),
        _table(),
        [connection.ops.quote_name(column) for column in COLUMNS],
    )


def _utc(at_ms: int) -> datetime:
    return datetime.fromtimestamp(at_ms / 1000, tz=UTC)


@functools.lru_cache(maxsize=4096)
def _utc_second(seconds: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds))


def _sqlite_at(at_ms: int) -> str:
    """What Django's SQLite backend stores for the UTC datetime ``at_ms`` (``str()`` of the naive datetime:
    no fraction when there is none), made without a ``datetime``: making and adapting one took a third of
    the recorder's CPU per event. The events of one batch share a few seconds: their prefix is cached."""
    seconds, millis = divmod(at_ms, 1000)
    prefix = _utc_second(seconds)
    return f"{prefix}.{millis * 1000:06d}" if millis else prefix


def _chunks(events: Iterable[Event], size: int) -> Iterator[list[Event]]:
    iterator = iter(events)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk


def _table() -> str:
    from console.models import MessageEvent

    return connection.ops.quote_name(MessageEvent._meta.db_table)


def bulk_load(events: Iterable[Event], chunk: int = 100_000) -> int:
    """Store ``events`` (any iterable, consumed lazily); returns how many were stored.

    Each chunk is committed on its own: a failure stops the load with the
    earlier chunks kept and raises (the caller knows how far it got from the
    rows already counted in the log line).
    """
    if chunk < 1:
        raise ValueError("chunk must be at least 1")
    table = _table()
    columns = ", ".join(connection.ops.quote_name(c) for c in COLUMNS)
    stored = 0
    for part in _chunks(events, chunk):
        with transaction.atomic(), connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                with cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                    for event in part:
                        copy.write_row(_row(event))
            else:
                placeholders = ", ".join(["%s"] * len(COLUMNS))
                cursor.executemany(f"INSERT INTO {table} ({columns}) VALUES ({placeholders})", sqlite_rows(part))
        stored += len(part)
    log.debug("history: %d events loaded", stored)
    return stored


@dataclass
class PurgeReport:
    deleted: int = 0
    batches: int = 0
    complete: bool = True
    cutoff: datetime | None = None


def purge_history(
    retention_days: int | None = None,
    *,
    batch: int = 10_000,
    budget: float = 60.0,
    now: datetime | None = None,
) -> PurgeReport:
    """Delete the events older than ``retention_days`` (default: the setting), ``batch`` rows at a time.

    Stops after ``budget`` seconds with ``complete=False``; the next run goes
    on. A retention of 0 keeps the history forever (nothing is deleted).
    """
    days = settings.ASE_HISTORY_RETENTION_DAYS if retention_days is None else retention_days
    if days < 0:
        raise ValueError("retention_days must be 0 (keep forever) or more")
    report = PurgeReport()
    if days == 0:
        return report
    report.cutoff = (now or timezone.now()) - timedelta(days=days)
    table = _table()
    deadline = time.monotonic() + budget
    sql = f"DELETE FROM {table} WHERE id IN (SELECT id FROM {table} WHERE at < %s LIMIT %s)"
    while True:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql, [connection.ops.adapt_datetimefield_value(report.cutoff), batch])
            deleted = cursor.rowcount
        report.deleted += deleted
        report.batches += 1
        if deleted < batch:
            break
        if time.monotonic() >= deadline:
            report.complete = False
            break
    if report.deleted:
        log.info(
            "history: %d events older than %s deleted in %d batches%s",
            report.deleted,
            report.cutoff.isoformat(),
            report.batches,
            "" if report.complete else " (budget reached, the next run goes on)",
        )
    return report
