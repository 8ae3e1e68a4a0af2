"""``/api/reports/``: launch a history report (a Celery job running Spark), follow it, read and download its results.

Every door calls ``console.reports``: ``start_report`` to launch (operator),
``report_csv`` to export one report of a finished run.
"""

from __future__ import annotations

from typing import Any

from django.http import Http404
from django.urls import path
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import renderers, serializers, status
from rest_framework.generics import ListAPIView, RetrieveAPIView
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.parsers import JSONParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from console import reports
from console.api import serializers as s
from console.api.errors import Conflict
from console.api.views import ERRORS, audited
from console.models import Report
from console.roles import Role
from console.spark_reports import REPORTS

# -- shapes ---------------------------------------------------------------------------------------


def _num(**kwargs: Any) -> serializers.FloatField:
    return serializers.FloatField(allow_null=True, **kwargs)


class OutcomeRowSerializer(serializers.Serializer):
    service = serializers.CharField()
    hour = serializers.CharField(help_text="start of the hour, ISO 8601 UTC")
    acked = serializers.IntegerField()
    faulted = serializers.IntegerField()
    errored = serializers.IntegerField()
    timed_out = serializers.IntegerField()
    expired = serializers.IntegerField()


class LatencyRowSerializer(serializers.Serializer):
    service = serializers.CharField()
    messages = serializers.IntegerField()
    p50_ms = _num()
    p95_ms = _num()
    p99_ms = _num()
    mean_ms = _num()
    max_ms = _num()


class AttemptsRowSerializer(serializers.Serializer):
    service = serializers.CharField()
    attempts = serializers.IntegerField()
    messages = serializers.IntegerField()


class RetriesRowSerializer(serializers.Serializer):
    service = serializers.CharField()
    retried = serializers.IntegerField()
    succeeded = serializers.IntegerField()
    success_rate = _num()


class ReasonRowSerializer(serializers.Serializer):
    service = serializers.CharField()
    kind = serializers.CharField()
    target_status = serializers.IntegerField(allow_null=True)
    reason = serializers.CharField(allow_blank=True, allow_null=True)
    count = serializers.IntegerField()


class ParkingRowSerializer(serializers.Serializer):
    service = serializers.CharField()
    area = serializers.CharField()
    exit = serializers.CharField(help_text="purged or recycled")
    messages = serializers.IntegerField()
    mean_s = _num()
    p50_s = _num()
    p95_s = _num()
    max_s = _num()


class ReportResultsSerializer(serializers.Serializer):
    outcomes = OutcomeRowSerializer(many=True, required=False, help_text="events per service per hour")
    latency = LatencyRowSerializer(many=True, required=False, help_text="post -> ack latency percentiles")
    attempts = AttemptsRowSerializer(many=True, required=False, help_text="messages per number of attempts")
    retries = RetriesRowSerializer(many=True, required=False, help_text="retried messages and their success rate")
    reasons = ReasonRowSerializer(many=True, required=False, help_text="top fault and error reasons")
    parking = ParkingRowSerializer(many=True, required=False, help_text="time spent parked before purge/recycle")


class ReportParametersSerializer(serializers.Serializer):
    start = serializers.CharField(help_text="ISO 8601, UTC")
    end = serializers.CharField(help_text="ISO 8601, UTC")
    services = serializers.ListField(child=serializers.CharField(), help_text="empty: every service")


class ReportLaunchSerializer(serializers.Serializer):
    """What ``POST /api/reports/`` takes; ``console.reports.parse_parameters`` checks the rest."""

    start = serializers.DateTimeField(required=False, help_text="ISO 8601; UTC if no zone; default: end - 24 h")
    end = serializers.DateTimeField(required=False, help_text="ISO 8601; UTC if no zone; default: now")
    services = serializers.ListField(
        child=serializers.CharField(max_length=200),
        max_length=reports.MAX_SERVICES,
        required=False,
        help_text="service names; default: every service",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(self.initial_data) - set(self.fields)) if isinstance(self.initial_data, dict) else []
        if unknown:
            expected = "expected start, end, services"
            raise serializers.ValidationError(f"unknown parameters: {', '.join(unknown)} ({expected})")
        return attrs


