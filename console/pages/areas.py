"""Persistence areas in the console: the browser (filters, selection, "all N matching"), message detail,
and purge/recycle with a confirmation naming the area and the exact count, run as jobs (console.jobs).

Browsing reads only the head of an area's queues (``console.areas.browse_area``,
up to ``ASE_BROWSE_WINDOW`` messages per queue) and depths come from the
broker's statistics: a page costs the same with a million messages in the area.
"All matching" without a filter is the whole area (its depth, exact at the time
of the confirmation); with a filter it is the matching messages among those a
browser can see, sent as an explicit list of ids, and the page says so.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from xml.dom.minidom import Document

from defusedxml.minidom import parseString
from django import forms
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from ase_engine.errors import AseError, BrokerUnavailable
from ase_engine.message import H_ATTEMPT, H_INCOMING, H_LAST_ERROR, H_LAST_OUTCOME, H_LAST_STATUS
from console import areas, jobs
from console.api.views import audited
from console.models import ServiceUnit
from console.pages.access import require
from console.roles import Role

PAGE = 50
MAX_SELECTED = 10_000


class FilterForm(forms.Form):
    posted_after = forms.DateTimeField(
        label="Posted after (UTC)", required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )
    posted_before = forms.DateTimeField(
        label="Posted before (UTC)", required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )
    min_attempts = forms.IntegerField(label="Attempts at least", required=False, min_value=0)
    outcome = forms.CharField(label="Last outcome contains", required=False, max_length=200)


@dataclass(frozen=True)
class AreaFilter:
    posted_after: datetime | None = None
    posted_before: datetime | None = None
    min_attempts: int | None = None
    outcome: str = ""

    @classmethod
    def from_data(cls, data: Any) -> tuple[AreaFilter, FilterForm]:
        form = FilterForm(data)
        if not form.is_valid():
            return cls(), form
        d = form.cleaned_data
        return cls(d["posted_after"], d["posted_before"], d["min_attempts"], (d["outcome"] or "").strip()), form

    @property
    def empty(self) -> bool:
        return self == AreaFilter()

    def query(self) -> dict[str, str]:
        """The filter as GET/POST fields, to carry it from the browser to the confirmation and the action."""
        fields = {
            "posted_after": self.posted_after.strftime("%Y-%m-%dT%H:%M") if self.posted_after else "",
            "posted_before": self.posted_before.strftime("%Y-%m-%dT%H:%M") if self.posted_before else "",
            "min_attempts": "" if self.min_attempts is None else str(self.min_attempts),
            "outcome": self.outcome,
        }
        return {k: v for k, v in fields.items() if v}

    def matches(self, headers: dict[str, str]) -> bool:
        incoming = headers.get(H_INCOMING, "")
        posted_ms = int(incoming) if incoming.isdigit() else None
        if self.posted_after and (posted_ms is None or posted_ms < _ms(self.posted_after)):
            return False
        if self.posted_before and (posted_ms is None or posted_ms >= _ms(self.posted_before)):
            return False
        if self.min_attempts is not None:
            attempts = headers.get(H_ATTEMPT, "0")
            if not attempts.isdigit() or int(attempts) < self.min_attempts:
                return False
        if self.outcome:
            text = " ".join(headers.get(h, "") for h in (H_LAST_OUTCOME, H_LAST_STATUS, H_LAST_ERROR))
            if self.outcome.lower() not in text.lower():
                return False
        return True


def _ms(value: datetime) -> int:
    if timezone.is_naive(value):
        value = timezone.make_aware(value, timezone.get_current_timezone())
    return int(value.timestamp() * 1000)


def _area_error(request: HttpRequest, exc: AseError, service: str, subtype: str) -> HttpResponse:
    status = 404 if exc.code.id == "SE-ASE-E0009" else 400
    return render(
        request, "console/area_error.html", {"error": exc.public, "service": service, "subtype": subtype}, status=status
    )


def _broker_down(request: HttpRequest, exc: BrokerUnavailable, service: str, subtype: str) -> HttpResponse:
    return render(
        request,
        "console/area_error.html",
        {"error": f"The broker did not answer: {exc}", "service": service, "subtype": subtype},
        status=503,
    )


@require_GET
@require(Role.VIEWER)
def area_list(request: HttpRequest) -> HttpResponse:
    try:
        rows, error = areas.list_areas(), ""
    except BrokerUnavailable as exc:
        rows, error = [], f"The broker did not answer: {exc}"
    return render(request, "console/areas.html", {"rows": rows, "error": error})


@require_GET
@require(Role.VIEWER)
def area_browser(request: HttpRequest, service: str, subtype: str) -> HttpResponse:
    area_filter, form = AreaFilter.from_data(request.GET)
    offset = _int(request.GET.get("offset"), 0)
    try:
        page = areas.browse_area(
            service, subtype, offset, PAGE, match=None if area_filter.empty else area_filter.matches
        )
    except AseError as exc:
        return _area_error(request, exc, service, subtype)
    except BrokerUnavailable as exc:
        return _broker_down(request, exc, service, subtype)
    unit = ServiceUnit.objects.get(service=service)
    return render(
        request,
        "console/area_browser.html",
        {
            "page": page,
            "unit": unit,
            "form": form,
            "filter": area_filter,
            "filter_fields": area_filter.query(),
            "prev_offset": max(0, offset - PAGE) if offset > 0 else None,
            "first": offset + 1,
            "last": offset + len(page["messages"]),
            "recyclable": page["subtype"] != "PENDING",
        },
    )


def _int(value: str | None, default: int) -> int:
    try:
        return max(0, int(value or default))
    except ValueError:
        return default


def _matching_ids(service: str, subtype: str, area_filter: AreaFilter) -> tuple[list[str], int, int]:
    """Ids of every matching message a browser can see, the area's depth and what a browser can see."""
    ids: list[str] = []
    offset = 0
    while True:
        page = areas.browse_area(service, subtype, offset, areas.MAX_PAGE, match=area_filter.matches)
        ids.extend(m["id"] for m in page["messages"])
        if page["next_offset"] is None or len(ids) >= MAX_SELECTED:
            return ids[:MAX_SELECTED], page["depth"], page["browsable"]
        offset = page["next_offset"]


