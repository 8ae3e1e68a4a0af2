"""Reports over the message history: one function to launch, one to run, one to export.

``start_report`` validates the parameters, saves a ``Report`` row and enqueues
``console.tasks.run_report`` once the transaction commits; the REST API and the
console call it. ``run_report`` runs the Spark job (``console.spark_reports``)
on the history store this process's database points at, saving the stage and
progress as the Spark stages go, then the results; the Celery task and
``manage.py ase_report`` call it. ``report_csv`` gives one report as CSV.
"""

from __future__ import annotations

import csv
import io
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import PermissionDenied
from django.db import connection, connections, transaction
from django.utils import timezone

from console.models import MessageEvent, Report
from console.roles import Role, has_role
from console.spark_reports import COLUMNS, REPORTS, HistorySource, SparkSettings, Window, run_reports, spark_session

log = logging.getLogger("ase.reports")

DEFAULT_RANGE = timedelta(hours=24)
MAX_SERVICES = 200


class InvalidReportParameters(ValueError):
    """Parameters a report cannot run with; the message says which and why."""


def _moment(value: Any, name: str) -> datetime:
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise InvalidReportParameters(f"'{name}' is not an ISO 8601 date-time: {value!r}") from None
    else:
        raise InvalidReportParameters(f"'{name}' must be an ISO 8601 date-time")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def parse_parameters(params: dict[str, Any] | None) -> dict[str, Any]:
    """The normalised parameters: ``start``/``end`` as ISO 8601 UTC, ``services`` as a sorted list.

    Defaults: the last 24 hours, every service. A date-time without a zone is UTC.
    """
    params = dict(params or {})
    unknown = sorted(set(params) - {"start", "end", "services"})
    if unknown:
        raise InvalidReportParameters(f"unknown parameters: {', '.join(unknown)} (expected start, end, services)")
    end = _moment(params["end"], "end") if params.get("end") else timezone.now().astimezone(UTC)
    start = _moment(params["start"], "start") if params.get("start") else end - DEFAULT_RANGE
    if end <= start:
        raise InvalidReportParameters("'end' must be after 'start'")
    services = params.get("services") or []
    if isinstance(services, str):
        services = [s for s in services.split(",") if s.strip()]
    if not isinstance(services, list | tuple) or not all(isinstance(s, str) and s.strip() for s in services):
        raise InvalidReportParameters("'services' must be a list of service names")
    services = sorted({s.strip() for s in services})
    if len(services) > MAX_SERVICES or any(len(s) > 200 for s in services):
        raise InvalidReportParameters(f"'services' takes at most {MAX_SERVICES} names of at most 200 characters")
    return {"start": start.isoformat(), "end": end.isoformat(), "services": services}


def start_report(params: dict[str, Any] | None, user: AbstractBaseUser | AnonymousUser | None = None) -> Report:
    """Save a queued report and run it on a Celery worker once the transaction commits.

    ``user`` (when given) must be an operator; raises ``PermissionDenied``
    otherwise, ``InvalidReportParameters`` for bad parameters.
    """
    if user is not None and not has_role(user, Role.OPERATOR):
        raise PermissionDenied("launching a report needs the operator role")
    parameters = parse_parameters(params)
    requested_by = user if user is not None and user.is_authenticated else None
    with transaction.atomic():
        report = Report.objects.create(parameters=parameters, requested_by=requested_by)
        transaction.on_commit(lambda: _enqueue(report.pk))
    log.info("report %s queued: %s", report.pk, parameters)
    return report


def _enqueue(report_id: int) -> None:
    from console.tasks import run_report as task

    task.delay(report_id)


