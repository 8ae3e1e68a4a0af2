"""The posting process (SE-ASE-PROC-020): persist a one-way request, then acknowledge.

``Poster.post`` returns only after ActiveMQ's RECEIPT for the persistent SEND
(DESIGN invariant 1). Any failure to get that receipt is E0011: the caller
answers 503 and the client may retry.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence

from ase_engine import codes
from ase_engine.broker import PostingPool, queue
from ase_engine.config import ServiceUnitConfig
from ase_engine.errors import AseError, BrokerUnavailable, PersistenceError
from ase_engine.history import Event, EventKind, HistorySink
from ase_engine.message import MEPS, Attachment, Message, new_id, now_ms

log = logging.getLogger("ase.posting")

# Bodies above this size are written to the socket from a thread, not from the event loop.
_INLINE_SEND_LIMIT = 65_536


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
) -> Message:
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
    )


class Poster:
    def __init__(self, pool: PostingPool, history: HistorySink, instance: str = "") -> None:
        self.pool = pool
        self.history = history
        self.instance = instance

    async def post(self, unit: ServiceUnitConfig, message: Message) -> None:
        """Persist ``message`` in the service's PENDING queue; raises E0011 unless the broker confirmed."""
        area = unit.areas.pending
        headers, body = message.to_frame()
        timeout = self.pool.component.receipt_timeout
        try:
            if len(body) > _INLINE_SEND_LIMIT or not self.pool.ready():
                # A large socket write, or a connection to (re)open: not on the event loop.
                future = await asyncio.to_thread(self.pool.send, queue(area), headers, body)
            else:
                future = self.pool.send(queue(area), headers, body)
            await asyncio.wait_for(asyncio.wrap_future(future), timeout)
        except (BrokerUnavailable, TimeoutError) as exc:
            reason = str(exc) or f"no receipt from the broker within {timeout:g} s"
            codes.log(log, "SE-ASE-E0011", area=area, reason=reason)
            raise PersistenceError("SE-ASE-E0011", area=area, reason=reason) from None
        self.history.record(
            Event(
                message.id,
                unit.service,
                EventKind.POSTED,
                area=area,
                size=message.size,
                instance=self.instance,
                at_ms=message.incoming_timestamp,
            )
        )
