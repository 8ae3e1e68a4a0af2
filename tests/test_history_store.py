"""The history store in bulk: the loader (COPY on PostgreSQL) and the retention purge."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core.checks import run_checks
from django.db.utils import ConnectionHandler

from ase_engine.history import Event, EventKind
from console.history_store import _sqlite_at, bulk_load, purge_history, sqlite_rows
from console.models import MessageEvent

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _event(mid: str, days_ago: float, kind: EventKind = EventKind.POSTED, **fields: object) -> Event:
    at = NOW - timedelta(days=days_ago)
    return Event(mid, "orders", kind, at_ms=int(at.timestamp() * 1000), **fields)  # type: ignore[arg-type]


def test_bulk_load_stores_every_event_with_all_its_fields():
    events = [
        _event("m1", 0, EventKind.POSTED, area="orders", size=42),
        _event(
            "m1",
            0,
            EventKind.FAULT,
            area="orders_fault",
            attempt=2,
            target_status=422,
            duration_ms=31,
            detail="no such product",
            instance="w1@host",
        ),
        _event("m2", 1, EventKind.PARKED, area="orders_error", outcome_code="SE-ASE-E0020"),
    ]

    assert bulk_load(events, chunk=2) == 3

    rows = list(MessageEvent.objects.order_by("id"))
    assert [(r.message_id, r.kind, r.area) for r in rows] == [
        ("m1", "posted", "orders"),
        ("m1", "fault", "orders_fault"),
        ("m2", "parked", "orders_error"),
    ]
    fault = rows[1]
    assert (fault.attempt, fault.target_status, fault.duration_ms, fault.detail, fault.instance) == (
        2,
        422,
        31,
        "no such product",
        "w1@host",
    )
    assert rows[0].size == 42 and rows[0].target_status is None
    assert rows[0].at == NOW and rows[2].at == NOW - timedelta(days=1)
    assert rows[2].outcome_code == "SE-ASE-E0020"


@pytest.mark.parametrize(
    "at_ms",
    [0, 1_000, 999, 1_772_366_400_000, 1_772_366_400_001, 1_772_366_400_120, 1_772_366_459_999, 4_102_444_799_999],
)
def test_sqlite_time_of_an_event_is_the_text_django_stores(at_ms):
    # The recorder formats ``at`` itself on SQLite; Django must read, filter and order it as its own.
    sqlite = ConnectionHandler({"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}})["default"]
    stored_by_django = sqlite.ops.adapt_datetimefield_value(datetime.fromtimestamp(at_ms / 1000, tz=UTC))

    assert _sqlite_at(at_ms) == stored_by_django


def test_sqlite_time_of_an_event_follows_a_database_time_zone_other_than_utc():
    paris = ConnectionHandler(
        {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:", "TIME_ZONE": "Europe/Paris"}}
    )["default"]
    event = _event("m1", 0)  # 12:00 UTC, 13:00 in Paris

    (row,) = sqlite_rows([event], paris)

    assert row[3] == paris.ops.adapt_datetimefield_value(NOW) == "2026-03-01 13:00:00"


def test_bulk_load_takes_a_generator_and_an_empty_one():
    assert bulk_load(_event(f"g{i}", 0) for i in range(5)) == 5
    assert bulk_load(iter(())) == 0
    assert MessageEvent.objects.count() == 5


def test_bulk_load_refuses_a_chunk_below_one():
    with pytest.raises(ValueError, match="chunk"):
        bulk_load([_event("m", 0)], chunk=0)


def test_purge_deletes_only_events_older_than_the_retention_in_batches():
    bulk_load([_event(f"old{i}", 10) for i in range(5)] + [_event("new", 6.9), _event("today", 0)])

    report = purge_history(7, batch=2, now=NOW)

    assert (report.deleted, report.batches, report.complete) == (5, 3, True)
    assert report.cutoff == NOW - timedelta(days=7)
    assert sorted(MessageEvent.objects.values_list("message_id", flat=True)) == ["new", "today"]


def test_purge_stops_at_its_budget_and_the_next_run_goes_on():
    bulk_load([_event(f"old{i}", 30) for i in range(5)])

    first = purge_history(7, batch=2, budget=0, now=NOW)
    assert (first.deleted, first.complete) == (2, False)
    assert MessageEvent.objects.count() == 3

    second = purge_history(7, batch=10, now=NOW)
    assert (second.deleted, second.complete) == (3, True)
    assert MessageEvent.objects.count() == 0


def test_retention_of_zero_keeps_the_history_forever():
    bulk_load([_event("ancient", 3650)])

    assert purge_history(0, now=NOW).deleted == 0
    assert MessageEvent.objects.count() == 1


def test_purge_task_applies_the_retention_setting(settings):
    from console.tasks import purge_history as task

    settings.ASE_HISTORY_RETENTION_DAYS = 2
    settings.ASE_HISTORY_PURGE_BATCH = 1
    now = datetime.now(UTC)
    bulk_load(
        [
            Event("old", "orders", EventKind.POSTED, at_ms=int((now - timedelta(days=3)).timestamp() * 1000)),
            Event("older", "orders", EventKind.ACKED, at_ms=int((now - timedelta(days=4)).timestamp() * 1000)),
            Event("fresh", "orders", EventKind.POSTED, at_ms=int((now - timedelta(days=1)).timestamp() * 1000)),
        ]
    )

    assert task() == {"deleted": 2, "batches": 3, "complete": True}
    assert list(MessageEvent.objects.values_list("message_id", flat=True)) == ["fresh"]


def test_the_history_purge_is_a_beat_task_of_the_celery_app(settings):
    from console.celery import app

    entry = settings.CELERY_BEAT_SCHEDULE["ase-history-purge"]
    assert entry["task"] in app.tasks
    assert entry["schedule"] == settings.ASE_HISTORY_PURGE_INTERVAL > 0


@pytest.mark.parametrize(
    ("setting", "value", "check_id"),
    [
        ("ASE_HISTORY_RETENTION_DAYS", -1, "ase.E010"),
        ("ASE_HISTORY_PURGE_INTERVAL", 0, "ase.E011"),
        ("ASE_HISTORY_PURGE_BATCH", 0, "ase.E012"),
        ("ASE_REPORT_PARTITIONS", 0, "ase.E013"),
        ("ASE_REPORT_JDBC_URL", "postgres://db/ase", "ase.E014"),
    ],
)
def test_system_checks_refuse_unusable_history_and_report_settings(settings, setting, value, check_id):
    setattr(settings, setting, value)

    assert check_id in [message.id for message in run_checks()]


def test_system_checks_accept_the_defaults():
    assert not [m for m in run_checks() if str(m.id).startswith("ase.E01")]
