"""The Reports pages of the console through Django's test client: the list, the launch form (operators only,
a forged POST from a viewer is refused), the report page with its data for the live progress and the charts.

The charts themselves are drawn in the browser: tests/test_console_browser.py launches a report in Chromium
and sees the progress, then the charts, from a real Celery worker running Spark.
"""

from __future__ import annotations

import json

import pytest

from console.models import AuditEntry, Report
from tests.test_api_reports import RESULTS, queued_report_ids

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def celery_queue(redis_available):
    import redis

    from tests.conftest import TEST_REDIS_URL

    client = redis.Redis.from_url(TEST_REDIS_URL)
    client.delete("celery")
    yield
    client.delete("celery")


def test_a_viewer_sees_the_reports_but_no_launch_form_and_a_forged_launch_is_refused(client_as, celery_queue):
    Report.objects.create(status=Report.Status.SUCCEEDED, events=7, parameters={"start": "2026-01-01T10:00:00+00:00",
                          "end": "2026-01-01T12:00:00+00:00", "services": ["beta"]})  # fmt: skip
    viewer = client_as("viewer")

    page = viewer.get("/reports/").content.decode()
    assert "Launch report" not in page and 'action="/reports/launch"' not in page
    assert "2026-01-01 10:00" in page and "beta" in page and "succeeded" in page
    assert 'href="/reports/"' in page, "the Reports link is in the navigation"

    forged = viewer.post("/reports/launch", {"start": "2026-01-01T10:00", "end": "2026-01-01T12:00"})
    assert forged.status_code == 403
    assert Report.objects.count() == 1 and queued_report_ids() == [] and not AuditEntry.objects.exists()


def test_an_operator_launches_a_report_from_the_form_and_lands_on_its_page(client_as, celery_queue):
    operator = client_as("operator")
    assert "Launch report" in operator.get("/reports/").content.decode()

    response = operator.post(
        "/reports/launch", {"start": "2026-01-01T10:00", "end": "2026-01-01T12:00", "services": "beta, alpha"}
    )

    report = Report.objects.get()
    assert (response.status_code, response["Location"]) == (302, f"/reports/{report.pk}/")
    assert report.parameters == {
        "start": "2026-01-01T10:00:00+00:00",
        "end": "2026-01-01T12:00:00+00:00",
        "services": ["alpha", "beta"],
    }
    assert report.requested_by.username == "operator-user"
    assert queued_report_ids() == [report.pk]
    assert AuditEntry.objects.get(action="report.start").succeeded
    page = operator.get(response["Location"]).content.decode()
    assert f'data-url="/api/reports/{report.pk}/"' in page and 'data-status="queued"' in page
    assert "waiting for a worker" in page


def test_bad_launch_parameters_show_the_reason_keep_the_form_and_save_nothing(client_as, celery_queue):
    response = client_as("operator").post(
        "/reports/launch", {"start": "2026-01-02T00:00", "end": "2026-01-01T00:00", "services": "beta"}
    )

    assert response.status_code == 400
    page = response.content.decode()
    assert "&#x27;end&#x27; must be after &#x27;start&#x27;" in page
    assert 'value="2026-01-02T00:00"' in page and 'value="beta"' in page
    assert not Report.objects.exists() and queued_report_ids() == [] and not AuditEntry.objects.exists()


def test_a_finished_report_page_carries_its_results_and_csv_links_for_the_charts(client_as):
    report = Report.objects.create(
        status=Report.Status.SUCCEEDED, stage="done", progress=1.0, events=42, results=RESULTS,
        parameters={"start": "2026-01-01T10:00:00+00:00", "end": "2026-01-01T12:00:00+00:00", "services": ["beta"]},
    )  # fmt: skip

    response = client_as("viewer").get(f"/reports/{report.pk}/")

    assert response.status_code == 200
    page = response.content.decode()
    assert "2026-01-01 10:00 → 2026-01-01 12:00 UTC · beta" in page
    data = json.loads(page.split('<script id="report-data" type="application/json">')[1].split("</script>")[0])
    assert data["results"]["latency"][0]["p95_ms"] == 4000
    assert data["csv"]["outcomes"] == f"/api/reports/{report.pk}/outcomes.csv"
    for chart in ("chart-outcomes", "chart-latency", "chart-attempts", "chart-reasons"):
        assert f'id="{chart}"' in page
    assert client_as("viewer").get("/reports/999999/").status_code == 404
