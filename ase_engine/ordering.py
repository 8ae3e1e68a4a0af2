"""Ordered delivery per group (opt-in: ``ordered-groups``; the group is named by ``X-ASE-Group``).

How order is kept, and kept without holding messages in memory:

- the ingress sends a grouped message with ``JMSXGroupID``: ActiveMQ gives
  every message of a group to the one consumer that owns the group, in queue
  order; inside that consumer (a sending process) a group has one *lane*: its
  messages are invoked one after the other, never two at once;
- when the head of a group fails and waits for a retry (or, with
  ``ordered-group-blocked=wait``, is parked after its last try) the group is
  *blocked by* that message, in Redis (shared by every instance); before the
  move, so a crash cannot let a follower overtake it. Followers arriving
  meanwhile are moved, in order, to the group's own *hold queue*
  ``<pending>_group_<hash>``: they wait in the broker, and other groups flow;
- when the blocker comes back (the retry pump, or a recycle) and its answer
  settles it, the group is *draining*: the lane reads the hold queue (no
  selector: one queue per group, so ActiveMQ's 200-message selector window
  cannot hide anything) and invokes the held messages in order, then frees the
  group. A held message that fails blocks the group again and the rest stay
  held. A lane that dies while draining leaves the state ``draining``: the
  next message of the group resumes the drain first.

With ``ordered-group-blocked=skip`` a failing head never blocks its group:
messages are still invoked one at a time and in order, but a retried or
parked head is passed by its followers.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any

from ase_engine.config import ServiceUnitConfig

GROUP_PREFIX = "ase:group:"
INDEX_PREFIX = "ase:groups:"
BLOCKED, DRAINING = "blocked", "draining"


def hold_queue(unit: ServiceUnitConfig, group: str) -> str:
    """The queue where the followers of a blocked group wait (a name the broker accepts whatever the group)."""
    return f"{unit.areas.pending}_group_{hashlib.sha1(group.encode()).hexdigest()[:16]}"


@dataclass(frozen=True)
class GroupState:
    service: str
    group: str
    phase: str
    blocker: str
    since_ms: int
    reason: str
    hold_queue: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "service": self.service,
            "group": self.group,
            "phase": self.phase,
            "blocked_by": self.blocker,
            "since_ms": self.since_ms,
            "reason": self.reason,
            "hold_queue": self.hold_queue,
        }


class OrderedGroups:
    """The blocked groups of every unit, in Redis (``redis.Redis`` client, thread-safe)."""

    def __init__(self, client: Any) -> None:
        self.client = client

    @staticmethod
    def _key(service: str, group: str) -> str:
        return f"{GROUP_PREFIX}{service}:{group}"

    def state(self, service: str, group: str) -> GroupState | None:
        raw = self.client.hgetall(self._key(service, group))
        return self._state(service, group, raw)

    @staticmethod
    def _state(service: str, group: str, raw: dict[bytes, bytes]) -> GroupState | None:
        if not raw:
            return None
        fields = {k.decode(): v.decode() for k, v in raw.items()}
        return GroupState(
            service=service,
            group=group,
            phase=fields.get("phase", BLOCKED),
            blocker=fields.get("blocker", ""),
            since_ms=int(fields.get("since") or 0),
            reason=fields.get("reason", ""),
            hold_queue=fields.get("hold", ""),
        )

    def block(self, unit: ServiceUnitConfig, group: str, blocker: str, reason: str) -> None:
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(
            self._key(unit.service, group),
            mapping={
                "phase": BLOCKED,
                "blocker": blocker,
                "since": int(time.time() * 1000),
                "reason": reason,
                "hold": hold_queue(unit, group),
            },
        )
        pipe.sadd(INDEX_PREFIX + unit.service, group)
        pipe.execute()

    def draining(self, service: str, group: str) -> None:
        self.client.hset(self._key(service, group), "phase", DRAINING)

    def release(self, service: str, group: str) -> None:
        pipe = self.client.pipeline(transaction=True)
        pipe.delete(self._key(service, group))
        pipe.srem(INDEX_PREFIX + service, group)
        pipe.execute()

    def blocked(self, service: str) -> list[GroupState]:
        """Every group of ``service`` that waits for its head or is being drained."""
        groups = sorted(g.decode() for g in self.client.smembers(INDEX_PREFIX + service))
        pipe = self.client.pipeline(transaction=False)
        for group in groups:
            pipe.hgetall(self._key(service, group))
        states = [self._state(service, group, raw) for group, raw in zip(groups, pipe.execute(), strict=True)]
        return [s for s in states if s is not None]
