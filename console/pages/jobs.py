"""Jobs (purge, recycle): the list, and one job with its live progress (the page polls /api/jobs/<id>/)."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from console.models import Job
from console.pages.access import require
from console.roles import Role

MAX_ROWS = 200


@require_GET
@require(Role.VIEWER)
def job_list(request: HttpRequest) -> HttpResponse:
    return render(request, "console/jobs.html", {"jobs": Job.objects.select_related("requested_by")[:MAX_ROWS]})


@require_GET
@require(Role.VIEWER)
def job_detail(request: HttpRequest, job_id: int) -> HttpResponse:
    job = Job.objects.select_related("requested_by").filter(pk=job_id).first()
    if job is None:
        raise Http404("no such job")
    return render(request, "console/job.html", {"job": job})
