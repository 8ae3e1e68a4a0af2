"""Search by message id or idempotency key (the box on every page)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET

from ase_engine.posting import posted_detail
from console.models import MessageEvent, ServiceUnit
from console.pages.access import require
from console.roles import Role

MAX_RESULTS = 50


@require_GET
@require(Role.VIEWER)
def search(request: HttpRequest) -> HttpResponse:
    query = request.GET.get("q", "").strip()
    ids: list[str] = []
    units: list[ServiceUnit] = []
    if query:
        if MessageEvent.objects.filter(message_id=query).exists():
            ids = [query]
        else:
            ids = list(
                MessageEvent.objects.filter(kind="posted", detail=posted_detail(query))
                .order_by("-at")
                .values_list("message_id", flat=True)[:MAX_RESULTS]
            )
        units = list(ServiceUnit.objects.filter(service__icontains=query)[:MAX_RESULTS])
        if len(ids) == 1 and not units:
            return redirect("console:message", message_id=ids[0])
    found = [_summary(i) for i in ids]
    return render(request, "console/search.html", {"query": query, "found": found, "units": units})


def _summary(message_id: str) -> dict[str, object]:
    events = list(MessageEvent.objects.filter(message_id=message_id).order_by("at", "id"))
    return {"id": message_id, "first": events[0] if events else None, "last": events[-1] if events else None}
