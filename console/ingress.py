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

import asyncio
import hashlib
import hmac
import io
import json
import logging
import os
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.files.uploadhandler import MemoryFileUploadHandler, TemporaryFileUploadHandler
from django.http.multipartparser import MultiPartParser, MultiPartParserError

from ase_engine import codes
from ase_engine.errors import AseError, PersistenceError
from ase_engine.message import Attachment
from ase_engine.posting import Poster, build_message
from ase_engine.stomp_async import AsyncPostingPool
from console import dedup
from console.component import component_config
from console.history import recorder
from console.registry import UnitState, registry

log = logging.getLogger("ase.posting")

PREFIX = "/ase/"
PROPERTY_PREFIX = "x-ase-property-"

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

# One poster per event loop (a server runs one loop per process): its STOMP connections belong to that loop.
_posters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Poster] = weakref.WeakKeyDictionary()


async def poster() -> Poster:
    """This loop's poster: a pool of STOMP connections shared by every request."""
    loop = asyncio.get_running_loop()
    the_poster = _posters.get(loop)
    if the_poster is None:
        component = await sync_to_async(component_config, thread_sensitive=False)()
        pool = AsyncPostingPool(component, size=settings.ASE_POSTING_CONNECTIONS)
        the_poster = _posters.setdefault(loop, Poster(pool, recorder(), instance=f"web-{os.getpid()}"))
    return the_poster


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
    if state is False:
        state = await sync_to_async(registry().get, thread_sensitive=False)(service)
    if not isinstance(state, UnitState):
        raise Reply(404, f"Unknown ASE service '{service}'.")
    # -- issue 4 (admin operations): per-service ingress token, and posting waits during a purge/recycle --
    if state.token_hash and not _token_ok(headers.get("authorization", ""), state.token_hash):
        raise Reply(401, _TOKEN_REQUIRED, [(b"www-authenticate", b'Bearer realm="ase"')])
    if state.paused:
        state = await _wait_for_admin_job(service, state)
    # -- end issue 4 --
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
            group=headers.get("x-ase-group"),
        )
        the_poster = await poster()
        # -- duplicate elimination (console.dedup): persists unless the Idempotency-Key was accepted --
        answer, replayed = await dedup.once(unit, message, lambda: the_poster.post(unit, message))
    except dedup.DuplicateRejected as exc:  # 409 (key reused, or still in progress) or 503 (Redis down)
        raise Reply(exc.status, exc.public) from None
    except PersistenceError as exc:
        raise Reply(503, exc.public) from None
    except AseError as exc:
        codes.log(log, exc.code.id, **exc.params)
        raise Reply(400, exc.public) from None
    return 202, answer, [(b"idempotent-replayed", b"true")] if replayed else []


_TOKEN_REQUIRED = "This ASE service requires its ingress token: Authorization: Bearer <token>."


def _token_ok(authorization: str, token_hash: str) -> bool:
    """Issue 4: the request carries the unit's ingress token (only its SHA-256 is kept)."""
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return False
    digest = hashlib.sha256(token.strip().encode()).hexdigest()
    return hmac.compare_digest(digest, token_hash)


async def _wait_for_admin_job(service: str, state: UnitState) -> UnitState:
    """Issue 4: wait (``ASE_ADMIN_POSTING_WAIT`` s at most) for the purge/recycle of ``service`` to end; E0011
    (503) if it does not (SE-ASE-ADM-010: "no more requests are persisted, their processing waits")."""
    deadline = time.monotonic() + settings.ASE_ADMIN_POSTING_WAIT
    while state.paused:
        if time.monotonic() >= deadline:
            reason = "a purge or recycle of the persistence area is running"
            codes.log(log, "SE-ASE-E0011", area=state.config.areas.pending, reason=reason)
            raise Reply(503, codes.public("SE-ASE-E0011", area=state.config.areas.pending, reason=reason))
        await asyncio.sleep(0.1)
        fresh = await sync_to_async(registry().get, thread_sensitive=False)(service)
        if fresh is None:
            raise Reply(404, f"Unknown ASE service '{service}'.")
        state = fresh
    return state


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
