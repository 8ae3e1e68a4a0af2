"""The web process's view of the service units, cached for ``ASE_REGISTRY_TTL`` seconds.

The ingress looks a unit up on every request; reading the database each time
would cost more than persisting the message. A change (deploy, stop of the
posting process) reaches every web process within the TTL.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from django.conf import settings

from ase_engine.config import ServiceUnitConfig


@dataclass(frozen=True)
class UnitState:
    config: ServiceUnitConfig
    posting_started: bool
    # A purge or recycle of the service's area is running: posting waits (ADM-010/015, console.jobs).
    paused: bool = False
    # SHA-256 (hex) of the unit's ingress token; empty: no token required (issue 4).
    token_hash: str = ""


class Registry:
    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._units: dict[str, UnitState] = {}
        self._loaded_at = float("-inf")
        self._lock = threading.Lock()

    def peek(self, service: str) -> UnitState | None | bool:
        """Non-blocking: the cached state while it is fresh, else ``False`` (call ``get`` from a thread)."""
        if time.monotonic() - self._loaded_at >= self.ttl:
            return False
        return self._units.get(service)

    def get(self, service: str) -> UnitState | None:
        """Blocking (database) lookup; call from a thread in async code."""
        with self._lock:
            if time.monotonic() - self._loaded_at >= self.ttl:
                self._load()
            return self._units.get(service)

    def invalidate(self) -> None:
        with self._lock:
            self._loaded_at = float("-inf")

    def _load(self) -> None:
        from django.db import close_old_connections

        from console.jobs import running_services
        from console.models import ServiceUnit

        close_old_connections()
        paused = running_services()
        self._units = {
            u.service: UnitState(u.to_config(), u.posting_started, u.service in paused, u.ingress_token_hash)
            for u in ServiceUnit.objects.all()
        }
        self._loaded_at = time.monotonic()


_registry: Registry | None = None


def registry() -> Registry:
    global _registry
    if _registry is None:
        _registry = Registry(settings.ASE_REGISTRY_TTL)
    return _registry