@dataclass
class Plan:
    """What an action will do, as the confirmation states it."""

    action: str
    service: str
    subtype: str
    everything: bool
    ids: list[str]
    count: int
    note: str = ""


def _plan(request: HttpRequest, service: str, subtype: str) -> Plan:
    """The selection posted by the browser: explicit ids, or "all matching" (the whole area, or the filtered ids)."""
    action = request.POST.get("action", "")
    if action not in ("purge", "recycle"):
        raise Http404("unknown action")
    area_filter, _ = AreaFilter.from_data(request.POST)
    if request.POST.get("scope") == "all":
        if area_filter.empty:
            depth = sum(r["depth"] for r in areas.list_areas(service) if r["subtype"] == subtype.upper())
            return Plan(action, service, subtype.upper(), True, [], depth)
        ids, depth, browsable = _matching_ids(service, subtype, area_filter)
        note = ""
        if depth > browsable:
            note = (
                f"The filter was applied to the first {browsable:,} of {depth:,} messages, as far as the broker "
                "lets a browser see; messages behind them are not included."
            )
        return Plan(action, service, subtype.upper(), False, ids, len(ids), note)
    ids = list(dict.fromkeys(request.POST.getlist("ids")))[:MAX_SELECTED]
    return Plan(action, service, subtype.upper(), False, ids, len(ids))


@require_POST
@require(Role.OPERATOR)
def area_confirm(request: HttpRequest, service: str, subtype: str) -> HttpResponse:
    """Step 1 of purge/recycle: state what will happen (area, exact count, force), change nothing."""
    try:
        areas.resolve(service, subtype)
        plan = _plan(request, service, subtype)
    except AseError as exc:
        return _area_error(request, exc, service, subtype)
    except BrokerUnavailable as exc:
        return _broker_down(request, exc, service, subtype)
    unit = ServiceUnit.objects.get(service=service)
    return render(
        request,
        "console/area_confirm.html",
        {
            "plan": plan,
            "unit": unit,
            "needs_force": plan.action == "recycle" and not unit.is_idempotent,
            "refused": plan.action == "recycle" and plan.subtype == "PENDING",
        },
    )


@require_POST
@require(Role.OPERATOR)
def area_action(request: HttpRequest, service: str, subtype: str) -> HttpResponse:
    """Step 2: start the job (console.jobs), audited; then show its live progress."""
    action = request.POST.get("action", "")
    if action not in ("purge", "recycle"):
        raise Http404("unknown action")
    everything = request.POST.get("everything") == "1"
    ids = [] if everything else list(dict.fromkeys(request.POST.getlist("ids")))[:MAX_SELECTED]
    if not everything and not ids:
        return _area_error_text(request, "Nothing was selected: no job was started.", service, subtype)
    force = request.POST.get("force") == "on"
    parameters: dict[str, Any] = {"service": service, "subtype": subtype, "all": everything, "ids": ids, "force": force}
    try:
        if action == "purge":
            job = audited(
                request, "area.purge", parameters, lambda: jobs.start_purge(request.user, service, subtype, ids=ids)
            )
        else:
            job = audited(
                request,
                "area.recycle",
                parameters,
                lambda: jobs.start_recycle(request.user, service, subtype, ids=ids, force=force),
            )
    except AseError as exc:
        return _area_error(request, exc, service, subtype)
    return redirect("console:job", job_id=job.pk)


