"""Spark reports over the real history store (the test database, read by Spark over JDBC).

The history is tests/fixtures/history.py; every expected figure below is
computed by hand from the timeline in its docstring. percentile_approx returns
an element of the data (the smallest one with at least p x n values at or
below it), exact on sets this small.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.fixtures.history import WINDOW_END, WINDOW_START, history

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


@pytest.fixture(scope="module")
def spark() -> Any:
    """One Spark session (local[2]) for the whole test run: starting the JVM is the slow part."""
    import shutil

    if shutil.which("java") is None:
        from tests.conftest import unavailable

        unavailable("java (default-jre-headless) for Spark")
    from console.reports import spark_settings
    from console.spark_reports import spark_session

    config = spark_settings()
    config.master = "local[2]"
    config.partitions = 3
    return spark_session(config)


@pytest.fixture(scope="module")
def loaded(django_db_setup: Any, django_db_blocker: Any) -> Iterator[list[Any]]:
    """The hand-made history, stored by the project's bulk path into the test database, committed
    (Spark reads it through its own JDBC connections); removed after the module."""
    from console.history_store import bulk_load
    from console.models import MessageEvent, Report

    events = history()
    with django_db_blocker.unblock():
        MessageEvent.objects.all().delete()
        assert bulk_load(events, chunk=7) == len(events)
        yield events
        MessageEvent.objects.all().delete()
        Report.objects.all().delete()


def _run(params: dict[str, Any], django_db_blocker: Any) -> Any:
    from console.models import Report
    from console.reports import parse_parameters, run_report

    with django_db_blocker.unblock():
        report = Report.objects.create(parameters=parse_parameters(params))
        return run_report(report.pk)


@pytest.fixture(scope="module")
def report(spark: Any, loaded: list[Any], django_db_blocker: Any) -> Any:
    params = {"start": WINDOW_START.isoformat(), "end": WINDOW_END.isoformat()}
    done = _run(params, django_db_blocker)
    assert done.status == "succeeded", done.error
    return done


def test_report_reads_only_the_events_inside_the_window(report, loaded):
    inside = [e for e in loaded if WINDOW_START.timestamp() * 1000 <= e.at_ms < WINDOW_END.timestamp() * 1000]
    assert report.events == len(inside) < len(loaded)
    assert (report.status, report.progress, report.stage) == ("succeeded", 1.0, "done")
    assert report.started_at <= report.finished_at


def test_outcomes_are_counted_per_service_per_hour(report):
    assert report.results["outcomes"] == [
        {"service": "alpha", "hour": "2026-01-01T10:00:00Z", "acked": 11, "faulted": 3, "errored": 0,
         "timed_out": 0, "expired": 0},
        {"service": "alpha", "hour": "2026-01-01T11:00:00Z", "acked": 0, "faulted": 1, "errored": 2,
         "timed_out": 0, "expired": 1},
        {"service": "beta", "hour": "2026-01-01T10:00:00Z", "acked": 4, "faulted": 0, "errored": 0,
         "timed_out": 1, "expired": 0},
    ]  # fmt: skip


def test_post_to_ack_latency_percentiles_per_service(report):
    rows = {r["service"]: r for r in report.results["latency"]}
    # alpha: 100..900 ms and 10 000 ms (r1, acked on its retry); the edge message was posted before the window
    assert rows["alpha"] == {"service": "alpha", "messages": 10, "p50_ms": 500, "p95_ms": 10_000,
                             "p99_ms": 10_000, "mean_ms": 1450.0, "max_ms": 10_000}  # fmt: skip
    assert rows["beta"] == {"service": "beta", "messages": 4, "p50_ms": 2000, "p95_ms": 4000,
                            "p99_ms": 4000, "mean_ms": 2500.0, "max_ms": 4000}  # fmt: skip


def test_attempts_distribution_per_service(report):
    assert report.results["attempts"] == [
        {"service": "alpha", "attempts": 1, "messages": 13},
        {"service": "alpha", "attempts": 2, "messages": 2},
        {"service": "alpha", "attempts": 3, "messages": 1},
        {"service": "beta", "attempts": 1, "messages": 5},
    ]


def test_retry_success_rate_counts_messages_with_a_scheduled_retry(report):
    assert report.results["retries"] == [{"service": "alpha", "retried": 2, "succeeded": 1, "success_rate": 0.5}]


def test_top_fault_and_error_reasons_with_target_status(report):
    assert report.results["reasons"] == [
        {"service": "alpha", "kind": "fault", "target_status": 422, "reason": "no such product", "count": 3},
        {"service": "alpha", "kind": "error", "target_status": 500, "reason": "HTTP 500: boom", "count": 2},
        {"service": "alpha", "kind": "fault", "target_status": 400, "reason": "bad request", "count": 1},
    ]


def test_time_parked_runs_from_the_latest_parking_to_the_purge_or_recycle(report):
    assert report.results["parking"] == [
        {"service": "alpha", "area": "alpha_error", "exit": "recycled", "messages": 1,
         "mean_s": 1800.0, "p50_s": 1800.0, "p95_s": 1800.0, "max_s": 1800.0},
        {"service": "alpha", "area": "alpha_expired", "exit": "purged", "messages": 1,
         "mean_s": 1800.0, "p50_s": 1800.0, "p95_s": 1800.0, "max_s": 1800.0},
        {"service": "alpha", "area": "alpha_fault", "exit": "purged", "messages": 2,
         "mean_s": 2190.0, "p50_s": 1740.0, "p95_s": 2640.0, "max_s": 2640.0},
        {"service": "alpha", "area": "alpha_fault", "exit": "recycled", "messages": 1,
         "mean_s": 900.0, "p50_s": 900.0, "p95_s": 900.0, "max_s": 900.0},
    ]  # fmt: skip


def test_services_parameter_keeps_only_those_services(spark, loaded, django_db_blocker):
    done = _run(
        {"start": WINDOW_START.isoformat(), "end": WINDOW_END.isoformat(), "services": ["beta"]}, django_db_blocker
    )

    assert done.status == "succeeded", done.error
    for name, rows in done.results.items():
        assert {r["service"] for r in rows} <= {"beta"}, name
    assert done.results["attempts"] == [{"service": "beta", "attempts": 1, "messages": 5}]
    assert done.results["reasons"] == [] and done.results["parking"] == []


def test_report_csv_has_the_columns_and_one_line_per_row(report):
    from console.reports import report_csv

    text = report_csv(report, "reasons")

    assert text.splitlines() == [
        "service,kind,target_status,reason,count",
        "alpha,fault,422,no such product,3",
        "alpha,error,500,HTTP 500: boom,2",
        "alpha,fault,400,bad request,1",
    ]


LOAD_HISTORY = """
import django
django.setup()
from console.history_store import bulk_load
from tests.fixtures.history import history
print(bulk_load(history(), chunk=10))
"""


def test_a_sqlite_history_store_gives_the_same_reports(spark, report, tmp_path):
    """SQLite, the one-machine default: its own file, migrated and loaded by the project's own commands."""
    import os
    import subprocess
    import sys

    from console.spark_reports import HistorySource, Window, run_reports
    from tests.conftest import ROOT

    db = tmp_path / "ase.sqlite3"
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{db}", "ASE_DATA_DIR": str(tmp_path)}
    env["DJANGO_SETTINGS_MODULE"] = "console.settings"
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True, timeout=180)
    loaded = subprocess.run(
        [sys.executable, "-c", LOAD_HISTORY], cwd=ROOT, env=env, check=True, timeout=120, capture_output=True, text=True
    )
    assert loaded.stdout.strip() == str(len(history()))

    output = run_reports(
        spark,
        HistorySource(f"jdbc:sqlite:{db}", "org.sqlite.JDBC", "console_messageevent"),
        Window(WINDOW_START, WINDOW_END),
        partitions=2,
    )

    assert output.events == report.events
    assert output.results == report.results


def test_a_report_that_cannot_read_the_history_fails_with_the_reason_and_no_stack_trace(
    spark, loaded, django_db_blocker, settings, caplog
):
    settings.ASE_REPORT_JDBC_URL = "jdbc:postgresql://127.0.0.1:9/nothing"

    with caplog.at_level("ERROR", logger="ase.reports"):
        done = _run({"start": WINDOW_START.isoformat(), "end": WINDOW_END.isoformat()}, django_db_blocker)

    assert done.status == "failed"
    assert "connect" in done.error.lower() and "\n" not in done.error, done.error
    assert done.results == {} and done.finished_at is not None
    (record,) = [r for r in caplog.records if r.name == "ase.reports" and r.levelname == "ERROR"]
    assert record.getMessage() == f"report {done.pk} failed: {done.error}" and not record.exc_info
