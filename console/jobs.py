"""Purge and recycle as jobs (SE-ASE-ADM-010, ADM-015): one function to start each, one to run it.

``start_purge`` / ``start_recycle`` check the request at once (E0021, E0009,
E0012, E0013, and E0008/E0018 if the broker cannot be asked), save a ``Job``
row and enqueue ``console.tasks.run_job`` once the transaction has committed.
``run_job`` (in a Celery worker) moves the messages with
``ase_engine.areas.AreaMover`` and writes its progress to the row as each
broker transaction commits. While a job of a service runs, posting into that
service waits (``ASE_ADMIN_POSTING_WAIT`` at most) as the spec asks; the
job starts moving messages once every web process can have seen it running
(``ASE_REGISTRY_TTL``).
"""

from __future__ import annotations

import logging
import os
import time
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from ase_engine import areas as engine
from ase_engine import codes
from ase_engine.areas import AreaMover, AreaReport, Selection
from ase_engine.errors import AreaError, BrokerUnavailable
from console.areas import resolve
from console.component import component_config
from console.history import recorder
from console.models import Job
from console.monitoring import note

log = logging.getLogger("ase.jobs")

_FAILURE_CODE = {Job.Kind.PURGE: "SE-ASE-E0008", Job.Kind.RECYCLE: "SE-ASE-E0018"}


def _user(user: AbstractBaseUser | AnonymousUser | None) -> Any:
    return user if user is not None and user.is_authenticated else None


def _selection_parameters(
    ids: list[str] | None, posted_before: datetime | None, error_contains: str | None
) -> dict[str, Any]:
    return {
        "ids": sorted(set(ids)) if ids else [],
        "posted_before": posted_before.isoformat() if posted_before else None,
        "error_contains": error_contains or None,
    }


def _selection(parameters: dict[str, Any]) -> Selection:
    before = parameters.get("posted_before")
    return Selection(
        ids=frozenset(parameters["ids"]) if parameters.get("ids") else None,
        posted_before_ms=int(datetime.fromisoformat(before).timestamp() * 1000) if before else None,
        error_contains=parameters.get("error_contains") or None,
    )


def _queues(kind: str, service: str, subtype: str) -> list[str]:
    """The queues the job will work on; E0009 if the broker has none of them, E0008/E0018 if it cannot say."""
    unit, checked, queues = resolve(service, subtype)
    if kind == Job.Kind.RECYCLE:
        queues = [q for q in queues if q != unit.areas.pending]
    try:
        sizes = engine.depths(component_config(), queues)
    except BrokerUnavailable as exc:
        note(False, kind, str(exc))
        error = AreaError(_FAILURE_CODE[Job.Kind(kind)], area=engine.label(service, checked), reason=str(exc))
        codes.log(log, error.code.id, **error.params)
        raise error from None
    note(True, kind)
    if not queues or all(size is None for size in sizes.values()):
        error = AreaError("SE-ASE-E0009", area=engine.label(service, checked))
        codes.log(log, error.code.id, **error.params)
        raise error
    return [q for q in queues if sizes.get(q) is not None]


def _enqueue(job: Job, enqueue: bool = True) -> Job:
    """Send the job to the workers once the transaction commits (``enqueue=False``: the caller runs it)."""
    if not enqueue:
        return job

    def send() -> None:
        from console.celery import app  # the web process does not load the Celery app otherwise

        try:
            # No retry loop: with Redis down the job fails now instead of holding the request.
            app.send_task("console.tasks.run_job", args=[job.pk], retry=False)
        except Exception as exc:  # noqa: BLE001 - Redis down: the job cannot start, say so on the row
            reason = f"the job could not be queued: {type(exc).__name__}: {exc}"
            code = codes.get(_FAILURE_CODE[Job.Kind(job.kind)])
            area = engine.label(job.service, job.subtype)
            codes.log(log, code.id, area=area, reason=reason)
            Job.objects.filter(pk=job.pk).update(
                status=Job.Status.FAILED, error=code.public(area=area, reason=reason), finished_at=timezone.now()
            )

    transaction.on_commit(send)
    return job


def start_purge(
    user: AbstractBaseUser | AnonymousUser | None,
    service: str,
    subtype: str,
    ids: list[str] | None = None,
    posted_before: datetime | None = None,
    error_contains: str | None = None,
    enqueue: bool = True,
) -> Job:
    """Purge all messages of an area, or those listed or matching the filter (ADM-010)."""
    _, checked, _ = resolve(service, subtype)
    queues = _queues(Job.Kind.PURGE, service, checked)
    parameters = {"queues": queues, **_selection_parameters(ids, posted_before, error_contains)}
    with transaction.atomic():
        job = Job.objects.create(
            kind=Job.Kind.PURGE, service=service, subtype=checked, parameters=parameters, requested_by=_user(user)
        )
        return _enqueue(job, enqueue)


