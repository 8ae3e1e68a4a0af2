"""The HTTP ingress: ``POST /ase/<service>/`` (the posting process, SE-ASE-PROC-020).

Contract (DESIGN.md, "Public contract"):
- the body is stored as is with its Content-Type; ``X-ASE-MEP`` is InOnly
  (default) or RobustInOnly, anything else is 400 with E0010;
- ``X-ASE-Property-<name>`` headers are the message properties; a
  ``multipart/form-data`` body carries attachments (kept inside the body);
- 202 ``{"id", "service", "accepted_at"}`` only after the broker's receipt;
  broker down or posting process stopped: 503 with E0011; unknown service:
  404; body over ``ASE_MAX_BODY_BYTES``: 413.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from datetime import UTC, datetime

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.http.multipartparser import MultiPartParser, MultiPartParserError
from django.views.decorators.csrf import csrf_exempt

from ase_engine import codes
from ase_engine.broker import PostingPool
from ase_engine.errors import AseError, PersistenceError
from ase_engine.message import Attachment
from ase_engine.posting import Poster, build_message
from console.component import component_config
from console.history import recorder
from console.registry import UnitState, registry

log = logging.getLogger("ase.posting")

PROPERTY_PREFIX = "x-ase-property-"


_poster: Poster | None = None
_poster_lock = threading.Lock()


def poster() -> Poster:
    """The process's poster: a pool of STOMP connections shared by every request."""
    global _poster
    with _poster_lock:
        if _poster is None:
            component = component_config()
            pool = PostingPool(component, size=settings.ASE_POSTING_CONNECTIONS)
            _poster = Poster(pool, recorder(), instance=f"web-{os.getpid()}")
        return _poster


def _lookup(service: str) -> tuple[UnitState | None | bool, Poster]:
    """Blocking part of a request (database, first connection setup): run in a thread."""
    return registry().get(service), poster()


def _error(status: int, text: str) -> JsonResponse:
    return JsonResponse({"error": text}, status=status)


@csrf_exempt
async def ingress(request: HttpRequest, service: str) -> JsonResponse:
    if request.method != "POST":
        response = _error(405, "Only POST is accepted on an ASE service endpoint.")
        response["Allow"] = "POST"
        return response
    state = registry().peek(service)
    the_poster = _poster
    if state is False or the_poster is None:
        state, the_poster = await sync_to_async(_lookup, thread_sensitive=False)(service)
    if not isinstance(state, UnitState):
        return _error(404, f"Unknown ASE service '{service}'.")
    unit = state.config
    try:
        declared = int(request.headers.get("Content-Length") or 0)
    except ValueError:
        return _error(400, "Malformed Content-Length header.")
    limit = settings.ASE_MAX_BODY_BYTES
    if declared > limit:
        return _error(413, f"Request body of {declared} bytes exceeds the limit of {limit} bytes.")
    try:
        if not state.posting_started:
            reason = "the posting process is stopped"
            codes.log(log, "SE-ASE-E0011", area=unit.areas.pending, reason=reason)
            raise PersistenceError("SE-ASE-E0011", area=unit.areas.pending, reason=reason)
        body = await _read_body(request, limit)
        if body is None:
            return _error(413, f"Request body exceeds the limit of {limit} bytes.")
        content_type = request.headers.get("Content-Type") or "application/octet-stream"
        message = build_message(
            unit,
            body,
            content_type=content_type,
            mep=request.headers.get("X-ASE-MEP"),
            properties=_properties(request),
            attachments=_attachments(request, content_type, body),
            idempotency_key=request.headers.get("Idempotency-Key"),
        )
        await the_poster.post(unit, message)
    except PersistenceError as exc:
        return _error(503, exc.public)
    except AseError as exc:
        codes.log(log, exc.code.id, **exc.params)
        return _error(400, exc.public)
    except _BadMultipart as exc:
        return _error(400, str(exc))
    accepted_at = datetime.fromtimestamp(message.incoming_timestamp / 1000, tz=UTC)
    return JsonResponse({"id": message.id, "service": unit.service, "accepted_at": accepted_at.isoformat()}, status=202)


async def _read_body(request: HttpRequest, limit: int) -> bytes | None:
    """The whole body, or None past ``limit`` (chunked bodies have no Content-Length)."""
    from django.core.exceptions import RequestDataTooBig

    try:
        if int(request.headers.get("Content-Length") or 0) > 65_536:
            body = await asyncio.to_thread(lambda: request.body)
        else:
            body = request.body
    except RequestDataTooBig:
        return None
    return body if len(body) <= limit else None


def _properties(request: HttpRequest) -> dict[str, str]:
    """``X-ASE-Property-<name>`` headers; names are case-insensitive in HTTP, so kept in lower case."""
    return {
        name[len(PROPERTY_PREFIX) :].lower(): value
        for name, value in request.headers.items()
        if name.lower().startswith(PROPERTY_PREFIX) and len(name) > len(PROPERTY_PREFIX)
    }


class _BadMultipart(ValueError):
    pass


def _attachments(request: HttpRequest, content_type: str, body: bytes) -> list[Attachment]:
    """Describe the parts of a multipart body; the bytes themselves stay in the body."""
    if not content_type.lower().startswith("multipart/form-data"):
        return []
    import io

    meta = {**request.META, "CONTENT_TYPE": content_type, "CONTENT_LENGTH": str(len(body))}
    try:
        fields, files = MultiPartParser(meta, io.BytesIO(body), request.upload_handlers, request.encoding).parse()
    except MultiPartParserError as exc:
        raise _BadMultipart(f"Malformed multipart/form-data body: {exc}") from None
    parts = [
        Attachment(name=n, filename=None, content_type="text/plain", size=len(v.encode())) for n, v in fields.items()
    ]
    for name, upload in files.items():
        parts.append(
            Attachment(name=name, filename=upload.name, content_type=upload.content_type or "", size=upload.size)
        )
    return parts
