"""Target protection and ordered groups as the Django side sees them: shared state in Redis.

``protection(instance)`` and ``ordered_groups()`` build the engine's objects
for a worker; ``breaker_states()`` and ``blocked_groups()`` are the plain
functions the console and ``/api/component/status/`` show (breaker state,
consecutive failures, transitions, the instance holding the half-open probe;
groups blocked, by which message, since when).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import redis
from django.conf import settings

from ase_engine.ordering import OrderedGroups
from ase_engine.protection import Protection

log = logging.getLogger("ase.protection")


def _client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)


def protection(instance: str) -> Protection:
    return Protection(_client(), instance)


def ordered_groups() -> OrderedGroups:
    return OrderedGroups(_client())


def blocked_groups(services: list[str] | None = None) -> list[dict[str, Any]]:
    """Every blocked group of the units with ordered groups (or of the named ones)."""
    from console.models import ServiceUnit

    units = ServiceUnit.objects.filter(ordered_groups=True)
    if services is not None:
        units = units.filter(service__in=services)
    reader = ordered_groups()
    return [state.as_dict() for unit in units.order_by("service") for state in reader.blocked(unit.service)]


def breaker_states(services: list[str] | None = None) -> list[dict[str, Any]]:
    """Every unit with a circuit breaker (or the named ones), as the workers share it."""
    from console.models import ServiceUnit

    units = ServiceUnit.objects.filter(breaker_threshold__gt=0)
    if services is not None:
        units = units.filter(service__in=services)
    reader = protection("status")
    states = []
    for unit in units.order_by("service"):
        state = reader.breaker(unit.service).as_dict()
        state.update(threshold=unit.breaker_threshold, cooldown=unit.breaker_cooldown, rate_limit=unit.rate_limit)
        states.append(state)
    return states


def _iso(ms: int | None) -> str | None:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat() if ms else None


def protection_status() -> dict[str, Any]:
    """What ``/api/component/status/`` and the dashboard show: breakers, blocked groups, and why not (Redis down).

    Each breaker gets ``since`` (when it opened, ISO 8601) and each group ``since`` (when it was blocked).
    """
    try:
        breakers = breaker_states()
        groups = blocked_groups()
    except redis.RedisError as exc:
        log.warning("protection state unavailable: Redis: %s", exc)
        return {"breakers": [], "blocked_groups": [], "error": f"shared state unavailable (Redis): {exc}"}
    for breaker in breakers:
        breaker["since"] = _iso(breaker["opened_at_ms"]) if breaker["state"] != "closed" else None
    for group in groups:
        group["since"] = _iso(group["since_ms"])
    return {"breakers": breakers, "blocked_groups": groups, "error": ""}
