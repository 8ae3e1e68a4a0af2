"""The component's configuration: connection parameters (read-only) and the hot-updatable ones."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from console import operations
from console.api.views import audited
from console.component import component_config, installed_component
from console.models import ComponentSettings
from console.pages.access import forbidden, require
from console.roles import Role, has_role


class RuntimeForm(forms.Form):
    time_to_live = forms.IntegerField(
        label="time-to-live (s, 0 = infinite)", min_value=0, required=False, help_text="empty: ASE_TIME_TO_LIVE"
    )
    stop_timeout = forms.IntegerField(
        label="stop-timeout (s)", min_value=0, required=False, help_text="empty: ASE_STOP_TIMEOUT"
    )


@require_http_methods(["GET", "POST"])
@require(Role.VIEWER)
def component(request: HttpRequest) -> HttpResponse:
    row = ComponentSettings.load()
    form = RuntimeForm(initial={"time_to_live": row.time_to_live, "stop_timeout": row.stop_timeout})
    if request.method == "POST":
        if not has_role(request.user, Role.ADMIN):
            return forbidden(request, Role.ADMIN)
        form = RuntimeForm(request.POST)
        if form.is_valid():
            values = {name: form.cleaned_data[name] for name in ("time_to_live", "stop_timeout")}
            audited(request, "component.update", values, lambda: operations.update_component(**values))
            messages.success(request, "Runtime parameters saved; every instance applies them on its next sync.")
            return redirect("console:component")
    installed, notices = installed_component()
    effective = component_config()
    connection = [
        ("Broker transport", installed.broker_transport, "ASE_BROKER_TRANSPORT"),
        ("Broker URL", installed.broker_url, "ASE_BROKER_URL"),
        ("Broker virtual host", installed.broker_vhost, "ASE_BROKER_VHOST"),
        ("Broker login", settings.ASE_COMPONENT.get("broker-login") or "(none)", "ASE_BROKER_LOGIN"),
        ("Receipt timeout", f"{installed.receipt_timeout:g} s", "ASE_RECEIPT_TIMEOUT"),
    ]
    return render(
        request,
        "console/component.html",
        {
            "connection": connection,
            "effective": effective,
            "installed": installed,
            "notices": [n.public for n in notices],
            "form": form,
            "row": row,
        },
        status=400 if request.method == "POST" else 200,
    )
