"""The audit trail (console.audit): who did what, when, with which parameters, and how it ended."""

from __future__ import annotations

import json

from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from console.models import AuditEntry
from console.pages.access import require
from console.roles import Role

PAGE = 50


@require_GET
@require(Role.VIEWER)
def audit_list(request: HttpRequest) -> HttpResponse:
    entries = AuditEntry.objects.all()
    user, action = request.GET.get("user", "").strip(), request.GET.get("action", "").strip()
    if user:
        entries = entries.filter(username__icontains=user)
    if action:
        entries = entries.filter(action__icontains=action)
    page = Paginator(entries, PAGE).get_page(request.GET.get("page"))
    for entry in page:
        entry.parameters_text = json.dumps(entry.parameters, ensure_ascii=False, sort_keys=True)
    return render(request, "console/audit.html", {"page": page, "user_filter": user, "action_filter": action})
