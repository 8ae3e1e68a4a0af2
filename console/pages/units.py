"""Service units: list, detail, deploy (form or jbi.xml upload), start/stop, undeploy."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from ase_engine.config import Notice, ParameterError
from ase_engine.errors import AseError, DescriptorError
from console import dashboard as data
from console import operations
from console.api.views import audited
from console.live import publish_snapshot
from console.models import MessageEvent, ServiceUnit
from console.pages.access import require
from console.roles import Role

RECENT_EVENTS = 50


@require_GET
@require(Role.VIEWER)
def unit_list(request: HttpRequest) -> HttpResponse:
    units = list(ServiceUnit.objects.order_by("service"))
    depths, broker = data.area_depths(units)
    rows = [{"unit": u, "areas": depths.get(u.service, {})} for u in units]
    return render(request, "console/units.html", {"rows": rows, "broker": broker, "subtypes": data.SUBTYPES})


@require_GET
@require(Role.VIEWER)
def unit_detail(request: HttpRequest, service: str) -> HttpResponse:
    unit = get_object_or_404(ServiceUnit, service=service)
    depths, broker = data.area_depths([unit])
    queues = data.area_queues(unit)
    areas = [{"subtype": s, "queues": queues[s], "depth": depths.get(unit.service, {}).get(s)} for s in data.SUBTYPES]
    recent = MessageEvent.objects.filter(service=service).order_by("-at", "-id")[:RECENT_EVENTS]
    return render(
        request,
        "console/unit_detail.html",
        {"unit": unit, "areas": areas, "broker": broker, "recent": recent, "parameters": _parameters(unit)},
    )


def _parameters(unit: ServiceUnit) -> list[tuple[str, str, Any]]:
    """(section, parameter, value) in the descriptor's vocabulary (booleans as ``true``/``false``)."""
    rows = [
        ("provides", "service-name", unit.service),
        ("provides", "interface-name", unit.interface),
        ("provides", "endpoint-name", unit.endpoint),
        ("provides", "mustBeAutomaticallyStarted", unit.provides_auto_start),
        ("provides", "stop-timeout", "component default" if unit.stop_timeout is None else f"{unit.stop_timeout} s"),
        ("consumes", "service-name", unit.target_service),
        ("consumes", "target-url", unit.target_url),
        ("consumes", "timeout", f"{unit.timeout_ms} ms"),
        ("consumes", "mep", unit.mep),
        ("consumes", "mustBeAutomaticallyStarted", unit.consumes_auto_start),
        ("consumes", "is-idempotent", unit.is_idempotent),
        ("consumes", "time-to-live", "component default" if unit.time_to_live is None else f"{unit.time_to_live} s"),
        ("consumes", "retry-policy-number", unit.retry_number),
        ("consumes", "retry-policy-base-interval", f"{unit.retry_base_interval} s"),
        ("consumes", "retry-policy-factor", unit.retry_factor),
    ]
    return [(section, name, str(value).lower() if isinstance(value, bool) else value) for section, name, value in rows]


class DescriptorForm(forms.Form):
    descriptor = forms.FileField(label="jbi.xml or service-unit archive (.zip)")


class ParametersForm(forms.Form):
    """The parameters of both sections, as text: the engine reads them with the spec's rules and warnings."""

    service_name = forms.CharField(label="service-name (ASE service)", max_length=200)
    interface_name = forms.CharField(label="interface-name", max_length=400, required=False)
    target_url = forms.CharField(label="target-url", max_length=2000)
    timeout = forms.CharField(label="timeout (ms)", required=False, initial="30000")
    is_idempotent = forms.CharField(label="is-idempotent", required=False, initial="false")
    retry_policy_number = forms.CharField(label="retry-policy-number", required=False, initial="3")
    retry_policy_base_interval = forms.CharField(label="retry-policy-base-interval (s)", required=False, initial="10")
    retry_policy_factor = forms.CharField(label="retry-policy-factor", required=False, initial="3")
    time_to_live = forms.CharField(label="time-to-live (s)", required=False)
    provides_auto_start = forms.CharField(label="mustBeAutomaticallyStarted (provides)", required=False, initial="true")
    consumes_auto_start = forms.CharField(label="mustBeAutomaticallyStarted (consumes)", required=False, initial="true")

    def sections(self) -> tuple[dict[str, Any], dict[str, Any]]:
        d = {k: v for k, v in self.cleaned_data.items() if v not in ("", None)}
        provides = {
            "service-name": d.get("service_name"),
            "interface-name": d.get("interface_name"),
            "mustBeAutomaticallyStarted": d.get("provides_auto_start"),
        }
        consumes = {
            "service-name": f"{d.get('service_name')}Target",
            "target-url": d.get("target_url"),
            "timeout": d.get("timeout"),
            "is-idempotent": d.get("is_idempotent"),
            "retry-policy-number": d.get("retry_policy_number"),
            "retry-policy-base-interval": d.get("retry_policy_base_interval"),
            "retry-policy-factor": d.get("retry_policy_factor"),
            "time-to-live": d.get("time_to_live"),
            "mustBeAutomaticallyStarted": d.get("consumes_auto_start"),
        }
        return (
            {k: v for k, v in provides.items() if v is not None},
            {k: v for k, v in consumes.items() if v is not None},
        )


