"""Duplicate elimination at the ingress: ``Idempotency-Key`` (seed 002: check before enqueue;
seed 001: remember an id at least until the message expires).

``once()`` wraps the persist step of one request. Without a key it only
persists. With a key, the key's state lives in Redis, shared by every web
process and surviving their restarts:

- ``p|<fingerprint>|<owner>`` while the first request holding the key is
  being persisted (a lease of ``ASE_IDEMPOTENCY_LEASE`` seconds: a web
  process that dies mid-request cannot lock the key for longer);
- ``d|<fingerprint>|<answer>`` once the broker confirmed it, kept for the
  retention window: the longer of the unit's time-to-live and
  ``ASE_IDEMPOTENCY_RETENTION`` (24 h by default).

One Lua script reads the key and claims it if absent (one round trip), so of
concurrent duplicates exactly one persists; the others poll the key until the
first one's outcome is known (at most ``ASE_IDEMPOTENCY_WAIT`` seconds, then
409 E1002): its answer (same id, I1001), or the key released because its
persist failed, in which case the next one claims it and persists. The
fingerprint (SHA-256 of MEP, content type, properties and body) tells a
repeat from a different request reusing the key: 409 E1001. Redis unreachable:
503 E1003 (the request is not accepted, so no duplicate can slip through).

The answer does not wait for the ``d|...`` write: it leaves with the event
loop's next batch of Redis commands (``console.respwire``), and a repeat that
arrives before it lands simply waits for it.

Known limit: a web process that persisted a request and died before that
write left leaves the key claimed until its lease ends; a repeat after that
is persisted again.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import time
import uuid
import weakref
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from django.conf import settings

from ase_engine import codes
from ase_engine.config import ServiceUnitConfig
from ase_engine.errors import AseError
from ase_engine.message import Message
from console.respwire import RespClient, RespError, Script

log = logging.getLogger("ase.posting.dedup")

KEY_PREFIX = "ase:idem:"

# KEYS[1] the key; ARGV: pending value, lease ms. Returns the current value, or nil once claimed.
_CLAIM = """
local v = redis.call('GET', KEYS[1])
if v then return v end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return false
"""
# KEYS[1] the key; ARGV: our pending value, the done value, retention ms. Only the owner may settle.
_COMMIT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class DuplicateRejected(AseError):
    """A keyed request that cannot be accepted; ``status`` is the HTTP answer (409 or 503)."""

    def __init__(self, status: int, code_id: str, **params: Any) -> None:
        super().__init__(code_id, **params)
        self.status = status


class _Scripts:
    def __init__(self, client: RespClient) -> None:
        self.client = client
        self.claim = client.script(_CLAIM)
        self.commit = client.script(_COMMIT)
        self.release = client.script(_RELEASE)


# One client per event loop (an asyncio connection belongs to the loop that opened it) and Redis URL.
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, _Scripts]] = weakref.WeakKeyDictionary()

# What a failing Redis raises through the client.
_REDIS_ERRORS = (RespError, OSError, TimeoutError, ValueError)


def _scripts() -> _Scripts:
    url = settings.ASE_IDEMPOTENCY_REDIS_URL or settings.REDIS_URL
    by_url = _clients.setdefault(asyncio.get_running_loop(), {})
    scripts = by_url.get(url)
    if scripts is None:
        scripts = by_url[url] = _Scripts(RespClient(url, settings.ASE_IDEMPOTENCY_REDIS_TIMEOUT))
    return scripts


def answer(message: Message) -> dict[str, str]:
    """The 202 body of an accepted request."""
    accepted_at = datetime.fromtimestamp(message.incoming_timestamp / 1000, tz=UTC)
    return {"id": message.id, "service": message.service, "accepted_at": accepted_at.isoformat()}


def fingerprint(message: Message) -> str:
    """What makes two requests "the same": MEP, content type, properties, group and body."""
    digest = hashlib.sha256()
    head = json.dumps(
        [message.mep, message.content_type, sorted(message.properties.items()), message.group], separators=(",", ":")
    )
    digest.update(head.encode())
    digest.update(b"\0")
    digest.update(message.payload)
    return digest.hexdigest()


def redis_key(service: str, key: str) -> str:
    return f"{KEY_PREFIX}{service}:{hashlib.sha256(key.encode()).hexdigest()}"


def retention_seconds(unit: ServiceUnitConfig) -> int:
    """The longer of the unit's time-to-live (or the component's) and ``ASE_IDEMPOTENCY_RETENTION``."""
    from console.component import installed_component

    ttl = unit.time_to_live if unit.time_to_live is not None else installed_component()[0].time_to_live
    return max(int(ttl), int(settings.ASE_IDEMPOTENCY_RETENTION))


async def once(
    unit: ServiceUnitConfig, message: Message, persist: Callable[[], Awaitable[None]]
) -> tuple[dict[str, str], bool]:
    """Persist ``message`` unless its ``Idempotency-Key`` was already accepted for ``unit``.

    Returns ``(answer, replayed)``: the 202 body (the first request's for a
    repeat) and whether it is a repeat. Raises ``DuplicateRejected`` (409/503)
    and whatever ``persist`` raises (the key is then released).
    """
    key = message.idempotency_key
    if not key:
        await persist()
        return answer(message), False
    service = unit.service
    name = redis_key(service, key)
    mine = fingerprint(message)
    pending = f"p|{mine}|{uuid.uuid4().hex}"
    lease_ms = int(settings.ASE_IDEMPOTENCY_LEASE * 1000)
    deadline = time.monotonic() + settings.ASE_IDEMPOTENCY_WAIT
    pause = 0.005
    try:
        scripts = _scripts()
        while True:
            current = await scripts.client.run(scripts.claim, [name], [pending, lease_ms])
            if current is None:
                break  # claimed: this request persists
            state, first_fingerprint, rest = current.decode().split("|", 2)
            if first_fingerprint != mine:
                codes.log(log, "SE-ASE-E1001", key=key, service=service)
                raise DuplicateRejected(409, "SE-ASE-E1001", key=key, service=service)
            if state == "d":
                first = json.loads(rest)
                codes.log(log, "SE-ASE-I1001", key=key, service=service, request_id=first["id"])
                return first, True
            if time.monotonic() >= deadline:
                seconds = f"{settings.ASE_IDEMPOTENCY_WAIT:g}"
                codes.log(log, "SE-ASE-E1002", key=key, service=service, seconds=seconds)
                raise DuplicateRejected(409, "SE-ASE-E1002", key=key, service=service, seconds=seconds)
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.05)
    except _REDIS_ERRORS as exc:
        reason = f"{type(exc).__name__}: {exc}"
        codes.log(log, "SE-ASE-E1003", key=key, service=service, reason=reason)
        raise DuplicateRejected(503, "SE-ASE-E1003", key=key, service=service, reason=reason) from None

    try:
        await persist()
    except Exception:
        await _settle(scripts, scripts.release, name, [pending], key, "released")
        raise
    first = answer(message)
    done = f"d|{mine}|{json.dumps(first, separators=(',', ':'))}"
    args = [pending, done, retention_seconds(unit) * 1000]
    # The answer need not wait for Redis: the commit leaves with this loop iteration's batch, and a
    # repeat arriving before it lands waits for it (as for any first request still in progress).
    future = scripts.client.submit(scripts.commit, [name], args)
    if future is None:
        await _settle(scripts, scripts.commit, name, args, key, "remembered")
    else:
        future.add_done_callback(functools.partial(_committed, key))
    return first, False


def _committed(key: str, future: asyncio.Future[Any]) -> None:
    if not future.cancelled() and future.exception() is not None:
        exc = future.exception()
        log.error(
            "Idempotency-Key '%s' not remembered (%s: %s); it is freed when its lease ends",
            key,
            type(exc).__name__,
            exc,
        )


async def _settle(scripts: _Scripts, script: Script, name: str, args: list[Any], key: str, what: str) -> None:
    """Commit or release a claim; a Redis failure here costs a duplicate check, never the request."""
    try:
        await scripts.client.run(script, [name], args)
    except _REDIS_ERRORS as exc:
        log.error(
            "Idempotency-Key '%s' not %s (%s: %s); it is freed when its lease ends", key, what, type(exc).__name__, exc
        )
