"""The HTTP ingress: ``POST /ase/<service>/`` (the posting process, SE-ASE-PROC-020).

Contract (DESIGN.md, "Public contract"):
- the body is stored as is with its Content-Type; ``X-ASE-MEP`` is InOnly
  (default) or RobustInOnly, anything else is 400 with E0010;
- ``X-ASE-Property-<name>`` headers are the message properties; a
  ``multipart/form-data`` body carries attachments (kept inside the body);
- 202 ``{"id", "service", "accepted_at"}`` only after the broker's receipt;
  broker down or posting process stopped: 503 with E0011; unknown service:
  404; body over ``ASE_MAX_BODY_BYTES``: 413.

It is a small ASGI application of its own rather than a Django view: it
needs no session, authentication, CSRF or template, and Django's request
cycle (middleware hooks and request signals run through thread hops in
async mode) cost it most of its throughput (docs/BENCHMARKS.md). It still
uses Django's settings, ORM (the service-unit registry) and multipart parser.
"""

from __future__ import annotations

import io
import json
import logging
import os
import threading
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.files.uploadhandler import MemoryFileUploadHandler, TemporaryFileUploadHandler
from django.http.multipartparser import MultiPartParser, MultiPartParserError

from ase_engine import codes
from ase_engine.broker import PostingPool
from ase_engine.errors import AseError, PersistenceError
from ase_engine.message import Attachment
from ase_engine.posting import Poster, build_message
from console.component import component_config
from console.history import recorder
from console.registry import UnitState, registry

log = logging.getLogger("ase.posting")

PREFIX = "/ase/"
PROPERTY_PREFIX = "x-ase-property-"

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

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


def _lookup(service: str) -> tuple[UnitState | None, Poster]:
    """The blocking part of a request (database, first connection setup): run in a thread."""
    return registry().get(service), poster()


class Reply(Exception):
    """Ends a request with ``status`` and a JSON body ``{"error": text}``."""

    def __init__(self, status: int, text: str, headers: list[tuple[bytes, bytes]] | None = None) -> None:
        super().__init__(text)
        self.status = status
        self.text = text
        self.headers = headers or []


async def application(scope: Scope, receive: Receive, send: Send) -> None:
    """ASGI entry for every ``/ase/...`` path (console.asgi routes them here)."""
    try:
        status, payload, extra = await _handle(scope, receive)
    except Reply as reply:
        status, payload, extra = reply.status, {"error": reply.text}, reply.headers
    except _ClientGone:
        return
    except Exception as exc:  # noqa: BLE001 - one line in the log, no stack trace, and a clear answer
        log.error("ingress: unexpected %s on %s: %s", type(exc).__name__, scope.get("path"), exc)
        status, payload, extra = 500, {"error": "Internal error; the request was not accepted."}, []
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _handle(scope: Scope, receive: Receive) -> tuple[int, dict[str, str], list[tuple[bytes, bytes]]]:
    service = _service(scope["path"])
    if scope["method"] != "POST":
        raise Reply(405, "Only POST is accepted on an ASE service endpoint.", [(b"allow", b"POST")])
    headers = _headers(scope)
    state = registry().peek(service)
    the_poster = _poster
    if state is False or the_poster is None:
        state, the_poster = await sync_to_async(_lookup, thread_sensitive=False)(service)
    if not isinstance(state, UnitState):
        raise Reply(404, f"Unknown ASE service '{service}'.")
    unit = state.config
    limit = settings.ASE_MAX_BODY_BYTES
    try:
        declared = int(headers.get("content-length") or 0)
    except ValueError:
        raise Reply(400, "Malformed Content-Length header.") from None
    if declared > limit:
        raise Reply(413, f"Request body of {declared} bytes exceeds the limit of {limit} bytes.")
    try:
        if not state.posting_started:
            reason = "the posting process is stopped"
            codes.log(log, "SE-ASE-E0011", area=unit.areas.pending, reason=reason)
            raise PersistenceError("SE-ASE-E0011", area=unit.areas.pending, reason=reason)
        body = await _read_body(receive, limit)
        content_type = headers.get("content-type") or "application/octet-stream"
        message = build_message(
            unit,
            body,
            content_type=content_type,
            mep=headers.get("x-ase-mep"),
            properties=_properties(headers),
            attachments=_attachments(content_type, body),
            idempotency_key=headers.get("idempotency-key"),
        )
        await the_poster.post(unit, message)
    except PersistenceError as exc:
        raise Reply(503, exc.public) from None
    except AseError as exc:
        codes.log(log, exc.code.id, **exc.params)
        raise Reply(400, exc.public) from None
    accepted_at = datetime.fromtimestamp(message.incoming_timestamp / 1000, tz=UTC)
    return 202, {"id": message.id, "service": unit.service, "accepted_at": accepted_at.isoformat()}, []


def _service(path: str) -> str:
    """``/ase/<service>/`` → ``<service>``; anything else is not an endpoint."""
    name = path[len(PREFIX) :].removesuffix("/")
    if not name or "/" in name:
        raise Reply(404, f"No ASE service endpoint at '{path}'.")
    return name


def _headers(scope: Scope) -> dict[str, str]:
    """Request headers by lower-case name; repeated headers joined with ', ' as HTTP allows."""
    headers: dict[str, str] = {}
    for raw_name, raw_value in scope["headers"]:
        name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return headers


class _ClientGone(Exception):
    pass


async def _read_body(receive: Receive, limit: int) -> bytes:
    """The whole body; 413 past ``limit`` (a chunked body declares no length)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        event = await receive()
        if event["type"] == "http.disconnect":
            raise _ClientGone
        chunk = event.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise Reply(413, f"Request body exceeds the limit of {limit} bytes.")
        chunks.append(chunk)
        if not event.get("more_body", False):
            return b"".join(chunks)


def _properties(headers: dict[str, str]) -> dict[str, str]:
    """``X-ASE-Property-<name>`` headers; HTTP header names are case-insensitive, so names are lower case."""
    return {
        name[len(PROPERTY_PREFIX) :]: value
        for name, value in headers.items()
        if name.startswith(PROPERTY_PREFIX) and len(name) > len(PROPERTY_PREFIX)
    }


def _attachments(content_type: str, body: bytes) -> list[Attachment]:
    """Describe the parts of a multipart body (400 if malformed); the bytes themselves stay in the body."""
    if not content_type.lower().startswith("multipart/form-data"):
        return []
    meta = {"CONTENT_TYPE": content_type, "CONTENT_LENGTH": str(len(body))}
    handlers = [MemoryFileUploadHandler(), TemporaryFileUploadHandler()]
    try:
        fields, files = MultiPartParser(meta, io.BytesIO(body), handlers, settings.DEFAULT_CHARSET).parse()
    except MultiPartParserError as exc:
        raise Reply(400, f"Malformed multipart/form-data body: {exc}") from None
    parts = [
        Attachment(name=name, filename=None, content_type="text/plain", size=len(value.encode()))
        for name, value in fields.items()
    ]
    for name, upload in files.items():
        parts.append(
            Attachment(name=name, filename=upload.name, content_type=upload.content_type or "", size=upload.size)
        )
    return parts
