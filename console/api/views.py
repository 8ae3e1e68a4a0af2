"""The admin REST API: each view checks its input, calls one operation and writes the audit row.

Roles (console/roles.py): viewers read; operators start/stop processes, purge
and recycle; admins deploy, configure and manage users (``write_role``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.contrib.auth.models import User
from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import serializers, status
from rest_framework.generics import ListAPIView, RetrieveAPIView
from rest_framework.parsers import FileUploadParser, JSONParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ase_engine.errors import AseError
from console import accounts, areas, audit, jobs, monitoring, operations
from console.api import serializers as s
from console.api.errors import Conflict
from console.component import component_config
from console.models import AuditEntry, Job, ServiceUnit
from console.roles import Role

T = TypeVar("T")

ERRORS = {code: OpenApiResponse(s.ErrorSerializer) for code in (400, 401, 403, 404, 503)}
WARNING = OpenApiResponse(s.WarningSerializer, description="WARNING SE-ASE-W0018..W0021: already in that state")


def audited(request: Request, action: str, parameters: dict[str, Any], call: Callable[[], T]) -> T:
    """Run a mutating operation and record it, whether it succeeded or not."""
    try:
        result = call()
    except AseError as exc:
        audit.record(request.user, action, parameters, exc.public, succeeded=False)
        raise
    except Exception as exc:
        audit.record(request.user, action, parameters, f"{type(exc).__name__}: {exc}", succeeded=False)
        raise
    audit.record(request.user, action, parameters, "ok")
    return result


# -- service units -----------------------------------------------------------------------------


class ServiceUnitListView(APIView):
    write_role = Role.ADMIN

    @extend_schema(responses={200: s.ServiceUnitSerializer(many=True), **ERRORS}, summary="List service units")
    def get(self, request: Request) -> Response:
        return Response(s.ServiceUnitSerializer(ServiceUnit.objects.all(), many=True).data)

    @extend_schema(
        request=s.UnitParametersSerializer,
        responses={201: s.DeployResultSerializer, 200: s.DeployResultSerializer, **ERRORS},
        summary="Deploy a service unit from its parameters",
    )
    def post(self, request: Request) -> Response:
        data = _valid(s.UnitParametersSerializer, request.data)
        name = data.get("name") or str(data["provides"].get("service-name", ""))
        result = audited(
            request,
            "service-unit.deploy",
            dict(data),
            lambda: operations.deploy_parameters(name, data["provides"], data["consumes"]),
        )
        return _deployed(result)


class ServiceUnitDetailView(APIView):
    write_role = Role.ADMIN

    def _unit(self, service: str) -> ServiceUnit:
        unit = ServiceUnit.objects.filter(service=service).first()
        if unit is None:
            raise Http404(f"No service unit provides the ASE service '{service}'.")
        return unit

    @extend_schema(responses={200: s.ServiceUnitSerializer, **ERRORS}, summary="One service unit")
    def get(self, request: Request, service: str) -> Response:
        return Response(s.ServiceUnitSerializer(self._unit(service)).data)

    @extend_schema(
        request=s.UnitPatchSerializer,
        responses={200: s.DeployResultSerializer, **ERRORS},
        summary="Change parameters of a unit (redeployed; process states kept)",
    )
    def patch(self, request: Request, service: str) -> Response:
        self._unit(service)
        data = _valid(s.UnitPatchSerializer, request.data)
        result = audited(
            request,
            "service-unit.update",
            {"service": service, **data},
            lambda: operations.patch_unit(service, data.get("provides", {}), data.get("consumes", {})),
        )
        return _deployed(result, status.HTTP_200_OK)

    @extend_schema(responses={204: None, **ERRORS}, summary="Undeploy a unit (its queues are kept)")
    def delete(self, request: Request, service: str) -> Response:
        self._unit(service)
        audited(request, "service-unit.undeploy", {"service": service}, lambda: operations.undeploy(service))
        return Response(status=status.HTTP_204_NO_CONTENT)


class IngressTokenView(APIView):
    write_role = Role.ADMIN

    def _known(self, service: str) -> None:
        if not ServiceUnit.objects.filter(service=service).exists():
            raise Http404(f"No service unit provides the ASE service '{service}'.")

    @extend_schema(
        request=None,
        responses={201: s.IngressTokenSerializer, **ERRORS},
        summary="Require a token on the unit's ingress (a new one replaces the old)",
    )
    def post(self, request: Request, service: str) -> Response:
        self._known(service)
        token = audited(
            request, "service-unit.ingress-token", {"service": service}, lambda: operations.set_ingress_token(service)
        )
        return Response({"token": token}, status=status.HTTP_201_CREATED)

    @extend_schema(responses={204: None, **ERRORS}, summary="Accept requests without a token again")
    def delete(self, request: Request, service: str) -> Response:
        self._known(service)
        audited(
            request,
            "service-unit.ingress-token-remove",
            {"service": service},
            lambda: operations.clear_ingress_token(service),
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class DescriptorDeployView(APIView):
    write_role = Role.ADMIN
    parser_classes = [MultiPartParser, FileUploadParser]

    @extend_schema(
        request={"multipart/form-data": s.DescriptorUploadSerializer, "application/xml": OpenApiTypes.BINARY},
        responses={201: s.DeployResultSerializer, 200: s.DeployResultSerializer, **ERRORS},
        summary="Deploy from a JBI descriptor (jbi.xml) or a service-unit zip",
    )
    def post(self, request: Request) -> Response:
        if (request.content_type or "").startswith("multipart/"):
            upload = request.FILES.get("file")
            if upload is None:
                return Response({"error": "The multipart body needs a 'file' part."}, status=400)
            data, filename = upload.read(), upload.name
        else:
            data, filename = request.body, None
        if not data:
            return Response({"error": "Empty descriptor."}, status=400)
        result = audited(
            request,
            "service-unit.deploy-descriptor",
            {"filename": filename, "bytes": len(data)},
            lambda: operations.deploy_descriptor(data, filename),
        )
        return _deployed(result)


def _deployed(result: operations.DeployResult, code: int | None = None) -> Response:
    payload = {
        "unit": s.ServiceUnitSerializer(result.unit).data,
        "created": result.created,
        "warnings": [notice.public for notice in result.notices],
    }
    return Response(payload, status=code or (status.HTTP_201_CREATED if result.created else status.HTTP_200_OK))


def _valid(serializer_class: type[serializers.Serializer], data: Any) -> dict[str, Any]:
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


# -- processes -----------------------------------------------------------------------------------


class ProcessView(APIView):
    write_role = Role.OPERATOR

    @extend_schema(
        request=None,
        parameters=[
            OpenApiParameter("process", str, OpenApiParameter.PATH, enum=["posting", "sending"]),
            OpenApiParameter("action", str, OpenApiParameter.PATH, enum=["start", "stop"]),
            OpenApiParameter("service", str, description="one ASE service (default: every unit)"),
        ],
        responses={200: s.ProcessResultSerializer, 409: WARNING, **ERRORS},
        summary="Start or stop the posting or the sending process (ADM-020..035)",
    )
    def post(self, request: Request, process: str, action: str) -> Response:
        service = request.query_params.get("service") or None
        result = audited(
            request,
            f"{process}.{action}",
            {"service": service},
            lambda: operations.set_process(process, action == "start", service),
        )
        return Response({"process": process, "action": action, "services": result.services, "workers": result.workers})


# -- areas, messages, jobs ------------------------------------------------------------------------


class AreaListView(APIView):
    @extend_schema(
        parameters=[OpenApiParameter("service", str, description="only this ASE service")],
        responses={200: s.AreaSerializer(many=True), **ERRORS},
        summary="Every area of every service unit with its depth",
    )
    def get(self, request: Request) -> Response:
        return Response(areas.list_areas(request.query_params.get("service") or None))


class AreaMessagesView(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("offset", int, description="messages to skip (default 0)"),
            OpenApiParameter("limit", int, description=f"page size, 1..{areas.MAX_PAGE} (default 50)"),
        ],
        responses={200: s.BrowsePageSerializer, **ERRORS},
        summary="One page of an area's messages, oldest first",
    )
    def get(self, request: Request, service: str, subtype: str) -> Response:
        params = _valid(_PageSerializer, request.query_params)
        return Response(areas.browse_area(service, subtype, params["offset"], params["limit"]))


class _PageSerializer(serializers.Serializer):
    offset = serializers.IntegerField(min_value=0, max_value=10**9, default=0)
    limit = serializers.IntegerField(min_value=1, max_value=areas.MAX_PAGE, default=50)


class MessageDetailView(APIView):
    @extend_schema(responses={200: s.MessageDetailSerializer, **ERRORS}, summary="A message and its history")
    def get(self, request: Request, message_id: str) -> Response:
        detail = areas.message_detail(message_id)
        if detail is None:
            raise Http404(f"No message '{message_id}' in any area or in the history.")
        return Response(detail)


class AreaActionView(APIView):
    write_role = Role.OPERATOR
    parser_classes = [JSONParser]
    action = ""

    @extend_schema(
        request=s.AreaActionSerializer,
        responses={202: s.JobSerializer, **ERRORS},
        summary="Purge or recycle messages of an area (a job)",
    )
    def post(self, request: Request, service: str, subtype: str) -> Response:
        data = _valid(s.AreaActionSerializer, request.data if request.data else {})
        parameters = {
            "service": service,
            "subtype": subtype,
            "ids": data.get("ids") or [],
            "posted_before": data["posted_before"].isoformat() if data.get("posted_before") else None,
            "error_contains": data.get("error_contains"),
            "force": data.get("force", False),
        }
        if self.action == "purge":
            job = audited(
                request,
                "area.purge",
                parameters,
                lambda: jobs.start_purge(
                    request.user,
                    service,
                    subtype,
                    ids=data.get("ids"),
                    posted_before=data.get("posted_before"),
                    error_contains=data.get("error_contains"),
                ),
            )
        else:
            job = audited(
                request,
                "area.recycle",
                parameters,
                lambda: jobs.start_recycle(
                    request.user,
                    service,
                    subtype,
                    ids=data.get("ids"),
                    force=data.get("force", False),
                    posted_before=data.get("posted_before"),
                    error_contains=data.get("error_contains"),
                ),
            )
        return Response(s.JobSerializer(job).data, status=status.HTTP_202_ACCEPTED)


@extend_schema_view(get=extend_schema(responses={200: s.JobSerializer(many=True), **ERRORS}, summary="Recent jobs"))
class JobListView(ListAPIView):
    serializer_class = s.JobSerializer

    def get_queryset(self) -> Any:
        return Job.objects.select_related("requested_by")[:200]


@extend_schema_view(get=extend_schema(responses={200: s.JobSerializer, **ERRORS}, summary="A job and its progress"))
class JobDetailView(RetrieveAPIView):
    serializer_class = s.JobSerializer
    queryset = Job.objects.select_related("requested_by")


# -- component -----------------------------------------------------------------------------------


def _component() -> dict[str, Any]:
    config = component_config()
    return {
        "time_to_live": config.time_to_live,
        "stop_timeout": config.stop_timeout,
        "broker_transport": config.broker_transport,
        "broker_url": config.broker_url,
        "broker_vhost": config.broker_vhost,
        "receipt_timeout": config.receipt_timeout,
    }


class ComponentView(APIView):
    write_role = Role.ADMIN

    @extend_schema(responses={200: s.ComponentSerializer, **ERRORS}, summary="Component configuration")
    def get(self, request: Request) -> Response:
        return Response(_component())

    @extend_schema(
        request=s.ComponentPatchSerializer,
        responses={200: s.ComponentSerializer, 409: OpenApiResponse(s.ErrorSerializer), **ERRORS},
        summary="Change the time-to-live or the stop timeout, hot (CFG-010)",
    )
    def patch(self, request: Request) -> Response:
        data = _valid(s.ComponentPatchSerializer, request.data)

        def change() -> None:
            try:
                operations.update_component(**data)
            except operations.ConnectionParametersLocked as exc:
                raise Conflict(str(exc)) from None

        audited(request, "component.update", data, change)
        return Response(_component())


class StatusView(APIView):
    @extend_schema(responses={200: s.StatusSerializer, **ERRORS}, summary="Connection, instances, processes, depths")
    def get(self, request: Request) -> Response:
        return Response(monitoring.status())


# -- audit and users ------------------------------------------------------------------------------


@extend_schema_view(
    get=extend_schema(responses={200: s.AuditEntrySerializer(many=True), **ERRORS}, summary="Recent audit entries")
)
class AuditListView(ListAPIView):
    serializer_class = s.AuditEntrySerializer

    def get_queryset(self) -> Any:
        return AuditEntry.objects.all()[:500]


class UserListView(APIView):
    read_role = Role.ADMIN
    write_role = Role.ADMIN

    @extend_schema(responses={200: s.UserSerializer(many=True), **ERRORS}, summary="Users and their roles")
    def get(self, request: Request) -> Response:
        return Response(s.UserSerializer(User.objects.order_by("username"), many=True).data)

    @extend_schema(request=s.UserCreateSerializer, responses={201: s.UserSerializer, **ERRORS}, summary="Add a user")
    def post(self, request: Request) -> Response:
        data = _valid(s.UserCreateSerializer, request.data)
        public = {"username": data["username"], "role": data["role"]}
        try:
            user = audited(
                request,
                "user.create",
                public,
                lambda: accounts.create_user(data["username"], data["password"], data["role"]),
            )
        except accounts.UserExists as exc:
            raise Conflict(str(exc)) from None
        return Response(s.UserSerializer(user).data, status=status.HTTP_201_CREATED)


class UserDetailView(APIView):
    read_role = Role.ADMIN
    write_role = Role.ADMIN

    @extend_schema(
        request=s.UserPatchSerializer, responses={200: s.UserSerializer, **ERRORS}, summary="Change a user's role"
    )
    def patch(self, request: Request, username: str) -> Response:
        if not User.objects.filter(username=username).exists():
            raise Http404(f"No user '{username}'.")
        data = _valid(s.UserPatchSerializer, request.data)
        public = {k: v for k, v in data.items() if k != "password"}
        user = audited(
            request, "user.update", {"username": username, **public}, lambda: accounts.update_user(username, **data)
        )
        return Response(s.UserSerializer(user).data)
