"""Error bodies of the admin API: ``{"error": "ERROR SE-ASE-E00xx: ..."}`` or ``{"warning": "WARNING ..."}``.

A coded error keeps the catalog's text; its HTTP status comes from ``STATUS``.
Errors without a spec code get a plain sentence. Nothing answers with a stack trace.
"""

from __future__ import annotations

import logging
from typing import Any

from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from ase_engine.config import ParameterError
from ase_engine.errors import AseError, DescriptorError
from console.operations import UnknownService

log = logging.getLogger("ase.api")

STATUS = {
    "SE-ASE-E0001": status.HTTP_503_SERVICE_UNAVAILABLE,
    "SE-ASE-E0008": status.HTTP_503_SERVICE_UNAVAILABLE,
    "SE-ASE-E0009": status.HTTP_404_NOT_FOUND,
    "SE-ASE-E0012": status.HTTP_400_BAD_REQUEST,
    "SE-ASE-E0013": status.HTTP_400_BAD_REQUEST,
    "SE-ASE-E0018": status.HTTP_503_SERVICE_UNAVAILABLE,
    "SE-ASE-E0021": status.HTTP_400_BAD_REQUEST,
    "SE-ASE-E0022": status.HTTP_400_BAD_REQUEST,
    "SE-ASE-W0018": status.HTTP_409_CONFLICT,
    "SE-ASE-W0019": status.HTTP_409_CONFLICT,
    "SE-ASE-W0020": status.HTTP_409_CONFLICT,
    "SE-ASE-W0021": status.HTTP_409_CONFLICT,
}


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"


def body(exc: AseError) -> dict[str, str]:
    key = "warning" if exc.code.level.name == "WARNING" else "error"
    return {key: exc.public}


def _flatten(detail: Any, prefix: str = "") -> list[str]:
    if isinstance(detail, dict):
        return [m for k, v in detail.items() for m in _flatten(v, f"{prefix}{k}: " if k != "non_field_errors" else "")]
    if isinstance(detail, list):
        return [m for item in detail for m in _flatten(item, prefix)]
    return [f"{prefix}{detail}"]


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, AseError):
        return Response(body(exc), status=STATUS.get(exc.code.id, status.HTTP_400_BAD_REQUEST))
    if isinstance(exc, UnknownService):
        return Response({"error": str(exc)}, status=status.HTTP_404_NOT_FOUND)
    if isinstance(exc, Http404):
        return Response({"error": str(exc) or "Not found."}, status=status.HTTP_404_NOT_FOUND)
    if isinstance(exc, (ParameterError, DescriptorError)):
        return Response({"error": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
    response = drf_exception_handler(exc, context)
    if response is not None:
        if isinstance(exc, exceptions.ValidationError):
            response.data = {"error": "; ".join(_flatten(exc.detail)), "fields": exc.detail}
        elif isinstance(exc, exceptions.APIException):
            response.data = {"error": " ".join(_flatten(exc.detail))}
        return response
    view = context.get("view")
    log.error("api: unexpected %s in %s: %s", type(exc).__name__, type(view).__name__, exc)
    return Response({"error": "Internal error."}, status=status.HTTP_500_INTERNAL_SERVER_ERROR)
