"""Target protection shared by every sending instance: a circuit breaker and a rate limit per service unit.

Both keep their state in Redis, so every worker (component instance) sees the
same breaker and draws from the same bucket; each decision is one Lua script
(one round trip, atomic). Redis's clock (``TIME``) is the only clock, so
instances on several machines agree.

Circuit breaker (opt-in: ``circuit-breaker-threshold`` > 0), a hash
``ase:breaker:<service>``:

- **closed**: requests flow; each error or timeout of the target counts one
  consecutive failure, an acknowledgement or a fault (the target answered)
  resets the count. At ``threshold`` consecutive failures it **opens** (W1001).
- **open**: every instance pauses the unit's sending (it unsubscribes: the
  requests stay in PENDING, untouched) for ``circuit-breaker-cooldown`` seconds.
- **half-open**: after the cool-down one instance wins the probe (I1002) and
  lets exactly one request through; success **closes** the breaker (I1003)
  and every instance resumes, failure opens it again for another cool-down.
  A probe whose instance died is taken over once its lease ends.

Rate limit (opt-in: ``rate-limit`` > 0 messages/s): a GCRA bucket
``ase:rate:<service>`` holding the theoretical arrival time of the next
request; each call reserves the next slot and says how long to wait for it,
so N instances together never exceed the rate (bursts of one).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from ase_engine import codes
from ase_engine.config import ServiceUnitConfig

log = logging.getLogger("ase.protection")

BREAKER_PREFIX = "ase:breaker:"
RATE_PREFIX = "ase:rate:"

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"

_NOW_MS = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# KEYS[1] breaker; ARGV: failed (0/1), threshold, cooldown ms. Returns {previous state, new state, failures}.
_RECORD = (
    _NOW_MS
    + """
local k = KEYS[1]
local state = redis.call('HGET', k, 'state') or 'closed'
if ARGV[1] == '1' then
  local failures = redis.call('HINCRBY', k, 'failures', 1)
  redis.call('HINCRBY', k, 'errors', 1)
  if state == 'half_open' or (state == 'closed' and failures >= tonumber(ARGV[2])) then
    redis.call('HSET', k, 'state', 'open', 'opened_at', now, 'until', now + tonumber(ARGV[3]), 'probe', '')
    redis.call('HINCRBY', k, 'opens', 1)
    return {state, 'open', failures}
  end
  return {state, state, failures}
end
if state == 'half_open' then
  redis.call('HSET', k, 'state', 'closed', 'failures', 0, 'probe', '', 'closed_at', now)
  redis.call('HINCRBY', k, 'closes', 1)
  return {state, 'closed', 0}
end
if state == 'closed' and redis.call('HGET', k, 'failures') ~= '0' then
  redis.call('HSET', k, 'failures', 0)
end
return {state, state, 0}
"""
)

# KEYS[1] breaker; ARGV: instance, lease ms. 1 if this instance now holds the probe.
_TRY_PROBE = (
    _NOW_MS
    + """
local k = KEYS[1]
local v = redis.call('HMGET', k, 'state', 'until', 'probe', 'probe_until')
local state, probe = v[1], v[3]
if (state == 'open' and now >= tonumber(v[2] or '0'))
   or (state == 'half_open' and (probe == ARGV[1] or now >= tonumber(v[4] or '0'))) then
  redis.call('HSET', k, 'state', 'half_open', 'probe', ARGV[1], 'probe_until', now + tonumber(ARGV[2]))
  redis.call('HINCRBY', k, 'probes', 1)
  return 1
end
return 0
"""
)

# KEYS[1] bucket; ARGV: interval in microseconds. Returns microseconds to wait for the reserved slot.
_RESERVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
redis.call('SET', KEYS[1], string.format('%d', tat + interval), 'PX', math.ceil((tat + interval - now) / 1000) + 1000)
return tat - now
"""


