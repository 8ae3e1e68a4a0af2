"""The posting process (SE-ASE-PROC-020): persist a one-way request, then acknowledge.

``Poster.post`` returns only after ActiveMQ's RECEIPT for the persistent SEND
(DESIGN invariant 1). Any failure to get that receipt is E0011: the caller
answers 503 and the client may retry.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from ase_engine import codes
from ase_engine.broker import queue
from ase_engine.config import ServiceUnitConfig
from ase_engine.errors import AseError, BrokerUnavailable, PersistenceError
from ase_engine.history import Event, EventKind, HistorySink
from ase_engine.message import MEPS, Attachment, Message, new_id, now_ms
from ase_engine.stomp_async import AsyncPostingPool

log = logging.getLogger("ase.posting")


def check_mep(mep: str | None) -> str:
    """The MEP of a request; only one-way patterns are accepted (E0010)."""
    value = (mep or "InOnly").strip()
    if value not in MEPS:
        raise AseError("SE-ASE-E0010", mep=value)
    return value


def build_message(
    unit: ServiceUnitConfig,
    payload: bytes,
    *,
    content_type: str | None,
    mep: str | None,
    properties: Mapping[str, str] | None = None,
    attachments: Sequence[Attachment] = (),
    idempotency_key: str | None = None,
    group: str | None = None,
) -> Message:
    """The message to persist; ``group`` (``X-ASE-Group``) is kept only for a unit with ordered groups."""
    return Message(
        id=new_id(),
        service=unit.service,
        payload=payload,
        content_type=content_type or "application/octet-stream",
        mep=check_mep(mep),
        properties=dict(properties or {}),
        attachments=tuple(attachments),
        incoming_timestamp=now_ms(),
        idempotency_key=idempotency_key,
        group=(group.strip() or None) if group and unit.ordered_groups else None,
    )


class Poster:
    def __init__(self, pool: AsyncPostingPool, history: HistorySink, instance: str = "") -> None:
        self.pool = pool
        self.history = history
        self.instance = instance

    async def post(self, unit: ServiceUnitConfig, message: Message) -> None:
        """Persist ``message`` in the service's PENDING queue; raises E0011 unless the broker confirmed."""
        area = unit.areas.pending
        headers, body = message.to_frame()
        try:
            await self.pool.send(queue(area), headers, body)
        except BrokerUnavailable as exc:
            reason = str(exc)
            codes.log(log, "SE-ASE-E0011", area=area, reason=reason)
            raise PersistenceError("SE-ASE-E0011", area=area, reason=reason) from None
        self.history.record(
            Event(
                message.id,
                unit.service,
                EventKind.POSTED,
                area=area,
                size=message.size,
                detail=posted_detail(message.idempotency_key),
                instance=self.instance,
                at_ms=message.incoming_timestamp,
            )
        )


IDEMPOTENCY_DETAIL_PREFIX = "idempotency-key: "


def posted_detail(idempotency_key: str | None) -> str:
    """The POSTED event's detail: the idempotency key, so that the console can find a message by it."""
    return f"{IDEMPOTENCY_DETAIL_PREFIX}{idempotency_key}"[:500] if idempotency_key else ""