def start_recycle(
    user: AbstractBaseUser | AnonymousUser | None,
    service: str,
    subtype: str,
    ids: list[str] | None = None,
    force: bool = False,
    posted_before: datetime | None = None,
    error_contains: str | None = None,
    enqueue: bool = True,
) -> Job:
    """Move messages of a parking area back to PENDING (ADM-015): E0012 for PENDING, E0013 for a
    non-idempotent target unless ``force``."""
    unit, checked, _ = resolve(service, subtype)
    refusal: AreaError | None = None
    if checked == engine.PENDING:
        refusal = AreaError("SE-ASE-E0012", area=service)
    elif not unit.is_idempotent and not force:
        refusal = AreaError("SE-ASE-E0013", area=engine.label(service, checked))
    if refusal is not None:
        codes.log(log, refusal.code.id, **refusal.params)
        raise refusal
    queues = _queues(Job.Kind.RECYCLE, service, checked)
    parameters = {"queues": queues, "force": force, **_selection_parameters(ids, posted_before, error_contains)}
    with transaction.atomic():
        job = Job.objects.create(
            kind=Job.Kind.RECYCLE, service=service, subtype=checked, parameters=parameters, requested_by=_user(user)
        )
        return _enqueue(job, enqueue)


def _alive_since() -> datetime:
    return timezone.now() - timedelta(seconds=settings.ASE_JOB_STALE_AFTER)


def running_services() -> set[str]:
    """Services with a purge or recycle running (and alive: its worker did not die): posting into them waits."""
    alive = Job.objects.filter(status=Job.Status.RUNNING, heartbeat_at__gte=_alive_since())
    return set(alive.values_list("service", flat=True))


def run_job(job_id: int) -> dict[str, Any]:
    """Run a queued job to its end (called by the Celery task); returns its result.

    A job whose worker died (no heartbeat for ``ASE_JOB_STALE_AFTER`` s) is
    taken over when its task is delivered again (Celery ``acks_late``): what it
    had committed is done, the rest is done now.
    """
    now = timezone.now()
    claimable = Q(status=Job.Status.QUEUED) | Q(status=Job.Status.RUNNING, heartbeat_at__lt=_alive_since())
    claimed = (
        Job.objects.filter(pk=job_id)
        .filter(claimable)
        .update(status=Job.Status.RUNNING, started_at=now, heartbeat_at=now)
    )
    if not claimed:
        return {"skipped": "not queued"}
    job = Job.objects.get(pk=job_id)
    area = engine.label(job.service, job.subtype)
    try:
        unit, _, _ = resolve(job.service, job.subtype)
    except AreaError as exc:
        return _fail(job, exc.public)
    # Let every web process see the job running (its registry is at most this old) before moving anything.
    time.sleep(min(settings.ASE_REGISTRY_TTL, 5.0))

    def progress(report: AreaReport) -> None:
        Job.objects.filter(pk=job_id).update(
            total=report.total, done=report.done, result=report.as_dict(), heartbeat_at=timezone.now()
        )

    mover = AreaMover(
        component_config(),
        recorder(),
        instance=f"job-{job_id}-{os.getpid()}",
        batch=settings.ASE_ADMIN_BATCH,
        scan_window=settings.ASE_ADMIN_SCAN_WINDOW,
        per_connection=settings.ASE_ADMIN_PER_CONNECTION,
    )
    operation = mover.purge if job.kind == Job.Kind.PURGE else mover.recycle
    try:
        report = operation(unit, list(job.parameters["queues"]), _selection(job.parameters), progress)
    except BrokerUnavailable as exc:
        note(False, f"job {job_id}", str(exc))
        code = codes.get(_FAILURE_CODE[Job.Kind(job.kind)])
        codes.log(log, code.id, area=area, reason=str(exc))
        return _fail(job, code.public(area=area, reason=str(exc)))
    note(True, f"job {job_id}")
    result = report.as_dict()
    Job.objects.filter(pk=job_id).update(
        status=Job.Status.SUCCEEDED,
        total=report.total,
        done=report.done,
        result=result,
        finished_at=timezone.now(),
    )
    log.info("%s of %s: %d messages, %d scanned (job %s)", job.kind, area, report.done, report.scanned, job_id)
    return result


def _fail(job: Job, text: str) -> dict[str, Any]:
    Job.objects.filter(pk=job.pk).update(status=Job.Status.FAILED, error=text, finished_at=timezone.now())
    return {"error": text}