@require_http_methods(["GET", "POST"])
@require(Role.ADMIN)
def deploy(request: HttpRequest) -> HttpResponse:
    """Deploy from an uploaded descriptor or from the form; show the spec's warnings (or error) with the result."""
    upload_form, params_form = DescriptorForm(), ParametersForm()
    error, result = "", None
    if request.method == "POST":
        try:
            if request.POST.get("source") == "descriptor":
                upload_form = DescriptorForm(request.POST, request.FILES)
                if upload_form.is_valid():
                    upload = upload_form.cleaned_data["descriptor"]
                    data = upload.read()
                    result = audited(
                        request,
                        "service-unit.deploy-descriptor",
                        {"filename": upload.name, "size": len(data)},
                        lambda: operations.deploy_descriptor(data, upload.name),
                    )
            else:
                params_form = ParametersForm(request.POST)
                if params_form.is_valid():
                    provides, consumes = params_form.sections()
                    name = params_form.cleaned_data["service_name"]
                    result = audited(
                        request,
                        "service-unit.deploy",
                        {"name": name, "provides": provides, "consumes": consumes},
                        lambda: operations.deploy_parameters(name, provides, consumes),
                    )
        except AseError as exc:
            error = exc.public
        except (DescriptorError, ParameterError) as exc:
            error = f"The service unit cannot be deployed: {exc}"
        if result is not None:
            publish_snapshot()
    status = 400 if error or (request.method == "POST" and result is None) else 200
    return render(
        request,
        "console/deploy.html",
        {
            "upload_form": upload_form,
            "params_form": params_form,
            "error": error,
            "result": result,
            "warnings": [_notice(n) for n in result.notices] if result else [],
        },
        status=status,
    )


def _notice(notice: Notice) -> dict[str, str]:
    return {"code": notice.code, "text": notice.public}


@require_POST
@require(Role.OPERATOR)
def unit_action(request: HttpRequest, service: str, action: str) -> HttpResponse:
    """Start or stop a whole unit (PROC-005, PROC-050)."""
    try:
        if action not in ("start", "stop"):
            return HttpResponse(status=404)
        call = operations.start_unit if action == "start" else operations.stop_unit
        audited(request, f"service-unit.{action}", {"service": service}, lambda: call(service))
    except operations.UnknownService as exc:
        messages.error(request, str(exc))
        return redirect("console:units")
    messages.success(request, f"Service unit {service} {'started' if action == 'start' else 'stopped'}.")
    publish_snapshot()
    return redirect("console:unit", service=service)


@require_http_methods(["GET", "POST"])
@require(Role.ADMIN)
def undeploy(request: HttpRequest, service: str) -> HttpResponse:
    """GET: confirmation with the reminder that the queues are kept; POST: undeploy (PROC-055)."""
    unit = get_object_or_404(ServiceUnit, service=service)
    if request.method == "POST":
        audited(request, "service-unit.undeploy", {"service": service}, lambda: operations.undeploy(service))
        messages.success(
            request,
            f"Service unit {service} undeployed. Its queues are kept in the broker with their messages; "
            "deploying it again finds them.",
        )
        publish_snapshot()
        return redirect("console:units")
    queues = [q for qs in data.area_queues(unit).values() for q in qs]
    return render(request, "console/undeploy.html", {"unit": unit, "queues": queues})