@dataclass(frozen=True)
class BreakerState:
    """One unit's breaker as every instance sees it; times in ms since the epoch (Redis clock)."""

    service: str
    state: str = CLOSED
    failures: int = 0
    opened_at: int | None = None
    until: int | None = None
    probe: str = ""
    opens: int = 0
    closes: int = 0
    probes: int = 0
    errors: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "service": self.service,
            "state": self.state,
            "consecutive_failures": self.failures,
            "opened_at_ms": self.opened_at,
            "half_open_after_ms": self.until,
            "probe_instance": self.probe or None,
            "opens": self.opens,
            "closes": self.closes,
            "probes": self.probes,
            "errors": self.errors,
        }


class Protection:
    """The breaker and the rate limit over one Redis client (``redis.Redis``, thread-safe)."""

    def __init__(self, client: Any, instance: str) -> None:
        self.client = client
        self.instance = instance
        self._record = client.register_script(_RECORD)
        self._try_probe = client.register_script(_TRY_PROBE)
        self._reserve = client.register_script(_RESERVE)

    # -- circuit breaker -------------------------------------------------------

    def breaker(self, service: str) -> BreakerState:
        raw = {k.decode(): v.decode() for k, v in self.client.hgetall(BREAKER_PREFIX + service).items()}

        def number(name: str) -> int | None:
            value = raw.get(name)
            return int(value) if value else None

        return BreakerState(
            service=service,
            state=raw.get("state", CLOSED),
            failures=number("failures") or 0,
            opened_at=number("opened_at"),
            until=number("until"),
            probe=raw.get("probe", ""),
            opens=number("opens") or 0,
            closes=number("closes") or 0,
            probes=number("probes") or 0,
            errors=number("errors") or 0,
        )

    def may_invoke(self, unit: ServiceUnitConfig, probing: bool) -> bool:
        """May this instance invoke the target now? (closed; or half-open with this instance's probe)."""
        if unit.breaker_threshold <= 0:
            return True
        state, probe = self.client.hmget(BREAKER_PREFIX + unit.service, "state", "probe")
        state = (state or b"closed").decode()
        if state == CLOSED:
            return True
        return state == HALF_OPEN and probing and (probe or b"").decode() == self.instance

    def record(self, unit: ServiceUnitConfig, failed: bool) -> str | None:
        """Count one answer; returns the new state on a transition (logged here), else ``None``."""
        if unit.breaker_threshold <= 0:
            return None
        raw_previous, raw_state, failures = self._record(
            keys=[BREAKER_PREFIX + unit.service],
            args=[1 if failed else 0, unit.breaker_threshold, unit.breaker_cooldown * 1000],
        )
        previous, state = str(raw_previous.decode()), str(raw_state.decode())
        if previous == state:
            return None
        unit_log = logging.getLogger(f"ase.sending.{unit.service}")
        if state == OPEN:
            codes.log(
                unit_log,
                "SE-ASE-W1001",
                service=unit.service,
                failures=failures,
                cooldown=unit.breaker_cooldown,
                area=unit.areas.pending,
            )
        elif state == CLOSED:
            codes.log(unit_log, "SE-ASE-I1003", service=unit.service)
        return state

    def try_probe(self, unit: ServiceUnitConfig) -> bool:
        """After the cool-down, claim the half-open probe for this instance (one instance wins)."""
        lease_ms = unit.timeout_ms + unit.breaker_cooldown * 1000 + 5000
        won = bool(self._try_probe(keys=[BREAKER_PREFIX + unit.service], args=[self.instance, lease_ms]))
        if won:
            codes.log(logging.getLogger(f"ase.sending.{unit.service}"), "SE-ASE-I1002", service=unit.service)
        return won

    def reset(self, service: str) -> None:
        """Forget a unit's breaker and bucket (undeploy, tests)."""
        self.client.delete(BREAKER_PREFIX + service, RATE_PREFIX + service)

    # -- rate limit ------------------------------------------------------------

    def reserve(self, unit: ServiceUnitConfig) -> float:
        """Reserve the unit's next sending slot; returns the seconds to wait for it (0 without a limit)."""
        if unit.rate_limit <= 0:
            return 0.0
        interval_us = max(1, int(1_000_000 / unit.rate_limit))
        return int(self._reserve(keys=[RATE_PREFIX + unit.service], args=[interval_us])) / 1_000_000
