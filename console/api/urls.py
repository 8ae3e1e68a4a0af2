"""``/api/...``: the admin REST API (DESIGN.md "Public contract"), and its OpenAPI schema."""

from __future__ import annotations

from django.urls import path, re_path
from drf_spectacular.renderers import OpenApiJsonRenderer, OpenApiYamlRenderer
from drf_spectacular.views import SpectacularAPIView

from console.api import reports, views

SERVICE = r"(?P<service>[A-Za-z0-9_.\-]{1,200})"
SUBTYPE = r"(?P<subtype>[A-Za-z]{1,20})"


class SchemaView(SpectacularAPIView):
    """The OpenAPI schema, JSON unless YAML is asked for (``?format=yaml``)."""

    renderer_classes = [OpenApiJsonRenderer, OpenApiYamlRenderer]


urlpatterns = [
    path("schema/", SchemaView.as_view(), name="api-schema"),
    path("service-units/", views.ServiceUnitListView.as_view(), name="api-service-units"),
    path("service-units/descriptor/", views.DescriptorDeployView.as_view(), name="api-descriptor"),
    re_path(rf"^service-units/{SERVICE}/$", views.ServiceUnitDetailView.as_view(), name="api-service-unit"),
    re_path(rf"^service-units/{SERVICE}/ingress-token/$", views.IngressTokenView.as_view(), name="api-ingress-token"),
    re_path(
        r"^processes/(?P<process>posting|sending)/(?P<action>start|stop)/?$",
        views.ProcessView.as_view(),
        name="api-process",
    ),
    path("areas/", views.AreaListView.as_view(), name="api-areas"),
    re_path(rf"^areas/{SERVICE}/{SUBTYPE}/messages/$", views.AreaMessagesView.as_view(), name="api-area-messages"),
    re_path(
        rf"^areas/{SERVICE}/{SUBTYPE}/purge/?$",
        views.AreaActionView.as_view(action="purge"),
        name="api-area-purge",
    ),
    re_path(
        rf"^areas/{SERVICE}/{SUBTYPE}/recycle/?$",
        views.AreaActionView.as_view(action="recycle"),
        name="api-area-recycle",
    ),
    re_path(
        r"^messages/(?P<message_id>[A-Za-z0-9_.:\-]{1,64})/$", views.MessageDetailView.as_view(), name="api-message"
    ),
    path("jobs/", views.JobListView.as_view(), name="api-jobs"),
    path("jobs/<int:pk>/", views.JobDetailView.as_view(), name="api-job"),
    path("component/", views.ComponentView.as_view(), name="api-component"),
    path("component/status/", views.StatusView.as_view(), name="api-status"),
    path("audit/", views.AuditListView.as_view(), name="api-audit"),
    path("users/", views.UserListView.as_view(), name="api-users"),
    re_path(r"^users/(?P<username>[\w.@+-]{1,150})/$", views.UserDetailView.as_view(), name="api-user"),
    *reports.urlpatterns,
]
