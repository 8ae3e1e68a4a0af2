"""Reports over the message history: the list with the launch form, and one report with its live progress,
then its charts, tables and CSV downloads (the page polls ``/api/reports/<id>/`` and draws the results)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from console import reports
from console.api.reports import ReportSerializer
from console.api.views import audited
from console.models import Report, ServiceUnit
from console.pages.access import require
from console.roles import Role
from console.spark_reports import COLUMNS

MAX_ROWS = 200
LOCAL_FORMAT = "%Y-%m-%dT%H:%M"


def _form_defaults() -> dict[str, str]:
    end = timezone.now().astimezone(UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)
    return {"start": (end - reports.DEFAULT_RANGE).strftime(LOCAL_FORMAT), "end": end.strftime(LOCAL_FORMAT)}


def _list(request: HttpRequest, form: dict[str, Any], error: str = "", status: int = 200) -> HttpResponse:
    rows = list(Report.objects.select_related("requested_by")[:MAX_ROWS])
    for report in rows:
        params = report.parameters or {}
        report.window = (_moment(params.get("start")), _moment(params.get("end")))  # type: ignore[attr-defined]
    context = {
        "reports": rows,
        "services": list(ServiceUnit.objects.order_by("service").values_list("service", flat=True)),
        "form": form,
        "error": error,
    }
    return render(request, "console/reports.html", context, status=status)


@require_GET
@require(Role.VIEWER)
def report_list(request: HttpRequest) -> HttpResponse:
    return _list(request, {**_form_defaults(), "services": ""})


@require_POST
@require(Role.OPERATOR)
def report_launch(request: HttpRequest) -> HttpResponse:
    """Launch from the form: start/end as UTC date-times (``datetime-local``), services comma-separated."""
    form = {key: request.POST.get(key, "").strip() for key in ("start", "end", "services")}
    raw = {"start": form["start"], "end": form["end"], "services": form["services"]}
    try:
        parameters = reports.parse_parameters({k: v for k, v in raw.items() if v})
    except reports.InvalidReportParameters as exc:
        return _list(request, form, str(exc), status=400)
    report = audited(request, "report.start", parameters, lambda: reports.start_report(parameters, request.user))
    return redirect("console:report", report_id=report.pk)


@require_GET
@require(Role.VIEWER)
def report_detail(request: HttpRequest, report_id: int) -> HttpResponse:
    report = Report.objects.select_related("requested_by").filter(pk=report_id).first()
    if report is None:
        raise Http404("no such report")
    params = report.parameters or {}
    context = {
        "report": report,
        "data": ReportSerializer(report).data,
        "start": _moment(params.get("start")),
        "end": _moment(params.get("end")),
        "services": params.get("services") or [],
        "columns": {name: list(columns) for name, columns in COLUMNS.items()},
    }
    return render(request, "console/report.html", context)


def _moment(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None
