"""The persisted request: one immutable ``Message``, one STOMP frame.

A message is stored whole (DESIGN invariant 5): the payload bytes exactly as
received (a multipart body keeps its attachments inside it), its content
type, the properties, a summary of the attachments, the incoming timestamp
(the spec's ``org.ow2.petals.ase.ttl.incoming-timestamp``), the number of
attempts and the last outcome. Everything but the payload travels in
``ase-*`` headers so a message can be moved between queues without decoding
its body.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import uuid6

MEPS = ("InOnly", "RobustInOnly")
INCOMING_TIMESTAMP_PROPERTY = "org.ow2.petals.ase.ttl.incoming-timestamp"

H_ID = "ase-id"
H_SERVICE = "ase-service"
H_MEP = "ase-mep"
H_INCOMING = "ase-incoming-timestamp"
H_ATTEMPT = "ase-attempt"
H_PROPERTIES = "ase-properties"
H_ATTACHMENTS = "ase-attachments"
H_IDEMPOTENCY_KEY = "ase-idempotency-key"
H_LAST_OUTCOME = "ase-last-outcome"
H_LAST_STATUS = "ase-last-status"
H_LAST_ERROR = "ase-last-error"
H_LAST_ANSWER = "ase-last-answer"
H_LAST_AT = "ase-last-at"
H_DUE = "ase-due"
H_GROUP = "ase-group"
# ActiveMQ message groups: every message of a group goes to the one consumer that owns the group.
H_JMS_GROUP = "JMSXGroupID"

# The target's answer kept with a faulted message is cut to this many characters.
MAX_ANSWER_CHARS = 16_384


class MalformedMessage(ValueError):
    """A frame on an ASE queue that is not an ASE message (missing or bad headers)."""


def now_ms() -> int:
    return int(time.time() * 1000)


def new_id() -> str:
    """A UUIDv7 (RFC 9562): its first 48 bits are the Unix time in ms, so ids sort by creation time.

    The history indexes its events by message id: random (v4) ids scatter every insert over the
    whole index, which cost the ingress about a fifth of its throughput on SQLite; time-ordered ids
    append (docs/BENCHMARKS.md, "Where the time goes, third pass"). ``uuid.uuid7`` once Python 3.14 is the floor.
    """
    return str(uuid6.uuid7())


@dataclass(frozen=True)
class Attachment:
    """What the ingress saw of one multipart part; the bytes stay in the payload."""

    name: str
    filename: str | None
    content_type: str
    size: int

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "filename": self.filename, "content_type": self.content_type, "size": self.size}


@dataclass(frozen=True)
class Message:
    id: str
    service: str
    payload: bytes
    content_type: str = "application/octet-stream"
    mep: str = "InOnly"
    properties: Mapping[str, str] = field(default_factory=dict)
    attachments: tuple[Attachment, ...] = ()
    incoming_timestamp: int = field(default_factory=now_ms)
    attempt: int = 0
    idempotency_key: str | None = None
    last_outcome: str | None = None
    last_status: int | None = None
    last_error: str | None = None
    last_answer: str | None = None
    last_at: int | None = None
    due: int | None = None
    group: str | None = None

    @property
    def size(self) -> int:
        return len(self.payload)

    def with_outcome(
        self,
        outcome: str,
        *,
        status: int | None = None,
        error: str | None = None,
        answer: str | None = None,
    ) -> Message:
        """A copy that counts one more attempt and remembers its outcome."""
        return replace(
            self,
            attempt=self.attempt + 1,
            last_outcome=outcome,
            last_status=status,
            last_error=error,
            last_answer=answer[:MAX_ANSWER_CHARS] if answer is not None else None,
            last_at=now_ms(),
        )

    def to_frame(self) -> tuple[dict[str, str], bytes]:
        """STOMP headers and body. ``persistent`` is always set."""
        headers = {
            "persistent": "true",
            "content-type": self.content_type,
            H_ID: self.id,
            H_SERVICE: self.service,
            H_MEP: self.mep,
            H_INCOMING: str(self.incoming_timestamp),
            H_ATTEMPT: str(self.attempt),
        }
        if self.properties:
            headers[H_PROPERTIES] = json.dumps(dict(self.properties), separators=(",", ":"))
        if self.attachments:
            headers[H_ATTACHMENTS] = json.dumps([a.as_dict() for a in self.attachments], separators=(",", ":"))
        optional = {
            H_IDEMPOTENCY_KEY: self.idempotency_key,
            H_LAST_OUTCOME: self.last_outcome,
            H_LAST_STATUS: None if self.last_status is None else str(self.last_status),
            H_LAST_ERROR: self.last_error,
            H_LAST_ANSWER: self.last_answer,
            H_LAST_AT: None if self.last_at is None else str(self.last_at),
            H_DUE: None if self.due is None else str(self.due),
            H_GROUP: self.group,
            H_JMS_GROUP: self.group,
        }
        headers.update({k: v for k, v in optional.items() if v is not None})
        return headers, self.payload

    @classmethod
    def from_frame(cls, headers: Mapping[str, str], body: bytes | str) -> Message:
        try:
            payload = body.encode() if isinstance(body, str) else bytes(body)
            status = headers.get(H_LAST_STATUS)
            last_at = headers.get(H_LAST_AT)
            due = headers.get(H_DUE)
            return cls(
                id=headers[H_ID],
                service=headers[H_SERVICE],
                payload=payload,
                content_type=headers.get("content-type", "application/octet-stream"),
                mep=headers.get(H_MEP, "InOnly"),
                properties=json.loads(headers.get(H_PROPERTIES, "{}")),
                attachments=tuple(Attachment(**a) for a in json.loads(headers.get(H_ATTACHMENTS, "[]"))),
                incoming_timestamp=int(headers[H_INCOMING]),
                attempt=int(headers.get(H_ATTEMPT, "0")),
                idempotency_key=headers.get(H_IDEMPOTENCY_KEY),
                last_outcome=headers.get(H_LAST_OUTCOME),
                last_status=int(status) if status else None,
                last_error=headers.get(H_LAST_ERROR),
                last_answer=headers.get(H_LAST_ANSWER),
                last_at=int(last_at) if last_at else None,
                due=int(due) if due else None,
                group=headers.get(H_GROUP) or None,
            )
        except (KeyError, ValueError, TypeError) as exc:
            raise MalformedMessage(f"not an ASE message: {exc!r}") from None
