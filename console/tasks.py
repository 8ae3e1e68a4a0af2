"""Celery tasks: thin calls into one function each."""

from __future__ import annotations

from typing import Any

from celery import shared_task


@shared_task(ignore_result=True, expires=5)
def pump_retries() -> dict[str, Any]:
    """Beat, every ASE_RETRY_PUMP_INTERVAL seconds: move due requests from RETRY back to PENDING."""
    from console.retries import run_pump

    return run_pump()


@shared_task(ignore_result=True)
def run_job(job_id: int) -> dict[str, Any]:
    """A purge or a recycle saved by console.jobs.start_*."""
    from console.jobs import run_job as run

    return run(job_id)


@shared_task(ignore_result=True, expires=10)
def probe_broker() -> dict[str, Any]:
    """Beat, every ASE_BROKER_PROBE_INTERVAL seconds: check the broker connection (MON-010)."""
    from console.monitoring import probe

    return probe()


@shared_task(ignore_result=True, expires=5)
def publish_dashboard() -> None:
    """Beat, every ASE_DASHBOARD_INTERVAL seconds: push a fresh snapshot to every open dashboard."""
    from console.live import publish_snapshot

    publish_snapshot()


@shared_task(ignore_result=True, expires=600)
def purge_history() -> dict[str, Any]:
    """Beat, every ASE_HISTORY_PURGE_INTERVAL seconds: delete history older than ASE_HISTORY_RETENTION_DAYS."""
    from django.conf import settings

    from console.history_store import purge_history as purge

    report = purge(batch=settings.ASE_HISTORY_PURGE_BATCH)
    return {"deleted": report.deleted, "batches": report.batches, "complete": report.complete}


@shared_task(ignore_result=True, acks_late=False)
def run_report(report_id: int) -> None:
    """A report launched from the console or the API (console.reports.start_report)."""
    from console.reports import run_report as run

    run(report_id)
