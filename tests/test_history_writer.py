"""The history writer process (console.history_writer): a real child process writing a real SQLite
file that holds the model's own table; the recorder handing it its batches."""

from __future__ import annotations

import gc
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.core.checks import run_checks
from django.db import connection
from django.db.utils import ConnectionHandler

from ase_engine.history import Event, EventKind
from console.history import BufferedRecorder, WriterStore, make_store, store_in_thread
from console.history_store import COLUMNS, sqlite_rows
from console.history_writer import HistoryWriterError, WriterProcess
from console.models import MessageEvent

AT = datetime(2026, 3, 1, 12, 0, 0, 250_000, tzinfo=UTC)
TABLE = connection.ops.quote_name(MessageEvent._meta.db_table)


@pytest.fixture
def history_file(tmp_path: Path, django_db_blocker: Any) -> Path:
    """A SQLite file holding the history table as the model makes it (indexes, CHECK constraints), in WAL;
    not the test database, which is PostgreSQL in CI."""
    path = tmp_path / "history.sqlite3"
    db = ConnectionHandler({"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(path)}})["default"]
    with django_db_blocker.unblock():
        with db.schema_editor() as editor:
            editor.create_model(MessageEvent)
        with db.cursor() as cursor:
            cursor.execute("PRAGMA journal_mode=WAL")
        db.close()
    return path


@pytest.fixture
def writer(history_file: Path) -> Iterator[WriterProcess]:
    process = WriterProcess(str(history_file), TABLE, _quoted_columns(), timeout=5)
    yield process
    process.close()


def _quoted_columns() -> list[str]:
    return [f'"{column}"' for column in COLUMNS]


def _events(n: int, prefix: str = "m", **fields: object) -> list[Event]:
    at_ms = int(AT.timestamp() * 1000)
    return [
        Event(f"{prefix}{i}", "orders", EventKind.ATTEMPT, at_ms=at_ms + i, **fields)  # type: ignore[arg-type]
        for i in range(n)
    ]


def _stored(path: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as db:
        return db.execute(f"SELECT message_id, kind, at, attempt, target_status FROM {TABLE} ORDER BY id").fetchall()


def _ended(pid: int, timeout: float = 10.0) -> bool:
    """The process is gone or a zombie (its parent may be gone too, and nobody reaps it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def test_writer_process_stores_each_batch_and_answers_how_many(writer, history_file):
    assert writer.store(sqlite_rows(_events(3, target_status=503))) == 3
    assert writer.store(sqlite_rows(_events(2, prefix="n"))) == 2

    rows = _stored(history_file)
    assert [r[0] for r in rows] == ["m0", "m1", "m2", "n0", "n1"]
    assert rows[0] == ("m0", "attempt", "2026-03-01 12:00:00.250000", 0, 503)
    assert rows[4][4] is None


def test_what_the_writer_process_stored_reads_back_through_django_as_recorded(writer, history_file, django_db_blocker):
    events = _events(2, target_status=422, duration_ms=31, size=42)
    writer.store(sqlite_rows(events))

    db = ConnectionHandler({"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(history_file)}})["default"]
    with django_db_blocker.unblock():
        with db.cursor() as cursor:
            cursor.execute(f"SELECT at FROM {TABLE} ORDER BY id")
            times = [row[0] for row in cursor.fetchall()]
        db.close()
    # Django's SQLite converter reads the text back to the instant recorded, to the millisecond.
    assert [t.replace(tzinfo=UTC) for t in times] == [AT, AT.replace(microsecond=251_000)]


def test_a_batch_the_database_refuses_is_reported_and_none_of_it_is_kept(writer, history_file):
    writer.store(sqlite_rows(_events(1, prefix="before")))
    first_pid = writer.pid
    good, bad = _events(2, prefix="good"), _events(1, prefix="bad", attempt=-1)  # attempt is a positive integer

    with pytest.raises(HistoryWriterError, match="CHECK constraint failed"):
        writer.store(sqlite_rows([good[0], bad[0], good[1]]))

    assert [r[0] for r in _stored(history_file)] == ["before0"]
    assert writer.store(sqlite_rows(good)) == 2  # the same child goes on
    assert writer.pid == first_pid


def test_a_writer_process_killed_between_batches_is_replaced_without_losing_any(writer, history_file):
    writer.store(sqlite_rows(_events(1, prefix="first")))
    killed = writer.pid
    assert killed is not None
    os.kill(killed, signal.SIGKILL)
    assert _ended(killed)

    assert writer.store(sqlite_rows(_events(1, prefix="after"))) == 1

    assert writer.pid not in (None, killed)
    assert [r[0] for r in _stored(history_file)] == ["first0", "after0"]


def test_replacing_killed_writer_processes_closes_their_pipes(writer):
    writer.store(sqlite_rows(_events(1, prefix="first")))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)  # a pipe file left to the garbage collector says so
        for round_no in range(3):
            killed = writer.pid
            assert killed is not None
            os.kill(killed, signal.SIGKILL)
            assert _ended(killed)
            writer.store(sqlite_rows(_events(1, prefix=f"r{round_no}-")))
        gc.collect()

    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []


def test_a_writer_process_killed_during_a_batch_costs_that_batch_and_the_next_starts_a_new_one(writer, history_file):
    writer.store(sqlite_rows(_events(1, prefix="first")))
    killed = writer.pid
    assert killed is not None
    failures: list[BaseException] = []
    lock = sqlite3.connect(history_file, isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")  # the child's next transaction waits for this one (busy timeout 5 s)

    def store_lost() -> None:
        try:
            writer.store(sqlite_rows(_events(1, prefix="lost")))
        except HistoryWriterError as exc:
            failures.append(exc)

    storing = threading.Thread(target=store_lost)
    storing.start()
    time.sleep(0.5)
    os.kill(killed, signal.SIGKILL)
    storing.join(10)
    lock.execute("ROLLBACK")
    lock.close()

    assert [str(f) for f in failures] == ["the history writer process ended (exit code -9)"]
    assert writer.store(sqlite_rows(_events(1, prefix="after"))) == 1
    assert writer.pid not in (None, killed)
    assert [r[0] for r in _stored(history_file)] == ["first0", "after0"]


def test_the_writer_process_ends_when_its_parent_is_killed(history_file):
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from console.history_writer import WriterProcess\n"
            f"w = WriterProcess({str(history_file)!r}, {TABLE!r}, {_quoted_columns()!r}, 5)\n"
            "w.store([('p0', 'orders', 'posted', '2026-03-01 12:00:00', '', 0, '', None, None, None, '', '')])\n"
            "print(w.pid, flush=True)\n"
            "time.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[1],
        text=True,
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert not _ended(child, timeout=0.5)
        parent.kill()
        parent.wait(10)

        assert _ended(child)
    finally:
        parent.kill()
        parent.wait(10)
    assert [r[0] for r in _stored(history_file)] == ["p0"]


def test_the_writer_process_ignores_sigterm_and_ends_when_its_input_closes(writer, history_file):
    writer.store(sqlite_rows(_events(1)))
    child = writer.pid
    assert child is not None
    os.kill(child, signal.SIGTERM)  # as a service manager stopping the process group sends it
    assert not _ended(child, timeout=1.0)
    assert writer.store(sqlite_rows(_events(1, prefix="late"))) == 1

    writer.close()

    assert _ended(child, timeout=5.0)


def test_recorder_hands_its_batches_to_the_writer_process(history_file):
    store = WriterStore(target=(str(history_file), TABLE, _quoted_columns()), timeout=5)
    recorder = BufferedRecorder(interval=60, store=store)  # only flush() writes
    for event in _events(3):
        recorder.record(event)

    recorder.flush()

    assert [r[0] for r in _stored(history_file)] == ["m0", "m1", "m2"]
    assert store.writer is not None
    child = store.writer.pid
    assert child is not None
    recorder.close()
    assert _ended(child, timeout=5.0)


def test_recorder_logs_a_batch_its_writer_process_refused_and_goes_on(history_file, caplog):
    store = WriterStore(target=(str(history_file), TABLE, _quoted_columns()), timeout=5)
    recorder = BufferedRecorder(interval=60, store=store)
    try:
        recorder.record(_events(1, prefix="bad", attempt=-1)[0])
        recorder.flush()
        recorder.record(_events(1, prefix="good")[0])
        recorder.flush()
    finally:
        recorder.close()

    failed = [r for r in caplog.records if r.name == "ase.history"]
    assert len(failed) == 1
    assert failed[0].getMessage() == (
        "1 history events not stored: HistoryWriterError: IntegrityError: CHECK constraint failed: attempt"
    )
    assert [r[0] for r in _stored(history_file)] == ["good0"]


def test_auto_writes_through_a_process_on_a_sqlite_file_and_in_the_thread_on_postgresql():
    store = make_store("auto")
    if connection.vendor == "sqlite":  # the test database is a file
        assert isinstance(store, WriterStore)
    else:
        assert store is store_in_thread
    assert make_store("thread") is store_in_thread
    assert isinstance(make_store("process"), WriterStore)


@pytest.mark.parametrize("value", ["fast", "Process", ""])
def test_system_checks_refuse_an_unknown_history_writer(settings, value):
    settings.ASE_HISTORY_WRITER = value

    assert "ase.E015" in [message.id for message in run_checks()]


def test_system_checks_refuse_a_writer_process_unless_the_database_is_a_sqlite_file(settings):
    settings.ASE_HISTORY_WRITER = "process"

    refused = "ase.E016" in [message.id for message in run_checks()]

    assert refused is (connection.vendor != "sqlite")
