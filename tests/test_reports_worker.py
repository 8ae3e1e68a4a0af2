"""A report launched as the console and the API do (start_report), run by a real Celery worker with Spark."""

from __future__ import annotations

import time

import pytest

from tests.fixtures.history import WINDOW_END, WINDOW_START, history

pytestmark = pytest.mark.slow


def test_a_launched_report_runs_on_a_celery_worker_with_progress_then_results(workers, worker_env):
    from console.history_store import bulk_load
    from console.models import Report
    from console.reports import report_csv, start_report

    worker_env.update(SPARK_MASTER="local[2]", ASE_REPORT_PARTITIONS="2")
    bulk_load(history())
    workers()

    report = start_report({"start": WINDOW_START.isoformat(), "end": WINDOW_END.isoformat(), "services": ["beta"]})

    seen: list[tuple[str, float, str]] = []
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        report.refresh_from_db()
        seen.append((report.status, report.progress, report.stage))
        if report.status in (Report.Status.SUCCEEDED, Report.Status.FAILED):
            break
        time.sleep(0.2)
    assert report.status == Report.Status.SUCCEEDED, (report.error, seen[-5:])
    running = [(progress, stage) for status, progress, stage in seen if status == Report.Status.RUNNING]
    assert running, f"the report was never seen running: {seen[:5]}"
    assert any(0 < progress < 1 for progress, _ in running), running
    assert any("stage" in stage for _, stage in running), "progress follows the Spark stages"
    progresses = [progress for progress, _ in running]
    assert progresses == sorted(progresses), "progress only goes forward"
    assert report.results["outcomes"] == [
        {"service": "beta", "hour": "2026-01-01T10:00:00Z", "acked": 4, "faulted": 0, "errored": 0,
         "timed_out": 1, "expired": 0},
    ]  # fmt: skip
    assert report.results["latency"][0]["p50_ms"] == 2000
    assert report_csv(report, "attempts") == "service,attempts,messages\nbeta,1,5\n"
