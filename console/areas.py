"""Persistence areas for the API, the console and the commands: list with depths, browse, message detail.

An area is identified by service + sub-type (SE-ASE-ADM-005): an unknown
service or a queue the broker does not have is E0009 (404), a bad sub-type
E0021 (400). Browsing reads the head of the area's queues through a queue
browser (see ``ase_engine.areas``): pages reach ``ASE_BROWSE_WINDOW``
messages deep per queue (the broker's ``maxBrowsePageSize``), whatever the
depth, and a page never reads more than the messages before it.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from django.conf import settings

from ase_engine import areas as engine
from ase_engine import codes
from ase_engine.areas import Browsed
from ase_engine.config import ServiceUnitConfig
from ase_engine.errors import AreaError
from ase_engine.message import H_ID
from console.component import component_config
from console.models import MessageEvent, ServiceUnit
from console.monitoring import tracked

log = logging.getLogger("ase.areas")

MAX_PAGE = 200


def resolve(service: str, subtype: str) -> tuple[ServiceUnitConfig, str, list[str]]:
    """The unit, the checked sub-type and the area's queues; E0021 for a bad sub-type, E0009 for an unknown
    service. Logs the code (no stack trace) before raising."""
    try:
        checked = engine.check_subtype(service, subtype)
        unit = ServiceUnit.objects.filter(service=service).first()
        if unit is None:
            raise AreaError("SE-ASE-E0009", area=engine.label(service, checked))
    except AreaError as exc:
        codes.log(log, exc.code.id, **exc.params)
        raise
    config = unit.to_config()
    return config, checked, engine.queues_of(config, checked)


def _ms_to_datetime(value: int | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value / 1000, tz=UTC)


def list_areas(service: str | None = None) -> list[dict[str, Any]]:
    """Every area of every unit (or of ``service``) with its depth, from the broker's statistics."""
    units = ServiceUnit.objects.all()
    if service is not None:
        units = units.filter(service=service)
    configs = [u.to_config() for u in units]
    names = [q for c in configs for q in engine.queues_of(c, engine.ALL)]
    if not names:
        return []
    sizes = tracked("areas", lambda: engine.depths(component_config(), names))
    rows = []
    for config in configs:
        for subtype in engine.LISTED:
            queues = engine.queues_of(config, subtype)
            known = [sizes.get(q) for q in queues]
            rows.append(
                {
                    "service": config.service,
                    "subtype": subtype,
                    "queues": [{"name": q, "depth": sizes.get(q)} for q in queues],
                    "depth": sum(d for d in known if d is not None),
                    "exists": bool(queues) and all(d is not None for d in known),
                }
            )
    return rows


def message_row(item: Browsed, unit: ServiceUnitConfig | None = None) -> dict[str, Any]:
    """A browse listing's line: what an operator needs to pick a message."""
    message = item.message
    subtype = engine.subtype_of_queue(unit, item.queue) if unit is not None else None
    if message is None:
        return {
            "id": item.headers.get(H_ID) or item.headers.get("message-id", ""),
            "queue": item.queue,
            "subtype": subtype,
            "malformed": True,
            "size": len(item.body),
        }
    return {
        "id": message.id,
        "queue": item.queue,
        "subtype": subtype,
        "posted_at": _ms_to_datetime(message.incoming_timestamp),
        "attempts": message.attempt,
        "last_outcome": message.last_outcome,
        "last_status": message.last_status,
        "last_error": message.last_error,
        "due_at": _ms_to_datetime(message.due),
        "size": message.size,
        "content_type": message.content_type,
        "properties": dict(message.properties),
        "malformed": False,
    }


def browse_area(
    service: str,
    subtype: str,
    offset: int = 0,
    limit: int = 50,
    match: Callable[[dict[str, str]], bool] | None = None,
) -> dict[str, Any]:
    """One page of an area's messages, oldest first; ``depth`` is the whole area, ``browsable`` what a page
    can reach (each queue's head up to ``ASE_BROWSE_WINDOW``). With ``match`` (a test on a message's
    headers), only matching messages are listed and counted by ``offset``."""
    unit, checked, queues = resolve(service, subtype)
    offset, limit = max(0, offset), max(1, min(limit, MAX_PAGE))
    component = component_config()
    window = settings.ASE_BROWSE_WINDOW

    def read() -> tuple[dict[str, int | None], list[Browsed]]:
        sizes = engine.depths(component, queues)
        missing = [q for q, size in sizes.items() if size is None]
        if missing and len(missing) == len(queues):
            raise AreaError("SE-ASE-E0009", area=engine.label(service, checked))
        plan = [(q, min(sizes.get(q) or 0, window)) for q in queues]
        return sizes, engine.browse(component, plan, offset, limit, match=match)

    try:
        sizes, items = tracked("browse", read)
    except AreaError as exc:
        codes.log(log, exc.code.id, **exc.params)
        raise
    depth = sum(size or 0 for size in sizes.values())
    browsable = sum(min(size or 0, window) for size in sizes.values())
    next_offset = offset + len(items) if offset + len(items) < browsable and items else None
    if match is not None and len(items) < limit:
        next_offset = None
    return {
        "service": service,
        "subtype": checked,
        "depth": depth,
        "browsable": browsable,
        "offset": offset,
        "limit": limit,
        "next_offset": next_offset,
        "messages": [message_row(item, unit) for item in items],
    }


def _payload(content_type: str, payload: bytes) -> dict[str, Any]:
    textual = content_type.startswith("text/") or any(
        t in content_type for t in ("json", "xml", "x-www-form-urlencoded", "multipart/")
    )
    if textual:
        try:
            return {"payload": payload.decode("utf-8"), "payload_encoding": "utf-8"}
        except UnicodeDecodeError:
            pass
    return {"payload": base64.b64encode(payload).decode("ascii"), "payload_encoding": "base64"}


def history(message_id: str) -> list[dict[str, Any]]:
    return list(
        MessageEvent.objects.filter(message_id=message_id)
        .order_by("at", "id")
        .values("kind", "at", "area", "attempt", "outcome_code", "target_status", "duration_ms", "detail", "instance")
    )


def message_detail(message_id: str) -> dict[str, Any] | None:
    """The message (payload, properties, attachments) where it sits now, and its whole history.

    The message is looked for in the browsable head of each area of its
    service (the service comes from its history). ``None`` if neither the
    history nor any area knows it.
    """
    events = history(message_id)
    service = (
        MessageEvent.objects.filter(message_id=message_id).values_list("service", flat=True).first() if events else None
    )
    unit = ServiceUnit.objects.filter(service=service).first() if service else None
    found: Browsed | None = None
    if unit is not None:
        config = unit.to_config()
        queues = engine.queues_of(config, engine.ALL)
        component = component_config()
        window = settings.ASE_BROWSE_WINDOW

        def look() -> list[Browsed]:
            plan = [(q, window) for q in queues]
            return engine.browse(component, plan, 0, 1, match=lambda h: h.get(H_ID) == message_id)

        items = tracked("message", look)
        found = items[0] if items else None
    if not events and found is None:
        return None
    detail: dict[str, Any] = {"id": message_id, "service": service, "history": events, "location": None}
    if found is not None:
        message = found.message
        detail.update(message_row(found, unit.to_config() if unit else None))
        detail["location"] = {"queue": found.queue, "subtype": detail.get("subtype")}
        if message is not None:
            detail.update(_payload(message.content_type, message.payload))
            detail["attachments"] = [a.as_dict() for a in message.attachments]
            detail["mep"] = message.mep
            detail["last_answer"] = message.last_answer
            detail["idempotency_key"] = message.idempotency_key
    return detail
