"""Launching a report: parameters, permissions, the Report row, enqueuing after commit (no Spark here)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def test_start_report_saves_a_queued_report_and_enqueues_it_once_committed(django_capture_on_commit_callbacks):
    from console.models import Report
    from console.reports import start_report

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        report = start_report({"start": "2026-01-01T10:00:00Z", "end": "2026-01-01T12:00", "services": ["b", "a"]})

    assert len(callbacks) == 1, "enqueued only after the transaction commits"
    saved = Report.objects.get(pk=report.pk)
    assert (saved.status, saved.progress, saved.requested_by) == ("queued", 0.0, None)
    assert saved.parameters == {
        "start": "2026-01-01T10:00:00+00:00",
        "end": "2026-01-01T12:00:00+00:00",
        "services": ["a", "b"],
    }


def test_start_report_records_who_asked_and_refuses_a_viewer(django_user_model):
    from django.core.exceptions import PermissionDenied

    from console.models import Report
    from console.reports import start_report
    from console.roles import Role, grant

    operator = django_user_model.objects.create_user("op")
    grant(operator, Role.OPERATOR)
    viewer = django_user_model.objects.create_user("viewer")
    grant(viewer, Role.VIEWER)

    assert start_report({}, user=operator).requested_by == operator
    with pytest.raises(PermissionDenied):
        start_report({}, user=viewer)
    assert Report.objects.count() == 1


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"start": "yesterday"}, "'start' is not an ISO 8601 date-time"),
        ({"start": "2026-01-02T00:00Z", "end": "2026-01-01T00:00Z"}, "'end' must be after 'start'"),
        ({"services": [1, 2]}, "'services' must be a list of service names"),
        ({"service": ["a"]}, "unknown parameters: service"),
    ],
)
def test_bad_report_parameters_are_refused_with_the_reason_and_nothing_saved(params, message):
    from console.models import Report
    from console.reports import InvalidReportParameters, start_report

    with pytest.raises(InvalidReportParameters, match=message):
        start_report(params)
    assert not Report.objects.exists()


def test_a_report_that_is_not_queued_is_not_run_again():
    from console.models import Report
    from console.reports import run_report

    done = Report.objects.create(status=Report.Status.SUCCEEDED, results={"outcomes": []})

    assert run_report(done.pk).results == {"outcomes": []}