def _area_error_text(request: HttpRequest, text: str, service: str, subtype: str) -> HttpResponse:
    return render(request, "console/area_error.html", {"error": text, "service": service, "subtype": subtype}, 400)


# -- message detail ---------------------------------------------------------------------------------


def _raw_payload(detail: dict[str, Any]) -> bytes:
    if "payload" not in detail:
        return b""
    if detail.get("payload_encoding") == "base64":
        return base64.b64decode(detail["payload"])
    return str(detail["payload"]).encode("utf-8")


def pretty(content_type: str, payload: bytes) -> tuple[str, str | None]:
    """(kind, text) to show: JSON and XML pretty-printed, other text as is, binary as ``None``."""
    base = content_type.split(";")[0].strip().lower()
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        return "binary", None
    if base.endswith("json") or base.endswith("+json"):
        try:
            return "json", json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            return "text", text
    if base.endswith("xml") or base.endswith("+xml"):
        try:
            document: Document = parseString(text)
            lines = [line for line in document.toprettyxml(indent="  ").splitlines() if line.strip()]
            if lines and lines[0].startswith("<?xml") and not text.lstrip().startswith("<?xml"):
                lines = lines[1:]  # minidom adds a declaration the message did not have
            return "xml", "\n".join(lines)
        except Exception:  # noqa: BLE001 - malformed or hostile XML: show it as it is
            return "text", text
    if base.startswith("text/") or base in ("application/x-www-form-urlencoded", "multipart/form-data"):
        return "text", text
    return "binary", None


@require_GET
@require(Role.VIEWER)
def message(request: HttpRequest, message_id: str) -> HttpResponse:
    try:
        detail = areas.message_detail(message_id)
        broker_error = ""
    except BrokerUnavailable as exc:
        detail, broker_error = {"id": message_id, "history": areas.history(message_id), "location": None}, str(exc)
        if not detail["history"]:
            detail = None
    if detail is None:
        return render(request, "console/message.html", {"message_id": message_id, "detail": None}, status=404)
    kind, text = ("none", None)
    raw = _raw_payload(detail)
    if "payload" in detail:
        kind, text = pretty(detail.get("content_type") or "", raw)
    return render(
        request,
        "console/message.html",
        {
            "message_id": message_id,
            "detail": detail,
            "payload_kind": kind,
            "payload_text": text,
            "payload_size": len(raw),
            "broker_error": broker_error,
            "last": detail["history"][-1] if detail["history"] else None,
        },
    )


@require_GET
@require(Role.VIEWER)
def message_payload(request: HttpRequest, message_id: str) -> HttpResponse:
    """The payload's bytes, as a download, with its content type."""
    detail = areas.message_detail(message_id)
    if detail is None or "payload" not in detail:
        raise Http404("the message is not in any area of its service")
    response = HttpResponse(_raw_payload(detail), content_type=detail.get("content_type") or "application/octet-stream")
    response["Content-Disposition"] = f'attachment; filename="{message_id}.bin"'
    response["X-Content-Type-Options"] = "nosniff"
    return response


@require_GET
@require(Role.VIEWER)
def message_attachment(request: HttpRequest, message_id: str, name: str) -> HttpResponse:
    """One attachment (a part of the multipart body the message was posted with), as a download."""
    import io

    from django.conf import settings
    from django.core.files.uploadhandler import MemoryFileUploadHandler, TemporaryFileUploadHandler
    from django.http.multipartparser import MultiPartParser, MultiPartParserError

    detail = areas.message_detail(message_id)
    if detail is None or "payload" not in detail:
        raise Http404("the message is not in any area of its service")
    body = _raw_payload(detail)
    meta = {"CONTENT_TYPE": detail.get("content_type") or "", "CONTENT_LENGTH": str(len(body))}
    try:
        fields, files = MultiPartParser(
            meta, io.BytesIO(body), [MemoryFileUploadHandler(), TemporaryFileUploadHandler()], settings.DEFAULT_CHARSET
        ).parse()
    except MultiPartParserError:
        raise Http404("the message body is not a multipart body") from None
    if name in files:
        upload = files[name]
        data, content_type, filename = upload.read(), upload.content_type or "application/octet-stream", upload.name
    elif name in fields:
        data, content_type, filename = fields[name].encode(), "text/plain; charset=utf-8", f"{name}.txt"
    else:
        raise Http404("no such attachment")
    response = HttpResponse(data, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["X-Content-Type-Options"] = "nosniff"
    return response
