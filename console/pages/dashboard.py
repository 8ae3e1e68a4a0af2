"""The dashboard (live) and the process toggles it offers."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from ase_engine.errors import ProcessStateError
from console import dashboard as data
from console import operations
from console.api.views import audited
from console.live import publish_snapshot
from console.pages.access import require
from console.roles import Role


@require_GET
@require(Role.VIEWER)
def dashboard(request: HttpRequest) -> HttpResponse:
    return render(request, "console/dashboard.html", {"snapshot": data.snapshot(), "subtypes": data.SUBTYPES})


@require_POST
@require(Role.OPERATOR)
def process(request: HttpRequest, process: str, action: str) -> HttpResponse:
    """Start or stop the posting or sending process of one unit (``service`` field) or of all."""
    if process not in ("posting", "sending") or action not in ("start", "stop"):
        return HttpResponseBadRequest("unknown process or action")
    service = request.POST.get("service") or None
    try:
        result = audited(
            request,
            f"{process}.{action}",
            {"service": service},
            lambda: operations.set_process(process, action == "start", service=service),
        )
    except ProcessStateError as exc:
        messages.warning(request, exc.public)
    except operations.UnknownService as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"{process.capitalize()} process {_DONE[action]}: {', '.join(result.services)}.")
        publish_snapshot()
    return _back(request)


_DONE = {"start": "started", "stop": "stopped"}


def _back(request: HttpRequest) -> HttpResponse:
    target = request.POST.get("next") or "/"
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        target = "/"
    return redirect(target)
