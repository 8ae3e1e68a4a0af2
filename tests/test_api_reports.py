"""``/api/reports/``: launching a history report (queued on the real Celery broker, Redis), reading it, its CSV.

The Spark run itself is covered by tests/test_reports.py and tests/test_reports_worker.py, and the whole
path (console -> Celery worker -> Spark -> charts and CSV) by tests/test_console_browser.py.
"""

from __future__ import annotations

import json

import pytest
import redis

from console.models import AuditEntry, Report
from tests.conftest import TEST_REDIS_URL

pytestmark = pytest.mark.django_db(transaction=True)

RESULTS = {
    "outcomes": [
        {"service": "beta", "hour": "2026-01-01T10:00:00Z", "acked": 4, "faulted": 0, "errored": 0,
         "timed_out": 1, "expired": 0},
    ],
    "latency": [{"service": "beta", "messages": 4, "p50_ms": 2000, "p95_ms": 4000, "p99_ms": 4000,
                 "mean_ms": 2500.0, "max_ms": 4000}],
    "attempts": [{"service": "beta", "attempts": 1, "messages": 5}],
    "retries": [],
    "reasons": [],
    "parking": [],
}  # fmt: skip


def queued_report_ids() -> list[int]:
    """Report ids of the ``run_report`` tasks waiting on the Celery broker (the test's Redis database)."""
    client = redis.Redis.from_url(TEST_REDIS_URL)
    ids = []
    for raw in client.lrange("celery", 0, -1):
        headers = json.loads(raw)["headers"]
        if headers["task"] == "console.tasks.run_report":
            ids.append(int(headers["argsrepr"].strip("(),")))
    return ids


@pytest.fixture
def celery_queue(redis_available):
    client = redis.Redis.from_url(TEST_REDIS_URL)
    client.delete("celery")
    yield
    client.delete("celery")  # no worker of a later test should pick these up


def test_an_operator_launches_a_report_which_is_queued_on_celery_and_audited(api, celery_queue):
    response = api("operator").post(
        "/api/reports/",
        {"start": "2026-01-01T10:00:00Z", "end": "2026-01-01T12:00", "services": ["beta", "alpha"]},
        format="json",
    )

    assert response.status_code == 202, response.content
    body = response.json()
    assert body["status"] == "queued" and body["progress"] == 0.0 and body["requested_by"] == "operator-user"
    assert body["parameters"] == {
        "start": "2026-01-01T10:00:00+00:00",
        "end": "2026-01-01T12:00:00+00:00",
        "services": ["alpha", "beta"],
    }
    assert body["results"] == {} and body["csv"] == {}
    assert Report.objects.get().pk == body["id"]
    assert queued_report_ids() == [body["id"]]
    entry = AuditEntry.objects.get(action="report.start")
    assert (entry.username, entry.succeeded, entry.parameters["services"]) == ("operator-user", True, ["alpha", "beta"])


def test_a_report_without_parameters_covers_the_last_24_hours_of_every_service(api, celery_queue):
    body = api("operator").post("/api/reports/", {}, format="json").json()

    from datetime import datetime

    start, end = (datetime.fromisoformat(body["parameters"][k]) for k in ("start", "end"))
    assert (end - start).total_seconds() == 24 * 3600
    assert body["parameters"]["services"] == []


def test_a_viewer_cannot_launch_a_report(api, celery_queue):
    response = api("viewer").post("/api/reports/", {}, format="json")

    assert response.status_code == 403
    assert response.json()["error"] == "You do not have permission to perform this action."
    assert not Report.objects.exists() and queued_report_ids() == []


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"start": "yesterday"}, "start: Datetime has wrong format"),
        ({"start": "2026-01-02T00:00Z", "end": "2026-01-01T00:00Z"}, "'end' must be after 'start'"),
        ({"services": "alpha"}, 'services: Expected a list of items but got type "str".'),
        ({"service": ["alpha"]}, "unknown parameters: service (expected start, end, services)"),
    ],
)
def test_bad_report_parameters_get_400_with_the_reason_and_nothing_is_saved_or_queued(
    api, celery_queue, params, message
):
    response = api("operator").post("/api/reports/", params, format="json")

    assert response.status_code == 400, response.content
    assert message in response.json()["error"]
    assert "Traceback" not in response.content.decode()
    assert not Report.objects.exists() and queued_report_ids() == []
    assert not AuditEntry.objects.exists()


def test_a_viewer_lists_reports_newest_first_by_pages_and_reads_one_with_its_results_and_csv_links(api):
    older = Report.objects.create(parameters={"start": "a", "end": "b", "services": []})
    done = Report.objects.create(
        status=Report.Status.SUCCEEDED, stage="done", progress=1.0, events=42, results=RESULTS,
        parameters={"start": "2026-01-01T10:00:00+00:00", "end": "2026-01-01T12:00:00+00:00", "services": ["beta"]},
    )  # fmt: skip
    viewer = api("viewer")

    page = viewer.get("/api/reports/?limit=1").json()
    assert page["count"] == 2 and [r["id"] for r in page["results"]] == [done.pk]
    assert "results" not in page["results"][0], "the list stays light: results are on the report itself"
    assert [r["id"] for r in viewer.get(page["next"]).json()["results"]] == [older.pk]

    detail = viewer.get(f"/api/reports/{done.pk}/").json()
    assert (detail["status"], detail["stage"], detail["progress"], detail["events"]) == ("succeeded", "done", 1.0, 42)
    assert detail["results"]["latency"][0]["p50_ms"] == 2000
    assert detail["csv"]["attempts"] == f"/api/reports/{done.pk}/attempts.csv"
    assert viewer.get(f"/api/reports/{older.pk}/").json()["csv"] == {}


def test_a_finished_report_downloads_as_csv_and_an_unfinished_one_is_refused_in_json(api):
    done = Report.objects.create(status=Report.Status.SUCCEEDED, results=RESULTS)
    running = Report.objects.create(status=Report.Status.RUNNING, stage="stage 2 of 5")
    viewer = api("viewer")

    response = viewer.get(f"/api/reports/{done.pk}/attempts.csv")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert response["Content-Disposition"] == f'attachment; filename="report-{done.pk}-attempts.csv"'
    assert response.content.decode() == "service,attempts,messages\nbeta,1,5\n"
    assert viewer.get(f"/api/reports/{done.pk}/retries.csv").content.decode() == (
        "service,retried,succeeded,success_rate\n"
    )

    refused = viewer.get(f"/api/reports/{running.pk}/outcomes.csv")
    assert refused.status_code == 409
    assert refused["Content-Type"] == "application/json"
    assert refused.json() == {"error": f"Report {running.pk} is running: it has no results to download."}
    unknown = viewer.get(f"/api/reports/{done.pk}/nonsense.csv")
    assert unknown.status_code == 404 and "one of outcomes, latency" in unknown.json()["error"]
    assert viewer.get("/api/reports/999999/outcomes.csv").status_code == 404
    assert viewer.get("/api/reports/999999/").status_code == 404