def history_source() -> HistorySource:
    """How Spark reaches the history store: ``ASE_REPORT_JDBC_URL`` or this process's database."""
    db = connection.settings_dict
    user = db.get("USER") or ""
    password = db.get("PASSWORD") or ""
    table = MessageEvent._meta.db_table
    if settings.ASE_REPORT_JDBC_URL:
        url = settings.ASE_REPORT_JDBC_URL
    elif connection.vendor == "postgresql":
        host = db.get("HOST") or "127.0.0.1"
        port = db.get("PORT") or "5432"
        url = f"jdbc:postgresql://{host}:{port}/{db['NAME']}"
    elif connection.vendor == "sqlite":
        url = f"jdbc:sqlite:{db['NAME']}"
    else:
        raise InvalidReportParameters(f"reports read PostgreSQL or SQLite, not {connection.vendor}")
    driver = "org.sqlite.JDBC" if url.startswith("jdbc:sqlite:") else "org.postgresql.Driver"
    return HistorySource(url=url, driver=driver, table=table, user=user, password=password)


def spark_settings() -> SparkSettings:
    return SparkSettings(
        master=settings.SPARK_MASTER,
        jars=tuple(settings.ASE_SPARK_JDBC_JARS),
        driver_memory=settings.ASE_SPARK_DRIVER_MEMORY,
        partitions=settings.ASE_REPORT_PARTITIONS,
    )


def run_report(report_id: int) -> Report | None:
    """Run a queued report now, in this process; returns it succeeded or failed (never raises for the job).

    A report that is not queued any more (already run, or running elsewhere) is returned as is;
    one that does not exist any more gives None.
    """
    claimed = Report.objects.filter(pk=report_id, status=Report.Status.QUEUED).update(
        status=Report.Status.RUNNING, started_at=timezone.now(), stage="starting Spark", progress=0.0
    )
    report = Report.objects.filter(pk=report_id).first()
    if report is None:
        log.warning("report %s does not exist (deleted before it ran): nothing to run", report_id)
        return None
    if not claimed:
        log.warning("report %s is %s, not queued: not run again", report_id, report.status)
        return report

    def progress(stage: str, fraction: float) -> None:
        Report.objects.filter(pk=report_id, status=Report.Status.RUNNING).update(
            stage=stage[:200], progress=round(fraction, 4)
        )

    params = report.parameters
    window = Window(_moment(params["start"], "start"), _moment(params["end"], "end"), tuple(params["services"]))
    try:
        config = spark_settings()
        output = run_reports(
            spark_session(config),
            history_source(),
            window,
            partitions=config.partitions,
            progress=progress,
            on_monitor_exit=connections.close_all,
        )
    except Exception as exc:  # noqa: BLE001 - the failure is the report's result, shown to whoever asked
        reason = failure_reason(exc)
        log.error("report %s failed: %s", report_id, reason)
        Report.objects.filter(pk=report_id).update(
            status=Report.Status.FAILED, error=reason, finished_at=timezone.now()
        )
    else:
        Report.objects.filter(pk=report_id).update(
            status=Report.Status.SUCCEEDED,
            stage="done",
            progress=1.0,
            events=output.events,
            results=output.results,
            finished_at=timezone.now(),
        )
        log.info("report %s done: %d events read", report_id, output.events)
    return Report.objects.get(pk=report_id)


def failure_reason(exc: BaseException) -> str:
    """One line saying why: for an error raised in Spark's JVM, the Java exception, not the py4j call."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        try:
            cause = java
            while cause.getCause() is not None:  # the root cause says what went wrong (e.g. connection refused)
                cause = cause.getCause()
            text = str(cause.toString())
        except Exception:  # noqa: BLE001 - the JVM may be gone
            text = str(exc)
    else:
        text = f"{type(exc).__name__}: {exc}"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[0] if lines else type(exc).__name__)[:2000]


def report_csv(report: Report, name: str) -> str:
    """One report of a finished run as CSV (header row from the report's columns)."""
    if name not in REPORTS:
        raise InvalidReportParameters(f"unknown report '{name}' (one of {', '.join(REPORTS)})")
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS[name], lineterminator="\n")
    writer.writeheader()
    writer.writerows((report.results or {}).get(name, []))
    return out.getvalue()
