"""``manage.py ase_report``: run the history reports now, in this process (for scripts and cron).

    ase_report [--start ISO] [--end ISO] [--service S ...] [--csv DIR] [--json]

The same report as ``POST /api/reports/`` (saved as a ``Report`` row, visible in
the console), but run synchronously instead of on a Celery worker. Defaults:
the last 24 hours, every service. Exit status 1 when the report fails.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from console.models import Report
from console.reports import InvalidReportParameters, parse_parameters, report_csv, run_report
from console.spark_reports import REPORTS


class Command(BaseCommand):
    help = "Run the Spark reports over the message history now (same report as POST /api/reports/)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--start", help="ISO 8601 date-time (UTC if no zone); default: end - 24 h")
        parser.add_argument("--end", help="ISO 8601 date-time (UTC if no zone); default: now")
        parser.add_argument("--service", action="append", default=[], help="a service to report on (repeatable)")
        parser.add_argument("--csv", type=Path, help="write one CSV per report into this directory")
        parser.add_argument("--json", action="store_true", help="print the results as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            parameters = parse_parameters(
                {"start": options["start"], "end": options["end"], "services": options["service"]}
            )
        except InvalidReportParameters as exc:
            raise CommandError(str(exc)) from None
        report = run_report(Report.objects.create(parameters=parameters).pk)
        if report is None:
            raise CommandError("the report was deleted before it ran")
        if report.status != Report.Status.SUCCEEDED:
            raise CommandError(f"report {report.pk} failed: {report.error}")
        self.stdout.write(
            f"report {report.pk}: {report.events} events from {parameters['start']} to {parameters['end']} "
            f"in {(report.finished_at - report.started_at).total_seconds():.1f} s"  # type: ignore[operator]
        )
        if options["csv"]:
            directory: Path = options["csv"]
            directory.mkdir(parents=True, exist_ok=True)
            for name in REPORTS:
                path = directory / f"report-{report.pk}-{name}.csv"
                path.write_text(report_csv(report, name))
                self.stdout.write(f"  {path}")
        if options["json"]:
            self.stdout.write(json.dumps(report.results, indent=2))
        else:
            for name in REPORTS:
                self.stdout.write(f"  {name}: {len(report.results.get(name, []))} rows")