class ReportSummarySerializer(serializers.ModelSerializer):
    requested_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    parameters = ReportParametersSerializer()

    class Meta:
        model = Report
        fields = [
            "id",
            "status",
            "stage",
            "progress",
            "parameters",
            "requested_by",
            "created_at",
            "started_at",
            "finished_at",
            "events",
            "error",
        ]


class ReportSerializer(ReportSummarySerializer):
    results = ReportResultsSerializer()
    csv = serializers.SerializerMethodField(help_text="report name -> CSV download URL (once succeeded)")

    class Meta(ReportSummarySerializer.Meta):
        fields = [*ReportSummarySerializer.Meta.fields, "results", "csv"]

    def get_csv(self, report: Report) -> dict[str, str]:
        if report.status != Report.Status.SUCCEEDED:
            return {}
        return {name: f"/api/reports/{report.pk}/{name}.csv" for name in REPORTS}


# -- views ----------------------------------------------------------------------------------------


class ReportPage(LimitOffsetPagination):
    default_limit = 50
    max_limit = 200


@extend_schema_view(
    get=extend_schema(responses={200: ReportSummarySerializer(many=True), **ERRORS}, summary="Reports, newest first"),
)
class ReportListView(ListAPIView):
    write_role = Role.OPERATOR
    parser_classes = [JSONParser]
    serializer_class = ReportSummarySerializer
    pagination_class = ReportPage
    queryset = Report.objects.select_related("requested_by")

    @extend_schema(
        request=ReportLaunchSerializer,
        responses={202: ReportSerializer, **ERRORS},
        summary="Launch the history reports (a Celery job running Spark) over a time range and services",
    )
    def post(self, request: Request) -> Response:
        launch = ReportLaunchSerializer(data=request.data if request.data else {})
        launch.is_valid(raise_exception=True)
        data = {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in launch.validated_data.items()}
        try:
            parameters = reports.parse_parameters(data)
        except reports.InvalidReportParameters as exc:
            return Response({"error": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        report = audited(request, "report.start", parameters, lambda: reports.start_report(parameters, request.user))
        return Response(ReportSerializer(report).data, status=status.HTTP_202_ACCEPTED)


@extend_schema_view(
    get=extend_schema(
        responses={200: ReportSerializer, **ERRORS}, summary="A report: status, stage, progress, parameters, results"
    )
)
class ReportDetailView(RetrieveAPIView):
    serializer_class = ReportSerializer
    queryset = Report.objects.select_related("requested_by")


class CSVRenderer(renderers.BaseRenderer):
    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        return str(data).encode(self.charset)


JSON_ERRORS = {(code, "application/json"): OpenApiResponse(s.ErrorSerializer) for code in (401, 403, 404, 409)}


class ReportCSVView(APIView):
    renderer_classes = [CSVRenderer]

    @extend_schema(
        parameters=[OpenApiParameter("name", str, OpenApiParameter.PATH, enum=list(REPORTS))],
        responses={(200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, description="header + rows"), **JSON_ERRORS},
        summary="One report of a finished run as CSV",
        operation_id="reports_csv",
    )
    def get(self, request: Request, pk: int, name: str) -> Response:
        report = Report.objects.filter(pk=pk).first()
        if report is None:
            raise Http404(f"No report {pk}.")
        if name not in REPORTS:
            raise Http404(f"No report named '{name}' (one of {', '.join(REPORTS)}).")
        if report.status != Report.Status.SUCCEEDED:
            raise Conflict(f"Report {pk} is {report.status}: it has no results to download.")
        response = Response(reports.report_csv(report, name))
        response["Content-Disposition"] = f'attachment; filename="report-{pk}-{name}.csv"'
        return response

    def handle_exception(self, exc: Exception) -> Response:
        """Errors answer in JSON, like the rest of the API."""
        response = super().handle_exception(exc)
        self.request.accepted_renderer = renderers.JSONRenderer()
        self.request.accepted_media_type = renderers.JSONRenderer.media_type
        return response


urlpatterns = [
    path("reports/", ReportListView.as_view(), name="api-reports"),
    path("reports/<int:pk>/", ReportDetailView.as_view(), name="api-report"),
    path("reports/<int:pk>/<str:name>.csv", ReportCSVView.as_view(), name="api-report-csv"),
]
